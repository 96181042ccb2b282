//! A queue's branding of the waiting-room page, set in the back office and kept in
//! Valkey (hash `queue:{Q}:brand`, so every instance serves it and nothing is
//! rebuilt): title, message, logo URL and two colours. Checked when written and again
//! when read, so a value written by hand can never reach a page unchecked. Beside the
//! look, one setting of how the page behaves: `nickname` (`ask` or `none`, whether
//! the page asks a nickname before entering; [`crate::identity::NicknameMode`]).

use std::collections::{BTreeMap, HashMap};

/// The settings, their limits and what they are.
pub const FIELDS: &[(&str, usize, &str)] = &[
    ("title", 80, "the page's heading and window title"),
    ("message", 600, "the text under the heading"),
    ("logo_url", 500, "a logo image on this site: a path such as /static/logo.png (no other sites: the page loads nothing from elsewhere)"),
    ("accent", 7, "the colour of buttons and the progress bar, #rgb or #rrggbb"),
    ("background", 7, "the page's background colour, #rgb or #rrggbb"),
    ("nickname", 4, "whether the page asks a nickname: ask, or none (the page enters at once as it loads; the default for a queue with an --admit-url, ask for the others)"),
];

/// A queue's branding: only settings that pass [`check`].
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct Brand(pub BTreeMap<&'static str, String>);

impl Brand {
    /// From the hash as stored, keeping what passes the checks.
    pub fn from_stored(stored: &HashMap<String, String>) -> Brand {
        Brand(
            FIELDS
                .iter()
                .filter_map(|(name, ..)| {
                    let v = stored.get(*name)?;
                    check(name, v).ok().map(|v| (*name, v))
                })
                .collect(),
        )
    }

    pub fn get(&self, name: &str) -> Option<&str> {
        self.0.get(name).map(String::as_str)
    }

    /// The page's stylesheet of brand colours (custom properties app.css reads).
    pub fn css(&self) -> String {
        let mut css = String::from(":root {\n");
        for (name, var) in [("accent", "--accent"), ("background", "--background")] {
            if let Some(c) = self.get(name) {
                css.push_str(&format!("  {var}: {c};\n"));
            }
        }
        css.push_str("}\n");
        css
    }
}

/// The settings an open page applies when its stream says the branding changed
/// (the look: `nickname` matters only before entering).
pub const SHOWN: &[&str] = &["title", "message", "logo_url", "accent", "background"];

impl Brand {
    /// What a `brand` stream event carries: the shown settings that are set.
    pub fn shown(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> =
            SHOWN.iter().filter_map(|n| Some((n.to_string(), serde_json::Value::from(self.get(n)?)))).collect();
        serde_json::Value::Object(map)
    }
}

/// A branding change is announced on the queue's promotion channel (which every
/// instance's push streams already listen to) as an event marked `branding` that
/// promoted nobody: one PUBLISH per change, however many pages are open; each
/// instance then reads the branding once.
pub fn change_notice(queue: &str) -> queue_client::events::QueueEvent {
    let at_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    queue_client::events::QueueEvent { queue: queue.to_string(), promoted: 0, waiting: 0, at_ms, branding: true }
}

/// Whether an announcement heard is a branding change (see [`change_notice`]).
pub fn is_change_notice(e: &queue_client::events::QueueEvent) -> bool {
    e.branding
}

fn colour(v: &str) -> bool {
    (v.len() == 4 || v.len() == 7) && v.starts_with('#') && v[1..].chars().all(|c| c.is_ascii_hexdigit())
}

/// A path on this site: no scheme, no other host, no spaces or control characters.
fn same_site_path(v: &str) -> bool {
    let head = v.split(['/', '?', '#']).next().unwrap_or("");
    !head.contains(':')
        && !v.starts_with("//")
        && !v.contains('\\')
        && !v.chars().any(|c| c.is_whitespace() || c.is_control())
}

/// A setting's value as stored (trimmed), or why it is refused.
pub fn check(name: &str, value: &str) -> Result<String, String> {
    let Some((_, max, _)) = FIELDS.iter().find(|(n, ..)| *n == name) else {
        return Err(format!("unknown setting {name}; the settings are {}", names()));
    };
    let v = value.trim();
    if v.chars().count() > *max {
        return Err(format!("{name} must be at most {max} characters"));
    }
    if v.chars().any(|c| c.is_control() && c != '\n') {
        return Err(format!("{name} must not contain control characters"));
    }
    match name {
        "nickname" if v != "ask" && v != "none" => Err("nickname must be ask or none".into()),
        "accent" | "background" if !colour(v) => Err(format!("{name} must be a colour such as #1d4ed8 or #fff")),
        "logo_url" if !same_site_path(v) => Err(
            "logo_url must be a path on this site such as /static/logo.png (the page loads nothing from other sites)"
                .into(),
        ),
        _ => Ok(v.to_string()),
    }
}

pub fn names() -> String {
    FIELDS.iter().map(|(n, ..)| *n).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked() {
        assert_eq!(check("title", "  Concert tickets "), Ok("Concert tickets".into()));
        assert!(check("title", &"x".repeat(81)).is_err());
        assert!(check("title", "a\u{7}b").is_err());
        assert!(check("colour", "#fff").unwrap_err().starts_with("unknown setting"));
        for ok in ["#fff", "#1D4ED8"] {
            assert!(check("accent", ok).is_ok(), "{ok}");
        }
        for bad in ["fff", "#ffff", "#12345g", "red", "#fff;}", "url(x)"] {
            assert!(check("accent", bad).is_err(), "{bad}");
        }
        for ok in ["/static/logo.png", "assets/logo.svg", "/a/b?x=1:2"] {
            assert!(check("logo_url", ok).is_ok(), "{ok}");
        }
        assert_eq!(check("nickname", " none "), Ok("none".into()));
        assert!(check("nickname", "off").is_err());
        for bad in ["https://cdn.example/logo.png", "//cdn.example/x.png", "javascript:alert(1)", "/a b.png", "\\\\x"] {
            assert!(check("logo_url", bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn stored_values_are_checked_again() {
        let stored = HashMap::from([
            ("title".to_string(), "Shop".to_string()),
            ("accent".to_string(), "red;} body{display:none".to_string()),
            ("background".to_string(), "#fafafa".to_string()),
            ("other".to_string(), "x".to_string()),
        ]);
        let b = Brand::from_stored(&stored);
        assert_eq!(b.get("title"), Some("Shop"));
        assert_eq!(b.get("accent"), None);
        assert_eq!(b.css(), ":root {\n  --background: #fafafa;\n}\n");
    }
}
