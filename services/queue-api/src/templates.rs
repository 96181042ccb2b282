//! The waiting-room page as a template: `{{name}}` placeholders, each replaced by its
//! value HTML-escaped (there is no way to put unescaped text in). The built-in page is
//! `static/index.html`; `--templates DIR` replaces it with `DIR/index.html`, and the
//! directory's other files are served under `assets/`. A placeholder naming no
//! variable, or a template that cannot be read, is an error at start, never a blank
//! page later. The variables are listed in docs/pages.md.

pub use service_kit::html::escape_into;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The variables every page gets besides `msg.<key>` (one per message of the page's
/// language).
pub const VARIABLES: &[&str] = &[
    "lang",
    "queue",
    "title",
    "message",
    "logo_url",
    "accent",
    "background",
    "brand_css",
    "messages_url",
    "admit_url",
    "ticket_ttl_seconds",
    "languages",
    "identity",
    "nickname",
    "sale",
    "notice",
];

/// The built-in page.
const BUILT_IN: &str = include_str!("../static/index.html");

#[derive(Debug, Clone, PartialEq)]
enum Part {
    Text(String),
    Var(String),
}

/// A parsed template.
#[derive(Debug, Clone)]
pub struct Template {
    parts: Vec<Part>,
}

fn known(name: &str) -> bool {
    VARIABLES.contains(&name)
        || name.strip_prefix("msg.").is_some_and(|k| crate::i18n::default_language().messages.contains_key(k))
}

impl Template {
    /// Parses `source` (`origin` names it in errors); every placeholder must name a
    /// variable.
    pub fn parse(source: &str, origin: &str) -> Result<Template, String> {
        let mut parts = Vec::new();
        let mut rest = source;
        while let Some(open) = rest.find("{{") {
            let line = source[..source.len() - rest.len() + open].lines().count().max(1);
            parts.push(Part::Text(rest[..open].to_string()));
            let after = &rest[open + 2..];
            let close = after.find("}}").ok_or_else(|| format!("{origin}:{line}: a `{{{{` is never closed"))?;
            let name = after[..close].trim();
            if !known(name) {
                return Err(format!(
                    "{origin}:{line}: unknown variable {{{{{name}}}}} (known: {}, msg.<key> for each message key)",
                    VARIABLES.join(", ")
                ));
            }
            parts.push(Part::Var(name.to_string()));
            rest = &after[close + 2..];
        }
        parts.push(Part::Text(rest.to_string()));
        Ok(Template { parts })
    }

    /// The page with each placeholder replaced by its value, HTML-escaped. Every
    /// variable parse() accepted has a value (the caller's map, else the message).
    pub fn render(&self, vars: &BTreeMap<&str, String>, messages: &BTreeMap<String, String>) -> String {
        let mut out =
            String::with_capacity(self.parts.iter().map(|p| if let Part::Text(t) = p { t.len() } else { 16 }).sum());
        for p in &self.parts {
            match p {
                Part::Text(t) => out.push_str(t),
                Part::Var(name) => {
                    let value = match name.strip_prefix("msg.") {
                        Some(key) => messages.get(key).map(String::as_str),
                        None => vars.get(name.as_str()).map(String::as_str),
                    };
                    escape_into(&mut out, value.unwrap_or(""));
                }
            }
        }
        out
    }
}

/// The waiting-room page and, with `--templates`, where its assets are.
#[derive(Debug, Clone)]
pub struct Pages {
    pub room: Template,
    pub assets: Option<PathBuf>,
}

/// The built-in page, parsed once.
pub static BUILT_IN_PAGES: std::sync::LazyLock<Pages> =
    std::sync::LazyLock::new(|| Pages::load(None).expect("the built-in page is a valid template"));

impl Pages {
    /// `--templates DIR`'s parser: the directory's page, checked at start.
    pub fn from_flag(dir: &str) -> Result<Pages, String> {
        Pages::load(Some(Path::new(dir)))
    }

    /// The built-in page, or `dir/index.html` with `dir`'s files as assets.
    pub fn load(dir: Option<&Path>) -> Result<Pages, String> {
        let Some(dir) = dir else {
            return Ok(Pages { room: Template::parse(BUILT_IN, "static/index.html")?, assets: None });
        };
        let file = dir.join("index.html");
        let source = std::fs::read_to_string(&file).map_err(|e| format!("template {}: {e}", file.display()))?;
        Ok(Pages { room: Template::parse(&source, &file.display().to_string())?, assets: Some(dir.to_path_buf()) })
    }

    /// An asset of the template directory by its plain file name (no directories, no
    /// hidden files), with its content type; None for anything else.
    pub fn asset(&self, name: &str) -> Option<(Vec<u8>, &'static str)> {
        let dir = self.assets.as_ref()?;
        let plain = !name.is_empty()
            && !name.starts_with('.')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'));
        if !plain || name == "index.html" {
            return None;
        }
        let kind = content_type(name)?;
        std::fs::read(dir.join(name)).ok().map(|b| (b, kind))
    }
}

/// The content types assets may have (anything else is not served).
fn content_type(name: &str) -> Option<&'static str> {
    Some(match name.rsplit_once('.')?.1 {
        "css" => "text/css; charset=utf-8",
        "js" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "png" => "image/png",
        "jpg" | "jpeg" => "image/jpeg",
        "gif" => "image/gif",
        "webp" => "image/webp",
        "svg" => "image/svg+xml",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        "txt" => "text/plain; charset=utf-8",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_escaped_and_unknown_ones_refused() {
        let t = Template::parse("<h1>{{ title }}</h1><p title=\"{{queue}}\">{{msg.join}}</p>", "t").unwrap();
        let vars = BTreeMap::from([("title", "<script>\"x\" & 'y'".to_string()), ("queue", "q\"><b>".to_string())]);
        let messages = BTreeMap::from([("join".to_string(), "Join <now>".to_string())]);
        assert_eq!(
            t.render(&vars, &messages),
            "<h1>&lt;script&gt;&quot;x&quot; &amp; &#39;y&#39;</h1><p title=\"q&quot;&gt;&lt;b&gt;\">Join &lt;now&gt;</p>"
        );
        let e = Template::parse("a\nb {{nope}}", "page.html").unwrap_err();
        assert!(e.starts_with("page.html:2: unknown variable {{nope}}"), "{e}");
        assert!(Template::parse("{{msg.no_such_message}}", "t").is_err());
        assert!(Template::parse("{{title", "t").unwrap_err().contains("never closed"));
        assert!(Template::parse("no placeholders at all", "t").is_ok());
    }

    #[test]
    fn the_built_in_page_parses() {
        Pages::load(None).unwrap();
    }

    #[test]
    fn assets_by_plain_name_only() {
        let dir = std::env::temp_dir().join(format!("queue-api-assets-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("index.html"), "<p>{{title}}</p>").unwrap();
        std::fs::write(dir.join("site.css"), "p{}").unwrap();
        std::fs::write(dir.join("notes.exe"), "x").unwrap();
        let pages = Pages::load(Some(&dir)).unwrap();
        assert_eq!(pages.asset("site.css"), Some((b"p{}".to_vec(), "text/css; charset=utf-8")));
        for bad in ["../site.css", "index.html", "notes.exe", ".hidden.css", "missing.css", ""] {
            assert!(pages.asset(bad).is_none(), "{bad}");
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
