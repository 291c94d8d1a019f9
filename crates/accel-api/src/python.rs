//! Python's built-ins as upstream's parsers and error messages use them: `int(s)`,
//! which Placement applies to microversion parts and to `resources=` amounts, and a
//! string's `repr()`, which quotes the offending value in its messages. One copy, so
//! that every parser accepts exactly what Python accepts.

/// Python's `int(s)` for base 10 (surrounding whitespace, a sign, underscores between
/// digits); `None` where Python raises `ValueError`. Values past `i128` saturate:
/// callers bound what they accept.
pub fn py_int(s: &str) -> Option<i128> {
    let t = s.trim();
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    if digits.is_empty()
        || digits.starts_with('_')
        || digits.ends_with('_')
        || digits.contains("__")
        || !digits.chars().all(|c| c.is_ascii_digit() || c == '_')
    {
        return None;
    }
    let mut n: i128 = 0;
    for c in digits.chars().filter(char::is_ascii_digit) {
        n = n
            .saturating_mul(10)
            .saturating_add(i128::from(c as u8 - b'0'));
    }
    Some(if neg { -n } else { n })
}

/// Python's `repr()` of a string, as its error messages quote it.
pub fn py_repr(s: &str) -> String {
    let quote = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::new();
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(quote);
    out
}
