//! Text from outside made fit to show: long text cut with an ellipsis (a table cell, a name
//! from another board's database), and connection URLs with any password masked, whatever
//! form the URL carries it in.

use std::borrow::Cow;

/// `text` cut to at most `max` characters, the last of them `…` when it was cut.
pub(crate) fn ellipsis(text: &str, max: usize) -> Cow<'_, str> {
    match text.char_indices().nth(max) {
        None => text.into(),
        Some(_) => {
            let keep = max.saturating_sub(1);
            let end = text.char_indices().nth(keep).map_or(text.len(), |(i, _)| i);
            format!("{}…", &text[..end]).into()
        }
    }
}

/// URL parameters that name where and how to connect, never a secret: their values are shown.
/// Every other parameter's value is masked, `password` in any case or encoding among them.
pub(crate) const SHOWN_PARAMETERS: &[&str] = &[
    "sslmode",
    "sslrootcert",
    "connect_timeout",
    "application_name",
    "user",
    "host",
    "port",
    "dbname",
];

/// `s` with `%XX` escapes decoded where they are valid; bytes that do not form UTF-8 replaced.
pub(crate) fn percent_decode_lossy(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = (bytes[i] == b'%')
            .then(|| s.get(i + 1..i + 3))
            .flatten()
            .and_then(|h| u8::from_str_radix(h, 16).ok());
        match hex {
            Some(b) => {
                out.push(b);
                i += 3;
            }
            None => {
                out.push(bytes[i]);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A query parameter's name as a connection library reads it: percent-decoded, trimmed and
/// lower-cased (to tell a password given as `PASSWORD=` or `pass%77ord=`).
fn parameter_name(key: &str) -> String {
    percent_decode_lossy(key).trim().to_ascii_lowercase()
}

/// Where the user-info of a `scheme://userinfo@host/...` URL is: the byte range of what
/// stands between `://` and the last `@` before the query.
fn userinfo(url: &str) -> Option<std::ops::Range<usize>> {
    let start = url.find("://")? + 3;
    let end = url[start..].find('?').map_or(url.len(), |i| start + i);
    let at = url[start..end].rfind('@')?;
    Some(start..start + at)
}

/// The URL with every secret replaced by `***`: the password of its user-info (`USER:PW@`),
/// and the value of every query parameter not in [`SHOWN_PARAMETERS`] (`password`, however
/// written, included); a parameter without `=` is masked whole. For messages, logs and status
/// lines about a URL that may not even parse.
pub(crate) fn mask_url(url: &str) -> String {
    let mut out = url.to_string();
    if let Some(range) = userinfo(url) {
        if let Some(colon) = url[range.clone()].find(':') {
            out.replace_range(range.start + colon + 1..range.end, "***");
        }
    }
    if let Some(q) = out.find('?') {
        let (head, query) = out.split_at(q + 1);
        let masked: Vec<String> = query
            .split('&')
            .map(|kv| match kv.split_once('=') {
                Some((k, _)) if SHOWN_PARAMETERS.contains(&parameter_name(k).as_str()) => {
                    kv.to_string()
                }
                Some((k, _)) => format!("{k}=***"),
                None if kv.is_empty() => String::new(),
                None => "***".to_string(),
            })
            .collect();
        out = format!("{head}{}", masked.join("&"));
    }
    out
}

/// Whether a URL carries a password: in its user-info (`USER:PASSWORD@`) or as a query
/// parameter that a connection library reads as `password` (any case, percent-encoded).
pub(crate) fn url_has_password(url: &str) -> bool {
    let in_userinfo = userinfo(url).is_some_and(|r| url[r].contains(':'));
    let query = url.split_once('?').map_or("", |(_, q)| q);
    in_userinfo
        || query
            .split('&')
            .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
            .any(|k| parameter_name(k) == "password")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn long_text_is_cut_at_a_character_with_an_ellipsis() {
        assert_eq!(ellipsis("short", 10), "short");
        assert_eq!(ellipsis("exactly10!", 10), "exactly10!");
        assert_eq!(ellipsis("eleven chars", 10), "eleven ch…");
        let long = "é".repeat(100_000);
        let cut = ellipsis(&long, 80);
        assert_eq!(cut.chars().count(), 80);
        assert!(cut.ends_with('…'));
        assert_eq!(ellipsis("abc", 0), "…");
    }

    #[test]
    fn every_form_of_a_password_is_found_and_masked() {
        for (url, masked) in [
            ("postgres://u:hunter2@h/db", "postgres://u:***@h/db"),
            (
                "postgres://u@h/db?password=hunter2&sslmode=require",
                "postgres://u@h/db?password=***&sslmode=require",
            ),
            (
                "postgres://u@h/db?PASSWORD=hunter2",
                "postgres://u@h/db?PASSWORD=***",
            ),
            (
                "postgres://u@h/db?Password=hunter2",
                "postgres://u@h/db?Password=***",
            ),
            (
                "postgres://u@h/db?pass%77ord=hunter2",
                "postgres://u@h/db?pass%77ord=***",
            ),
            (
                "postgres://u@h/db?%70assword=hunter2",
                "postgres://u@h/db?%70assword=***",
            ),
            (
                " postgres://u@h/db?password =hunter2",
                " postgres://u@h/db?password =***",
            ),
            ("postgres://u:hunter2@h:5432", "postgres://u:***@h:5432"),
            ("postgres://u:hunter2/x@h/db", "postgres://u:***@h/db"),
        ] {
            assert!(url_has_password(url), "{url}");
            assert_eq!(mask_url(url), masked, "{url}");
            assert!(!mask_url(url).contains("hunter2"), "{url}");
        }
        // Parameters that are no password keep their values; unknown ones are masked, and a
        // bare word that may be a pasted password too.
        for (url, masked) in [
            (
                "postgres://u@h/db?sslmode=verify-full&application_name=tx2",
                "postgres://u@h/db?sslmode=verify-full&application_name=tx2",
            ),
            ("postgres://u@h/db?pwd=hunter2", "postgres://u@h/db?pwd=***"),
            ("postgres://u@h/db?hunter2", "postgres://u@h/db?***"),
        ] {
            assert!(!url_has_password(url), "{url}");
            assert_eq!(mask_url(url), masked, "{url}");
        }
        assert!(!url_has_password("postgres://u@h/db"));
        assert!(!url_has_password("postgres://lab%40x@h/db"));
    }
}
