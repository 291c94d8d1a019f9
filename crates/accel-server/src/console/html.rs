//! HTML by hand: an escaping writer, the page shell (navigation, the noauth banner,
//! the one stylesheet and the one script), usage bars, the search box and the pager.
//!
//! No template engine: pages are small, their structure is in the Rust next to the
//! rows they show, and every value goes through [`esc`] (text and attribute context
//! alike, so a name with quotes or markup is shown, never run). Nothing here writes a
//! `style` attribute or an inline script: the Content-Security-Policy forbids both.

use std::fmt::Write;

/// Escapes text for an HTML text node or a double-quoted attribute.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Escapes a name (a provider, a resource class, a trait) and lets the browser break
/// it only after `_`, `-` or `/`, or after a `.` that a letter follows (a `<wbr>`
/// there), never inside a word or a number: `CUSTOM_ACCELERATOR_MEMORY_DEVICE` wraps
/// at its underscores, `edge-1_0000:17:00.0` after `edge-` or `1_` and never inside
/// its PCI address, `node.example.org` at its dots. The whole name is always shown.
pub fn name(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 8);
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        out.push_str(&esc(c.encode_utf8(&mut [0; 4])));
        let next = chars.peek().copied();
        let breaks = match c {
            '_' | '-' | '/' => true,
            '.' => next.is_some_and(|n| n.is_alphabetic()),
            _ => false,
        };
        if breaks && next.is_some() {
            out.push_str("<wbr>");
        }
    }
    out
}

/// Percent-encodes a query value.
pub fn qv(s: &str) -> String {
    form_urlencoded::byte_serialize(s.as_bytes()).collect()
}

/// The pages of the navigation bar: path and label.
pub const NAV: &[(&str, &str)] = &[
    ("/overview", "Overview"),
    ("/hosts", "Hosts"),
    ("/consumers", "Consumers"),
    ("/arqs", "ARQs"),
    ("/profiles", "Device profiles"),
    ("/kubernetes", "Kubernetes"),
    ("/explain", "Explain"),
];

/// Who is looking, for the header.
pub struct Viewer<'a> {
    pub user: &'a str,
    pub project: &'a str,
    /// noauth: acting as admin, which every page says.
    pub noauth: bool,
    /// Keystone mode: a logout button.
    pub session: bool,
}

/// The whole document around `body`. `stamp` is the change token the script polls
/// against (`None`: the page does not refresh by itself, e.g. a form).
pub fn page(title: &str, active: &str, viewer: &Viewer, stamp: Option<&str>, body: &str) -> String {
    let mut h = String::with_capacity(body.len() + 2048);
    let refresh = match stamp {
        Some(s) => format!(" data-stamp=\"{}\"", esc(s)),
        None => " data-refresh=\"off\"".to_owned(),
    };
    let _ = write!(
        h,
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\
         <title>{} · accel console</title>\
         <link rel=\"stylesheet\" href=\"/static/console.css\">\
         <script src=\"/static/console.js\" defer></script></head>\
         <body{refresh}><header><span class=\"brand\">accel</span><nav>",
        esc(title)
    );
    for (path, label) in NAV {
        let cls = if *path == active {
            " class=\"active\""
        } else {
            ""
        };
        let _ = write!(h, "<a href=\"{path}\"{cls}>{label}</a>");
    }
    let _ = write!(
        h,
        "</nav><span class=\"who\" data-test=\"viewer\">{} · {}</span>",
        esc(viewer.user),
        esc(viewer.project)
    );
    if viewer.session {
        h.push_str(
            "<form method=\"post\" action=\"/logout\" class=\"logout\">\
             <button type=\"submit\" data-test=\"logout\">Log out</button></form>",
        );
    }
    h.push_str("</header>");
    if viewer.noauth {
        h.push_str(
            "<div class=\"banner\" data-test=\"noauth-banner\">noauth mode: this console \
             acts as admin for anyone who can reach it, as the APIs do.</div>",
        );
    }
    let _ = write!(
        h,
        "<main id=\"content\"><h1>{}</h1>{body}</main></body></html>",
        esc(title)
    );
    h
}

/// A page for a person who is not logged in (the login form) or who may not see
/// something.
pub fn bare(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\
         <title>{} · accel console</title>\
         <link rel=\"stylesheet\" href=\"/static/console.css\"></head>\
         <body data-refresh=\"off\"><header><span class=\"brand\">accel</span></header>\
         <main id=\"content\"><h1>{}</h1>{body}</main></body></html>",
        esc(title),
        esc(title)
    )
}

/// One inventory's usage as a `<meter>` (no inline style needed) with its numbers
/// as text and as `data-` hooks for tests.
pub fn bar(
    provider: &str,
    rc: &str,
    used: i64,
    capacity: i64,
    total: i64,
    reserved: i64,
) -> String {
    let level = if capacity > 0 && used * 10 >= capacity * 9 {
        " full"
    } else {
        ""
    };
    format!(
        "<div class=\"usage{level}\" data-test=\"usage-bar\" data-provider=\"{p}\" data-rc=\"{r}\" \
         data-used=\"{used}\" data-total=\"{total}\" data-reserved=\"{reserved}\" \
         data-capacity=\"{capacity}\"><span class=\"rc\" data-test=\"rc-name\">{rn}</span>\
         <meter min=\"0\" max=\"{max}\" value=\"{used}\" low=\"{low}\" high=\"{high}\" \
         optimum=\"0\"></meter><span class=\"nums\">{used} / {capacity}{res}</span></div>",
        p = esc(provider),
        r = esc(rc),
        rn = name(rc),
        max = capacity.max(1),
        low = capacity / 2,
        high = capacity * 9 / 10,
        res = if reserved > 0 {
            format!(" (reserved {reserved})")
        } else {
            String::new()
        },
    )
}

