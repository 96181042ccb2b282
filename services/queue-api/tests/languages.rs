//! The waiting room's languages, read from the files as shipped: every language file
//! has exactly English's keys (none empty, the same placeholders); every key the
//! page's HTML and script use is in English; every error code the API answers is
//! either told in the page's language or never reaches the page. No server needed.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn read(path: &str) -> String {
    std::fs::read_to_string(dir().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

/// Every `static/i18n/<tag>.json`, by tag.
fn languages() -> BTreeMap<String, BTreeMap<String, String>> {
    let mut found = BTreeMap::new();
    for entry in std::fs::read_dir(dir().join("static/i18n")).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|x| x == "json") {
            let tag = path.file_stem().unwrap().to_str().unwrap().to_string();
            let text = std::fs::read_to_string(&path).unwrap();
            let messages: BTreeMap<String, String> =
                serde_json::from_str(&text).unwrap_or_else(|e| panic!("{tag}.json is not an object of strings: {e}"));
            found.insert(tag, messages);
        }
    }
    found
}

fn placeholders(s: &str) -> Vec<&str> {
    let mut found: Vec<&str> = s.split('{').skip(1).filter_map(|p| p.split_once('}').map(|(name, _)| name)).collect();
    found.sort();
    found
}

/// The string literals that follow `marker` in `text` where it starts a word
/// (`t("` but not `get("`), up to the closing quote.
fn literals_after<'a>(text: &'a str, marker: &str) -> Vec<&'a str> {
    text.match_indices(marker)
        .filter(|(i, _)| !text[..*i].ends_with(|c: char| c.is_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|(i, _)| text[i + marker.len()..].split('"').next())
        .collect()
}

#[test]
fn every_language_of_the_sale_is_there() {
    let tags: BTreeSet<String> = languages().into_keys().collect();
    for t in ["en", "ko", "ja", "zh-Hans", "zh-Hant", "es", "fr", "de", "pt", "vi", "th", "id"] {
        assert!(tags.contains(t), "static/i18n/{t}.json is missing");
    }
}

#[test]
fn every_language_has_exactly_the_english_keys() {
    let all = languages();
    let en = &all["en"];
    for (tag, messages) in &all {
        let missing: Vec<_> = en.keys().filter(|k| !messages.contains_key(*k)).collect();
        let extra: Vec<_> = messages.keys().filter(|k| !en.contains_key(*k)).collect();
        assert!(missing.is_empty() && extra.is_empty(), "{tag}.json lacks {missing:?}, has extra {extra:?}");
        for (k, v) in messages {
            assert!(!v.trim().is_empty(), "{tag}.json {k} is empty");
            assert_eq!(placeholders(v), placeholders(&en[k]), "{tag}.json {k}: placeholders differ from English");
        }
        if tag != "en" {
            assert_ne!(messages["language_name"], en["language_name"], "{tag}.json is not translated");
        }
    }
}

/// Keys the page uses: `{{msg.KEY}}` in index.html; `t("KEY"` in app.js, the keys
/// its error table maps codes to, and the generic messages it falls back to.
fn keys_the_page_uses() -> BTreeSet<String> {
    let html = read("static/index.html");
    let js = read("static/app.js");
    let mut used: BTreeSet<String> = BTreeSet::new();
    used.extend(html.match_indices("{{msg.").map(|(i, _)| html[i + 6..].split("}}").next().unwrap().to_string()));
    used.extend(literals_after(&js, "t(\"").into_iter().map(String::from));
    used.extend(error_table(&js).into_values());
    used.extend(
        js.split('"').skip(1).step_by(2).filter(|s| s.starts_with("error_") && !s.contains(' ')).map(String::from),
    );
    used
}

/// app.js's `errorKeys`: error code to message key.
fn error_table(js: &str) -> BTreeMap<String, String> {
    let start = js.find("const errorKeys = {").expect("app.js has its errorKeys table");
    let body = &js[start..];
    let body = &body[..body.find("};").unwrap()];
    body.lines()
        .filter_map(|l| l.trim().trim_end_matches(',').split_once(": "))
        .map(|(code, key)| (code.trim().to_string(), key.trim().trim_matches('"').to_string()))
        .collect()
}

#[test]
fn every_key_the_page_uses_is_in_english() {
    let en = &languages()["en"];
    let used = keys_the_page_uses();
    assert!(used.len() > 30 && used.contains("join") && used.contains("error_nickname"), "{used:?}");
    let missing: Vec<_> = used.iter().filter(|k| !en.contains_key(*k)).collect();
    assert!(missing.is_empty(), "the page uses keys en.json lacks: {missing:?}");
}

/// The error codes of src/error.rs (`ApiError::parts`).
fn api_error_codes() -> BTreeSet<String> {
    let src = read("src/error.rs");
    let start = src.find("fn parts(").unwrap();
    let end = src.find("impl IntoResponse for ApiError").unwrap();
    src[start..end]
        .split('"')
        .skip(1)
        .step_by(2)
        .filter(|s| !s.is_empty() && s.chars().all(|c| c.is_ascii_lowercase() || c == '_'))
        .map(String::from)
        .collect()
}

#[test]
fn every_error_code_is_told_in_the_pages_language() {
    let js = read("static/app.js");
    let table = error_table(&js);
    // Told by loginMessage (the app's login), by the status alone (404 on a place:
    // "you are no longer in line"), or answered only to the back office.
    let login = ["identity_required", "identity_invalid", "invite_only"];
    let not_for_the_page = ["unauthorized", "admin_disabled", "not_found", "conflict", "queue_in_use", "bad_lines"];
    let codes = api_error_codes();
    assert!(codes.contains("line_full") && codes.contains("unknown_queue"), "{codes:?}");
    for code in &codes {
        assert!(
            table.contains_key(code) || login.contains(&code.as_str()) || not_for_the_page.contains(&code.as_str()),
            "error code {code} (src/error.rs) has no message in app.js's errorKeys: the page would show the English message"
        );
    }
    for code in login {
        assert!(js.contains(&format!("\"{code}\"")), "app.js's loginMessage tells {code}");
    }
    // The page never shows the server's English message.
    assert!(!js.contains("body.message"), "app.js shows the server's message");
}

#[test]
fn the_nickname_box_counts_bytes_as_the_server_does() {
    let js = read("static/app.js");
    assert!(js.contains("const NICKNAME_MAX_BYTES = 32;"), "the box's limit is the server's 32 bytes");
    assert!(js.contains("new TextEncoder().encode(s.trim()).length"), "counted in UTF-8 bytes after trimming");
    // 12 Korean syllables: 12 characters (the old maxlength let them through), 36 bytes.
    assert_eq!("가나다라마바사아자차카타".chars().count(), 12);
    assert!("가나다라마바사아자차카타".len() > 32);
}

#[test]
fn korean_and_japanese_headings_keep_words_whole() {
    let css = read("static/app.css");
    let rule = css.find(":lang(ko) h1, :lang(ja) h1").map(|i| &css[i..]).expect("a rule for ko and ja headings");
    let rule = &rule[..rule.find('}').unwrap()];
    assert!(rule.contains("word-break: keep-all") && rule.contains("overflow-wrap: anywhere"), "{rule}");
    assert!(read("static/index.html").contains("<html lang=\"{{lang}}\">"), "the page names its language");
}
