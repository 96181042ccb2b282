//! Where a person is sent back after a claim or a leave: a path on this site only,
//! never another origin (no open redirect).
//!
//! A browser reads `//evil`, `/\evil`, `/\tevil` (tabs and newlines are dropped) and
//! their percent-encoded forms once decoded as another host, so any path whose start
//! could be read that way is refused, as is any backslash or control character.

use percent_encoding::{utf8_percent_encode, AsciiSet, CONTROLS};

/// Longest return path kept.
pub const MAX_RETURN_LEN: usize = 2048;

/// Bytes escaped in a Location path: what a header cannot carry plus what a browser
/// would read differently.
const UNSAFE_IN_LOCATION: &AsciiSet = &CONTROLS.add(b' ').add(b'"').add(b'<').add(b'>').add(b'`');

/// `raw` if it is a same-site path (`/...`), ready for a Location header; None otherwise.
pub fn safe_return(raw: &str) -> Option<String> {
    if raw.is_empty() || raw.len() > MAX_RETURN_LEN || !raw.starts_with('/') {
        return None;
    }
    // Every decoding a browser or a later hop might do, up to three deep.
    let mut text = raw.to_string();
    for _ in 0..4 {
        if !is_plain_path(&text) {
            return None;
        }
        let decoded = percent_encoding::percent_decode_str(&text).decode_utf8_lossy().into_owned();
        if decoded == text {
            break;
        }
        text = decoded;
    }
    Some(utf8_percent_encode(raw, UNSAFE_IN_LOCATION).to_string())
}

fn is_plain_path(s: &str) -> bool {
    let b = s.as_bytes();
    b.first() == Some(&b'/')
        && !matches!(b.get(1), Some(b'/') | Some(b'\\'))
        && !s.chars().any(|c| c == '\\' || c.is_control())
}

/// The same-site return path, `/` when absent or refused.
pub fn return_or_root(raw: Option<&str>) -> String {
    raw.and_then(safe_return).unwrap_or_else(|| "/".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_same_site_paths() {
        for ok in ["/", "/checkout", "/checkout?step=2&x=%2F", "/a/b#c", "/https://evil.example"] {
            assert!(safe_return(ok).is_some(), "{ok}");
        }
        for bad in [
            "",
            "//evil.example",
            "///evil.example",
            "https://evil.example",
            "http:/evil",
            "/\\evil.example",
            "\\\\evil.example",
            "/%2Fevil.example",
            "/%2fevil.example",
            "/%252Fevil.example",
            "/%5Cevil.example",
            "/%5cevil.example",
            "/\tevil",
            "/%09/evil.example",
            "/\n/evil.example",
            "javascript:alert(1)",
            "evil.example",
            "/a\\b",
        ] {
            assert_eq!(safe_return(bad), None, "{bad:?}");
        }
        assert_eq!(safe_return("/a b\"<").unwrap(), "/a%20b%22%3C");
        assert_eq!(safe_return("/é").unwrap(), "/%C3%A9");
        assert_eq!(return_or_root(Some("//evil")), "/");
        assert_eq!(return_or_root(None), "/");
    }
}
