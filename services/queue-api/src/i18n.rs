//! The waiting room's languages: one messages file per language under
//! `static/i18n/` (`en.json`, `ko.json`, ...; adding a file adds a language, see
//! build.rs), every visible string by key. The page's language comes from `?lang=`,
//! else the best match of `Accept-Language`, else English.

use std::collections::BTreeMap;
use std::sync::LazyLock;

mod files {
    include!(concat!(env!("OUT_DIR"), "/languages.rs"));
}

/// The language every other one must match key for key, and the fallback.
pub const DEFAULT: &str = "en";

/// One language: its tag, messages by key, and the file as served.
pub struct Language {
    pub tag: &'static str,
    pub messages: BTreeMap<String, String>,
    pub source: &'static str,
}

static LANGUAGES: LazyLock<Vec<Language>> = LazyLock::new(|| {
    files::FILES
        .iter()
        .map(|&(tag, source)| {
            let messages = serde_json::from_str(source)
                .unwrap_or_else(|e| panic!("static/i18n/{tag}.json is not an object of strings: {e}"));
            Language { tag, messages, source }
        })
        .collect()
});

/// Every language, in tag order.
pub fn languages() -> &'static [Language] {
    &LANGUAGES
}

/// The language with this tag (`ko`, `ko-KR` and `KO` alike), if there is one: the
/// file of that exact tag, else the one of its primary subtag. Chinese is told apart
/// by script, else by region: `zh-Hant`, `zh-TW`, `zh-HK` and `zh-MO` are Traditional
/// (`zh-Hant.json`); `zh-Hans`, `zh-CN`, `zh-SG` and bare `zh` are Simplified
/// (`zh-Hans.json`).
pub fn find(tag: &str) -> Option<&'static Language> {
    service_kit::lang::resolve(tag, |t| languages().iter().find(|l| l.tag.eq_ignore_ascii_case(t)))
}

/// The fallback language.
pub fn default_language() -> &'static Language {
    find(DEFAULT).expect("static/i18n/en.json exists")
}

/// The page's language: `?lang=` when it names one, else the `Accept-Language` entry
/// with the highest weight that names one (weights as RFC 9110 reads them; ties in the
/// header's order), else English.
pub fn choose(query: Option<&str>, accept_language: Option<&str>) -> &'static Language {
    if let Some(l) = query.and_then(find) {
        return l;
    }
    let accept = accept_language.unwrap_or("");
    service_kit::lang::preferred(accept).into_iter().find_map(find).unwrap_or_else(default_language)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_language_has_the_same_messages_as_english() {
        let en = default_language();
        assert!(languages().len() >= 2, "English and Korean at least");
        for l in languages() {
            let keys: Vec<_> = l.messages.keys().collect();
            assert_eq!(keys, en.messages.keys().collect::<Vec<_>>(), "{}.json has other keys than en.json", l.tag);
            // A placeholder in English is in every translation, and no other.
            for (k, v) in &l.messages {
                assert_eq!(placeholders(v), placeholders(&en.messages[k]), "{}.json {k}", l.tag);
                assert!(!v.trim().is_empty(), "{}.json {k} is empty", l.tag);
            }
        }
    }

    fn placeholders(s: &str) -> Vec<&str> {
        let mut found: Vec<&str> =
            s.split('{').skip(1).filter_map(|p| p.split_once('}').map(|(name, _)| name)).collect();
        found.sort();
        found
    }

    #[test]
    fn language_from_query_then_header_then_english() {
        let tag = |q: Option<&str>, h: Option<&str>| choose(q, h).tag;
        assert_eq!(tag(None, None), "en");
        assert_eq!(tag(None, Some("ko-KR,ko;q=0.9,en-US;q=0.8,en;q=0.7")), "ko");
        assert_eq!(tag(None, Some("sv-SE, en;q=0.5, ko;q=0.8")), "ko", "by weight, not order");
        assert_eq!(tag(None, Some("sv, nl")), "en", "nothing matches");
        assert_eq!(tag(None, Some("ko;q=0, en")), "en", "q=0 means not wanted");
        assert_eq!(tag(Some("en"), Some("ko")), "en", "the query wins");
        assert_eq!(tag(Some("KO"), None), "ko");
        assert_eq!(tag(Some("xx"), Some("ko")), "ko", "an unknown ?lang= is ignored");
        assert_eq!(tag(None, Some(";;,,q=")), "en");
    }

    #[test]
    fn every_language_of_the_sale_is_there() {
        for t in ["en", "ko", "ja", "zh-Hans", "zh-Hant", "es", "fr", "de", "pt", "vi", "th", "id"] {
            assert_eq!(find(t).map(|l| l.tag), Some(t));
        }
    }

    #[test]
    fn chinese_by_script_then_region() {
        let tag = |h: &str| choose(None, Some(h)).tag;
        for simplified in ["zh", "zh-CN", "zh-SG", "zh-Hans", "zh-hans-cn", "ZH_cn", "zh-Hans-HK", "zh-MY"] {
            assert_eq!(tag(simplified), "zh-Hans", "{simplified}");
        }
        for traditional in ["zh-TW", "zh-HK", "zh-MO", "zh-Hant", "zh-hant-cn", "zh_TW", "ZH-HK"] {
            assert_eq!(tag(traditional), "zh-Hant", "{traditional}");
        }
        assert_eq!(choose(Some("zh-TW"), Some("en")).tag, "zh-Hant", "?lang= too");
        assert_eq!(choose(Some("zh-hant"), None).tag, "zh-Hant");
        assert_eq!(tag("en;q=0.5, zh-TW;q=0.9, zh-CN;q=0.8"), "zh-Hant", "by weight");
        assert_eq!(tag("zh-CN;q=0, en"), "en", "q=0 means not wanted");
        assert_eq!(tag("zhx, ja-JP"), "ja", "zhx is not Chinese");
    }

    #[test]
    fn other_languages_by_primary_subtag() {
        let tag = |h: &str| choose(None, Some(h)).tag;
        assert_eq!(tag("ja-JP"), "ja");
        assert_eq!(tag("es-419"), "es");
        assert_eq!(tag("fr-CA, en;q=0.8"), "fr");
        assert_eq!(tag("de-AT"), "de");
        assert_eq!(tag("pt-BR"), "pt");
        assert_eq!(tag("vi-VN"), "vi");
        assert_eq!(tag("th-TH"), "th");
        assert_eq!(tag("id-ID"), "id");
        assert_eq!(tag("in, ko;q=0.1"), "ko", "no file for the old tag in");
        assert_eq!(tag("sv, nl"), "en");
    }
}
