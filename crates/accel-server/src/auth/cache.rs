//! A bounded in-memory cache of token validations.
//!
//! keystonemiddleware keeps a validation for `token_cache_time` seconds (memcached or
//! a process-local dict) and re-checks the token's own expiry on every hit. Here both
//! bounds are folded into one deadline per entry, fixed at insertion: the earlier of
//! "now + TTL" and the token's `expires_at`. Only successful validations are kept, as
//! keystonemiddleware 13 does; an unknown token is asked about again.
//!
//! The cache never grows past its capacity: a full cache first drops expired entries,
//! then the entry that would expire soonest. Time is a parameter so the rules are
//! tested without waiting.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// Validations keyed by token, each valid until its deadline.
#[derive(Debug)]
pub struct TokenCache<V> {
    capacity: usize,
    entries: HashMap<String, (Arc<V>, Instant)>,
}

impl<V> TokenCache<V> {
    /// A cache holding at most `capacity` tokens (0 disables caching).
    pub fn new(capacity: usize) -> Self {
        TokenCache {
            capacity,
            entries: HashMap::new(),
        }
    }

    /// The cached validation of `token`, unless its deadline has passed (an expired
    /// entry is removed on the way).
    pub fn get(&mut self, token: &str, now: Instant) -> Option<Arc<V>> {
        match self.entries.get(token) {
            Some((v, deadline)) if *deadline > now => Some(v.clone()),
            Some(_) => {
                self.entries.remove(token);
                None
            }
            None => None,
        }
    }

    /// Keeps `value` for `token` until `deadline`; a deadline not after `now` keeps
    /// nothing.
    pub fn insert(&mut self, token: &str, value: Arc<V>, deadline: Instant, now: Instant) {
        if self.capacity == 0 || deadline <= now {
            return;
        }
        if self.entries.len() >= self.capacity && !self.entries.contains_key(token) {
            self.entries.retain(|_, (_, d)| *d > now);
            if self.entries.len() >= self.capacity {
                let soonest = self
                    .entries
                    .iter()
                    .min_by_key(|(_, (_, d))| *d)
                    .map(|(k, _)| k.clone());
                if let Some(k) = soonest {
                    self.entries.remove(&k);
                }
            }
        }
        self.entries.insert(token.to_owned(), (value, deadline));
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn secs(n: u64) -> Duration {
        Duration::from_secs(n)
    }

    #[test]
    fn hit_before_deadline_miss_after() {
        let t0 = Instant::now();
        let mut c = TokenCache::new(10);
        c.insert("tok", Arc::new(1), t0 + secs(300), t0);
        assert_eq!(c.get("tok", t0 + secs(299)).as_deref(), Some(&1));
        assert_eq!(c.get("tok", t0 + secs(300)), None);
        assert!(c.is_empty(), "an expired entry is dropped when seen");
    }

    #[test]
    fn deadline_in_the_past_is_not_kept() {
        let t0 = Instant::now() + secs(10);
        let mut c = TokenCache::new(10);
        c.insert("tok", Arc::new(1), t0, t0);
        c.insert("old", Arc::new(2), t0 - secs(1), t0);
        assert!(c.is_empty());
    }

    #[test]
    fn zero_capacity_disables() {
        let t0 = Instant::now();
        let mut c = TokenCache::new(0);
        c.insert("tok", Arc::new(1), t0 + secs(300), t0);
        assert_eq!(c.get("tok", t0), None);
    }

    #[test]
    fn full_cache_drops_expired_then_soonest() {
        let t0 = Instant::now();
        let mut c = TokenCache::new(3);
        c.insert("a", Arc::new(1), t0 + secs(5), t0);
        c.insert("b", Arc::new(2), t0 + secs(100), t0);
        c.insert("c", Arc::new(3), t0 + secs(50), t0);
        // At t0+10, "a" has expired: it makes room.
        c.insert("d", Arc::new(4), t0 + secs(200), t0 + secs(10));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get("a", t0 + secs(10)), None);
        // Nothing expired: the soonest deadline ("c") goes.
        c.insert("e", Arc::new(5), t0 + secs(200), t0 + secs(10));
        assert_eq!(c.len(), 3);
        assert_eq!(c.get("c", t0 + secs(10)), None);
        for k in ["b", "d", "e"] {
            assert!(c.get(k, t0 + secs(10)).is_some(), "{k} kept");
        }
    }

    #[test]
    fn replacing_an_entry_in_a_full_cache_evicts_nothing() {
        let t0 = Instant::now();
        let mut c = TokenCache::new(2);
        c.insert("a", Arc::new(1), t0 + secs(5), t0);
        c.insert("b", Arc::new(2), t0 + secs(100), t0);
        c.insert("a", Arc::new(3), t0 + secs(50), t0);
        assert_eq!(c.get("a", t0).as_deref(), Some(&3));
        assert_eq!(c.get("b", t0).as_deref(), Some(&2));
    }
}
