//! The Lua functions library (`lua-fallback/queue.lua`), embedded at compile time, and
//! what a loader must do with it: inject fresh entropy, know its version.

use crate::error::ClientError;

/// The library source as shipped, with its entropy placeholder.
pub(crate) const SOURCE: &str = include_str!("../../../lua-fallback/queue.lua");

/// Replaced, exactly once, by 32 random lowercase hex characters before loading.
const PLACEHOLDER: &str = "__QUEUE_ENTROPY__";

/// The line that carries the library's version: `local VERSION = "<version>"`.
const VERSION_PREFIX: &[u8] = b"local VERSION = \"";

/// Position of `needle` in `hay` at or after `from`.
const fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let mut i = from;
    while i + needle.len() <= hay.len() {
        let mut j = 0;
        while j < needle.len() && hay[i + j] == needle[j] {
            j += 1;
        }
        if j == needle.len() {
            return Some(i);
        }
        i += 1;
    }
    None
}

const fn count(hay: &[u8], needle: &[u8]) -> usize {
    let mut n = 0;
    let mut from = 0;
    while let Some(i) = find(hay, needle, from) {
        n += 1;
        from = i + needle.len();
    }
    n
}

/// The version between the quotes of the first line starting with `VERSION_PREFIX`.
const fn version_of(src: &str) -> &str {
    let bytes = src.as_bytes();
    let mut from = 0;
    let start = loop {
        match find(bytes, VERSION_PREFIX, from) {
            Some(i) if i == 0 || bytes[i - 1] == b'\n' => break i + VERSION_PREFIX.len(),
            Some(i) => from = i + 1,
            None => panic!("lua-fallback/queue.lua has no line `local VERSION = \"...\"`"),
        }
    };
    let mut end = start;
    while end < bytes.len() && bytes[end] != b'"' {
        assert!(bytes[end] != b'\n', "the VERSION line of lua-fallback/queue.lua has no closing quote");
        end += 1;
    }
    assert!(end < bytes.len() && end > start, "the VERSION of lua-fallback/queue.lua is empty or unterminated");
    let (_, rest) = bytes.split_at(start);
    let (version, _) = rest.split_at(end - start);
    match std::str::from_utf8(version) {
        Ok(v) => v,
        Err(_) => panic!("the VERSION of lua-fallback/queue.lua is not UTF-8"),
    }
}

/// The version of the embedded library (its `local VERSION = "..."` line).
pub const LIBRARY_VERSION: &str = version_of(SOURCE);

// A library without exactly one placeholder would load with the same secrets
// everywhere, or not at all: refuse to build.
const _: () = assert!(
    count(SOURCE.as_bytes(), PLACEHOLDER.as_bytes()) == 1,
    "lua-fallback/queue.lua must contain __QUEUE_ENTROPY__ exactly once"
);

/// The library ready for `FUNCTION LOAD`: the placeholder replaced by 128 fresh
/// random bits as 32 lowercase hex characters.
pub(crate) fn source_with_entropy() -> Result<String, ClientError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes)
        .map_err(|e| ClientError::Unavailable(format!("no randomness for the library's entropy: {e}")))?;
    Ok(with_entropy(&bytes))
}

fn with_entropy(bytes: &[u8; 16]) -> String {
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    SOURCE.replacen(PLACEHOLDER, &hex, 1)
}

/// Dotted numeric versions ("1", "1.2", "2.0.3"), compared part by part.
fn parse_version(v: &str) -> Option<Vec<u64>> {
    v.trim().split('.').map(|p| p.parse().ok()).collect()
}

/// Whether a library installed at `installed` should be replaced by the embedded one
/// at `embedded`: when it is older, or, for versions that do not compare, different.
/// A newer library is kept, so that an old client never downgrades a newer one
/// during a rolling upgrade.
pub(crate) fn is_outdated(installed: &str, embedded: &str) -> bool {
    match (parse_version(installed), parse_version(embedded)) {
        (Some(a), Some(b)) => a < b,
        _ => installed != embedded,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_is_read_from_the_source() {
        assert!(!LIBRARY_VERSION.is_empty());
        assert!(SOURCE.contains(&format!("local VERSION = \"{LIBRARY_VERSION}\"")));
        assert_eq!(version_of("-- x\nlocal VERSION = \"2.1\"\nlocal V = 1\n"), "2.1");
        assert_eq!(version_of("-- local VERSION = \"9\"\nlocal VERSION = \"3\""), "3");
    }

    #[test]
    fn entropy_replaces_the_placeholder_once() {
        let a = source_with_entropy().unwrap();
        let b = source_with_entropy().unwrap();
        assert!(!a.contains(PLACEHOLDER));
        assert_ne!(a, b, "each load gets its own entropy");
        assert_eq!(a.len(), SOURCE.len() - PLACEHOLDER.len() + 32);
        let fixed = with_entropy(&[0xab; 16]);
        assert!(fixed.contains(&"ab".repeat(16)));
        assert!(a.starts_with("#!lua name=queue"));
    }

    #[test]
    fn outdated_means_older() {
        assert!(is_outdated("1", "2"));
        assert!(is_outdated("1.9", "1.10"));
        assert!(is_outdated("1.2", "1.2.1"));
        assert!(!is_outdated("2", "2"));
        assert!(!is_outdated("3", "2"), "a newer library is kept");
        assert!(is_outdated("dev", "2"));
        assert!(!is_outdated("dev", "dev"));
    }
}
