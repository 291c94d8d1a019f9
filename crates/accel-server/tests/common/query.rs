//! Query strings of an exact length, for the tests at the servers' query-size limit.

/// A query string of exactly `len` bytes: `terms` joined by `&` while they fit, then,
/// for an odd remainder, `odd` (of even length) appended, then letters
/// percent-encoded (two bytes more each) from the end until the length is met.
/// Encoding changes nothing the server decodes.
#[allow(dead_code)]
pub fn exact_query(terms: impl Iterator<Item = String>, odd: &str, len: usize) -> String {
    assert_eq!(odd.len() % 2, 0);
    let mut q = String::new();
    for t in terms {
        let extra = t.len() + usize::from(!q.is_empty());
        if q.len() + extra + odd.len() + 1 + 64 > len {
            break;
        }
        if !q.is_empty() {
            q.push('&');
        }
        q.push_str(&t);
    }
    if (len - q.len()) % 2 == 1 {
        q.push('&');
        q.push_str(odd);
    }
    let mut bytes = q.into_bytes();
    let mut i = bytes.len();
    while bytes.len() < len {
        i -= 1;
        if bytes[i].is_ascii_alphabetic() {
            let esc = format!("%{:02X}", bytes[i]);
            bytes.splice(i..=i, esc.into_bytes());
        }
    }
    let q = String::from_utf8(bytes).unwrap();
    assert_eq!(q.len(), len);
    q
}