/// The search form of a list page.
pub fn search(action: &str, value: &str, placeholder: &str) -> String {
    format!(
        "<form method=\"get\" action=\"{action}\" class=\"search\">\
         <input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"{}\" data-test=\"search\">\
         <button type=\"submit\">Search</button></form>",
        esc(value),
        esc(placeholder)
    )
}

/// The start of a list page's links: `path?q=..&` (or `path?` without a search).
pub fn list_base(path: &str, q: &str) -> String {
    if q.is_empty() {
        format!("{path}?")
    } else {
        format!("{path}?q={}&", qv(q))
    }
}

/// The head of a list page: the search box and the pager.
pub fn list_head(
    path: &str,
    q: &str,
    placeholder: &str,
    window: accel_store::estate::Window,
    shown: usize,
    total: i64,
) -> String {
    let mut h = search(path, q, placeholder);
    h.push_str(&pager(
        &list_base(path, q),
        window.offset,
        window.limit,
        shown,
        total,
    ));
    h
}

/// "rows a–b of n" and previous/next links; `base` is the URL up to the paging
/// parameters ([`list_base`]).
pub fn pager(base: &str, offset: u64, limit: u64, shown: usize, total: i64) -> String {
    let total = total.max(0) as u64;
    let mut h = format!(
        "<nav class=\"pager\" data-test=\"pager\" data-total=\"{total}\" data-offset=\"{offset}\">"
    );
    let first = if shown == 0 { 0 } else { offset + 1 };
    let _ = write!(
        h,
        "<span>{first}–{} of {total}</span>",
        offset + shown as u64
    );
    let link = |o: u64, label: &str, test: &str| {
        let url = format!("{base}offset={o}&limit={limit}");
        format!(
            " <a href=\"{}\" data-test=\"{test}\">{label}</a>",
            esc(&url)
        )
    };
    if offset > 0 {
        h.push_str(&link(offset.saturating_sub(limit), "← previous", "prev"));
    }
    if offset + (shown as u64) < total {
        h.push_str(&link(offset + limit, "next →", "next"));
    }
    h.push_str("</nav>");
    h
}

/// Epoch seconds as `YYYY-MM-DD HH:MM:SS UTC` (the zone always written: operators
/// read the console from many), and how long ago as its title.
pub fn when(epoch: i64, now: i64) -> String {
    let t = time::OffsetDateTime::from_unix_timestamp(epoch)
        .unwrap_or(time::OffsetDateTime::UNIX_EPOCH);
    let ago = (now - epoch).max(0);
    let ago = match ago {
        0..=119 => format!("{ago} s ago"),
        120..=7199 => format!("{} min ago", ago / 60),
        _ => format!("{} h ago", ago / 3600),
    };
    let (date, clock) = (
        format!("{:04}-{:02}-{:02}", t.year(), u8::from(t.month()), t.day()),
        format!("{:02}:{:02}:{:02}", t.hour(), t.minute(), t.second()),
    );
    format!(
        "<time datetime=\"{date}T{clock}Z\" data-epoch=\"{epoch}\" title=\"{ago}\">\
         {date} {clock} UTC</time>"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_quotes() {
        assert_eq!(
            esc("<a href=\"x\">'&'</a>"),
            "&lt;a href=&quot;x&quot;&gt;&#39;&amp;&#39;&lt;/a&gt;"
        );
    }

    #[test]
    fn names_break_only_after_separators_and_times_say_utc() {
        assert_eq!(
            name("CUSTOM_ACCELERATOR_MEMORY_DEVICE"),
            "CUSTOM_<wbr>ACCELERATOR_<wbr>MEMORY_<wbr>DEVICE"
        );
        assert_eq!(name("a<b>-c"), "a&lt;b&gt;-<wbr>c");
        assert_eq!(name("edge-1_0000:17:00.0"), "edge-<wbr>1_<wbr>0000:17:00.0");
        assert_eq!(name("cn.example.org"), "cn.<wbr>example.<wbr>org");
        assert_eq!(name("trailing_"), "trailing_");
        let t = when(1_700_000_000, 1_700_000_030);
        assert!(t.contains(">2023-11-14 22:13:20 UTC</time>"), "{t}");
        assert!(t.contains("datetime=\"2023-11-14T22:13:20Z\""), "{t}");
        assert!(t.contains("title=\"30 s ago\""), "{t}");
    }

    #[test]
    fn pager_links_keep_the_search_and_stop_at_the_ends() {
        let first = pager(&list_base("/hosts", "a b"), 0, 50, 50, 120);
        assert!(first.contains("1–50 of 120"));
        assert!(first.contains("href=\"/hosts?q=a+b&amp;offset=50&amp;limit=50\""));
        assert!(!first.contains("data-test=\"prev\""));
        let last = pager(&list_base("/hosts", ""), 100, 50, 20, 120);
        assert!(last.contains("101–120 of 120"));
        assert!(last.contains("offset=50"));
        assert!(!last.contains("data-test=\"next\""));
    }
}
