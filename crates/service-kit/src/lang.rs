//! Choosing a page's language: the entries of an `Accept-Language` header in the
//! order a visitor prefers them, and a language tag matched against the tags a
//! service has messages for. The gate's pages and queue-api's waiting room choose
//! alike through these.

/// How many entries of one `Accept-Language` header are looked at; browsers send a
/// handful, and a longer list is cut rather than sorted.
pub const MAX_ENTRIES: usize = 32;

/// The language tags of an `Accept-Language` header, the most wanted first: by
/// weight as RFC 9110 reads it (`q=`, 1 when absent; an unreadable weight counts as
/// 0), ties in the header's order, entries of weight 0 left out. Only the first
/// [`MAX_ENTRIES`] entries count.
pub fn preferred(accept_language: &str) -> Vec<&str> {
    let mut wanted: Vec<(f32, usize, &str)> = accept_language
        .split(',')
        .take(MAX_ENTRIES)
        .enumerate()
        .filter_map(|(i, item)| {
            let mut parts = item.split(';');
            let tag = parts.next()?.trim();
            let q = parts
                .find_map(|p| p.trim().strip_prefix("q=").map(|q| q.trim().parse::<f32>().unwrap_or(0.0)))
                .unwrap_or(1.0);
            (!tag.is_empty() && q > 0.0).then_some((q, i, tag))
        })
        .collect();
    wanted.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    wanted.into_iter().map(|(_, _, tag)| tag).collect()
}

/// The language a tag asks for, given `exact`, a service's lookup of one of its own
/// tags (case-insensitive): the tag itself (`ko-KR`, `ko_KR` alike), else its primary
/// subtag (`ko`). Chinese is told apart by script, else by region: `zh-Hant`, `zh-TW`,
/// `zh-HK` and `zh-MO` ask for `zh-Hant`; `zh-Hans`, `zh-CN`, `zh-SG` and a bare `zh`
/// for `zh-Hans`.
pub fn resolve<L>(tag: &str, exact: impl Fn(&str) -> Option<L>) -> Option<L> {
    let tag = tag.trim().replace('_', "-");
    if let Some(l) = exact(&tag) {
        return Some(l);
    }
    let lower = tag.to_ascii_lowercase();
    let mut subtags = lower.split('-');
    let primary = subtags.next()?;
    if primary != "zh" {
        return exact(primary);
    }
    let mut region_traditional = false;
    for s in subtags {
        match s {
            "hant" => return exact("zh-Hant"),
            "hans" => return exact("zh-Hans"),
            "tw" | "hk" | "mo" => region_traditional = true,
            _ => {}
        }
    }
    exact(if region_traditional { "zh-Hant" } else { "zh-Hans" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_by_weight_then_order_without_zero_weights() {
        assert_eq!(preferred("fr;q=0.5, ko, ja;q=0.9, de;q=0, en;q=0.9"), ["ko", "ja", "en", "fr"]);
        assert_eq!(preferred(""), Vec::<&str>::new());
        assert_eq!(preferred("xx;q=abc, ko"), ["ko"], "an unreadable weight counts as 0");
        let long = vec!["aa"; 100].join(",") + ",ko";
        assert!(!preferred(&long).contains(&"ko"), "only the first {MAX_ENTRIES} entries count");
        assert_eq!(preferred(&long).len(), MAX_ENTRIES);
    }

    #[test]
    fn tags_resolve_to_the_exact_tag_the_primary_or_the_chinese_script() {
        let have = ["en", "ko", "zh-Hans", "zh-Hant"];
        let exact = |t: &str| have.iter().find(|h| h.eq_ignore_ascii_case(t)).copied();
        assert_eq!(resolve("KO_kr", exact), Some("ko"));
        assert_eq!(resolve("en-GB", exact), Some("en"));
        assert_eq!(resolve("fr", exact), None);
        for (tag, want) in [
            ("zh", "zh-Hans"),
            ("zh-CN", "zh-Hans"),
            ("zh-SG", "zh-Hans"),
            ("zh-TW", "zh-Hant"),
            ("zh-HK", "zh-Hant"),
            ("zh-Hans-HK", "zh-Hans"),
            ("zh-Hant-CN", "zh-Hant"),
        ] {
            assert_eq!(resolve(tag, exact), Some(want), "{tag}");
        }
    }
}
