//! The gate's own pages in the visitor's language, through a real gate in front of a
//! real valkey-server: the way to the waiting room, a refused ticket, the leave
//! question, 404 and 502 (both proxy paths); the `lang` cookie over Accept-Language;
//! JSON answers keep their English message. The table itself (every message in every
//! language) is held complete by `queue_gate::i18n`'s unit tests and the test below.

mod common;

use common::*;
use queue_gate::i18n::{self, Msg};
use testkit::{Backend, ValkeyServer};
use tokio::net::TcpListener;

/// `path` asked by a browser speaking `language` (and a `lang` cookie, when given).
async fn page_in(gate: &Gate, path: &str, language: &str, cookie: Option<&str>) -> (u16, String, String, String) {
    let mut req = client().get(gate.url(path)).header("accept", HTML).header("accept-language", language);
    if let Some(c) = cookie {
        req = req.header("cookie", c);
    }
    let r = req.send().await.unwrap();
    let status = r.status().as_u16();
    let content_language =
        r.headers().get("content-language").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let location = r.headers().get("location").map(|v| v.to_str().unwrap().to_string()).unwrap_or_default();
    let body = r.text().await.unwrap();
    (status, content_language, body, location)
}

fn text(tag: &str, msg: Msg) -> String {
    queue_gate::answer::html_escape(i18n::find(tag).unwrap().text(msg))
}

#[test]
fn every_message_in_every_language() {
    assert!(i18n::LANGUAGES.len() >= 12);
    for l in i18n::LANGUAGES {
        for &m in Msg::ALL {
            assert!(l.has(m), "the gate's {} table lacks {m:?}", l.tag);
            if l.tag != "en" {
                // Translated, not English left in (a few short words aside).
                let en = i18n::english().text(m);
                assert!(l.text(m) != en || en.len() < 8, "the gate's {} table has {m:?} in English", l.tag);
            }
        }
    }
}

#[tokio::test]
async fn the_gates_pages_speak_the_visitors_language() {
    let Proxied { valkey: _s, gate, .. } = Proxied::start(ValkeyServer::start(Backend::Module)).await;

    // The way to the waiting room, in Japanese.
    let (status, lang, body, location) = page_in(&gate, "/checkout", "ja-JP,ja;q=0.9,en;q=0.5", None).await;
    assert_eq!((status, lang.as_str()), (302, "ja"), "{body}");
    assert!(location.contains("queue=drop"), "{location}");
    assert!(body.contains("<html lang=\"ja\">") && body.contains(&text("ja", Msg::ToWaitingRoom)), "{body}");

    // A refused ticket, in Traditional Chinese (zh-TW), with the way back.
    let (status, lang, body, _) = page_in(&gate, "/gate/claim?queue=drop&ticketId=nosuch", "zh-TW", None).await;
    assert_eq!((status, lang.as_str()), (401, "zh-Hant"), "{body}");
    assert!(body.contains(&text("zh-Hant", Msg::InvalidTicket)) && body.contains(&text("zh-Hant", Msg::BackToRoom)));
    // Simplified for zh-CN.
    let (_, lang, body, _) = page_in(&gate, "/gate/claim?queue=drop&ticketId=nosuch", "zh-CN", None).await;
    assert_eq!(lang, "zh-Hans");
    assert!(body.contains(&text("zh-Hans", Msg::InvalidTicket)), "{body}");
    // Programs keep the English message.
    let r = client().get(gate.url("/gate/claim?queue=drop&ticketId=nosuch")).header("accept-language", "ko");
    let json: serde_json::Value = r.send().await.unwrap().json().await.unwrap();
    assert_eq!(json["error"], "invalid_ticket");
    assert_eq!(json["message"], "This ticket is unknown or was already used.");

    // The leave question asked of a visit from another site, in Thai.
    let r = client()
        .get(gate.url("/gate/leave?queue=drop"))
        .header("accept", HTML)
        .header("accept-language", "th-TH")
        .header("sec-fetch-site", "cross-site")
        .send()
        .await
        .unwrap();
    let body = r.text().await.unwrap();
    assert!(body.contains(&text("th", Msg::LeaveQuestion)) && body.contains(&text("th", Msg::LeaveButton)), "{body}");
    assert!(body.contains("<form method=\"post\""), "{body}");

    // A `lang` cookie wins over Accept-Language; an unknown one is ignored.
    let (status, lang, body, _) = page_in(&gate, "/gate/nothing-here", "ko", Some("lang=de")).await;
    assert_eq!((status, lang.as_str()), (404, "de"));
    assert!(body.contains(&text("de", Msg::NotFound)), "{body}");
    let (_, lang, _, _) = page_in(&gate, "/gate/nothing-here", "ko", Some("lang=xx")).await;
    assert_eq!(lang, "ko");
    // No language the gate has: English.
    let (_, lang, body, _) = page_in(&gate, "/gate/nothing-here", "sv, nl;q=0.5", None).await;
    assert_eq!(lang, "en");
    assert!(body.contains("There is no such page."), "{body}");
    gate.stop().await;
}

#[tokio::test]
async fn the_502_page_in_the_visitors_language_on_both_paths() {
    let valkey = ValkeyServer::start(Backend::Module);
    let dir = tempfile::tempdir().unwrap();
    // A port nothing listens on.
    let free = TcpListener::bind("127.0.0.1:0").await.unwrap().local_addr().unwrap();
    for fast in [false, true] {
        let mut c = config(&valkey, Some(free), &key_file(dir.path(), "k.pem"));
        c.fast_path = fast;
        let gate = Gate::start(c).await;
        let (status, lang, body, _) = page_in(&gate, "/about", "vi-VN,vi;q=0.9", None).await;
        assert_eq!((status, lang.as_str()), (502, "vi"), "fast path {fast}: {body}");
        assert!(body.contains(&text("vi", Msg::Unreachable)), "fast path {fast}: {body}");
        let (_, lang, body, _) = page_in(&gate, "/about", "es-419", None).await;
        assert_eq!(lang, "es");
        assert!(body.contains(&text("es", Msg::Unreachable)), "fast path {fast}: {body}");
        gate.stop().await;
    }
}
