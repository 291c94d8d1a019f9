//! A vector whose clone is cheap and whose elements can be replaced without copying
//! the rest: fixed-size chunks behind `Arc`s, copied on write.
//!
//! The placement index keeps one picture of every provider and replaces the few that
//! changed on each request that follows a write (issue 32: at 10,000 nodes and 50
//! boots a second, every candidates request follows a claim or a delete). With a plain
//! `Vec` each such refresh copied all 50,000 providers; with `Chunks` it copies the
//! chunk table (one `Arc` per [`CHUNK`] elements) and the chunks that hold a changed
//! element.

use std::sync::Arc;

/// Elements per chunk: small enough that replacing one element copies little, large
/// enough that the chunk table of 100,000 elements is a few kilobytes.
pub const CHUNK: usize = 64;

/// An immutable-by-default vector of `T` in shared chunks of [`CHUNK`] elements.
#[derive(Debug)]
pub struct Chunks<T> {
    chunks: Vec<Arc<Vec<T>>>,
    len: usize,
}

impl<T> Clone for Chunks<T> {
    /// Shares every chunk: one reference count per [`CHUNK`] elements.
    fn clone(&self) -> Self {
        Chunks {
            chunks: self.chunks.clone(),
            len: self.len,
        }
    }
}

impl<T> Default for Chunks<T> {
    fn default() -> Self {
        Chunks {
            chunks: Vec::new(),
            len: 0,
        }
    }
}

impl<T: PartialEq> PartialEq for Chunks<T> {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().eq(other.iter())
    }
}

impl<T> From<Vec<T>> for Chunks<T> {
    fn from(items: Vec<T>) -> Self {
        let len = items.len();
        let mut chunks = Vec::with_capacity(len.div_ceil(CHUNK));
        let mut items = items.into_iter();
        loop {
            let chunk: Vec<T> = items.by_ref().take(CHUNK).collect();
            if chunk.is_empty() {
                break;
            }
            chunks.push(Arc::new(chunk));
        }
        Chunks { chunks, len }
    }
}

impl<T> FromIterator<T> for Chunks<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Chunks::from(iter.into_iter().collect::<Vec<T>>())
    }
}

impl<T> Chunks<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn get(&self, i: usize) -> Option<&T> {
        self.chunks.get(i / CHUNK).and_then(|c| c.get(i % CHUNK))
    }

    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + Clone {
        self.chunks.iter().flat_map(|c| c.iter())
    }

    /// As `slice::binary_search_by_key` over the elements in order.
    pub fn binary_search_by_key<K: Ord>(
        &self,
        key: &K,
        f: impl Fn(&T) -> K,
    ) -> Result<usize, usize> {
        let (mut lo, mut hi) = (0, self.len);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match f(&self[mid]).cmp(key) {
                std::cmp::Ordering::Less => lo = mid + 1,
                std::cmp::Ordering::Greater => hi = mid,
                std::cmp::Ordering::Equal => return Ok(mid),
            }
        }
        Err(lo)
    }
}

impl<T: Clone> Chunks<T> {
    /// Mutable access to element `i`, copying its chunk first if another clone shares
    /// it. Panics when `i` is out of range, as indexing does.
    pub fn make_mut(&mut self, i: usize) -> &mut T {
        assert!(
            i < self.len,
            "index {i} out of range for {} elements",
            self.len
        );
        &mut Arc::make_mut(&mut self.chunks[i / CHUNK])[i % CHUNK]
    }

    /// Every element in order, copied into one `Vec`.
    pub fn to_vec(&self) -> Vec<T> {
        self.iter().cloned().collect()
    }
}

impl<T> std::ops::Index<usize> for Chunks<T> {
    type Output = T;

    fn index(&self, i: usize) -> &T {
        &self.chunks[i / CHUNK][i % CHUNK]
    }
}

impl<'a, T> IntoIterator for &'a Chunks<T> {
    type Item = &'a T;
    type IntoIter = Box<dyn Iterator<Item = &'a T> + 'a>;

    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clone_shares_and_writes_copy_one_chunk() {
        let a: Chunks<u32> = (0..200).collect();
        assert_eq!(a.len(), 200);
        assert_eq!(a[0], 0);
        assert_eq!(a[199], 199);
        assert_eq!(a.get(200), None);
        let mut b = a.clone();
        *b.make_mut(130) = 7;
        assert_eq!(a[130], 130);
        assert_eq!(b[130], 7);
        // Only the written chunk was copied.
        assert!(Arc::ptr_eq(&a.chunks[0], &b.chunks[0]));
        assert!(!Arc::ptr_eq(&a.chunks[2], &b.chunks[2]));
        assert_ne!(a, b);
        *b.make_mut(130) = 130;
        assert_eq!(a, b);
        assert_eq!(
            b.iter().copied().collect::<Vec<_>>(),
            (0..200).collect::<Vec<_>>()
        );
    }

    #[test]
    fn binary_search_matches_the_slice() {
        let v: Vec<i64> = (0..300).map(|i| i * 3).collect();
        let c: Chunks<i64> = v.clone().into();
        for k in -1..905 {
            assert_eq!(
                c.binary_search_by_key(&k, |x| *x),
                v.binary_search_by_key(&k, |x| *x)
            );
        }
        let empty: Chunks<i64> = Chunks::default();
        assert_eq!(empty.binary_search_by_key(&3, |x| *x), Err(0));
    }
}
