//! Identity from the app's own login: the JWT access token the app already gives its
//! users, verified against the public keys the operator names (a JWKS file,
//! `--identity-jwks`, or a URL fetched and kept fresh, `--identity-jwks-url`: see
//! [`crate::jwks`]), its issuer and audience checked, its times enforced with a
//! small leeway. The person's place in line is then derived from the token's subject
//! ([`user_id`]), so that every tab and device of one account finds the same place.
//!
//! Why our own few lines of JWS over ring rather than a JWT crate (as the gate's
//! admission token, services/gate/src/token.rs): the dangerous parts of JWT libraries
//! are the generic ones (`alg: none`, an HMAC secret confused with a public key, the
//! algorithm chosen by the token). Here the key fixes the algorithm: an RSA key
//! verifies RS256, a P-256 key ES256, an Ed25519 key EdDSA, nothing else; a header
//! whose `alg` differs from its key's is refused before any signature is checked, and
//! no HMAC algorithm exists at all. ring does the cryptography.
//!
//! The token comes as `Authorization: Bearer <token>`, or in the cookie the operator
//! names (`--identity-cookie`), which is how a browser's page and its push stream
//! (an EventSource sends no headers of its own) carry it.

use axum::http::{header, HeaderMap};
use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::signature::{self, RsaPublicKeyComponents, UnparsedPublicKey};
use serde::Deserialize;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Tokens (and identity cookies) longer than this are refused unread.
pub const MAX_TOKEN_LEN: usize = 8192;

/// Every userId derived from an identity starts with this; the ids this service draws
/// for anonymous visitors are UUIDs, so the two can never meet.
pub const ID_PREFIX: &str = "id:";

/// The signature algorithms accepted, each fixed by the kind of key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    RS256,
    ES256,
    EdDSA,
}

impl Alg {
    pub fn name(self) -> &'static str {
        match self {
            Alg::RS256 => "RS256",
            Alg::ES256 => "ES256",
            Alg::EdDSA => "EdDSA",
        }
    }
}

/// Why a token was refused: the `reason` of a 401 `identity_invalid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Longer than [`MAX_TOKEN_LEN`].
    TooLarge,
    /// Not three base64url parts of JSON.
    Malformed,
    /// The header's `alg` is not the algorithm of the key (or not one accepted at all:
    /// `none`, HMAC, ...).
    AlgRefused,
    /// A `kid` none of the keys has (or none named while several keys are given).
    UnknownKey,
    /// The signature does not match.
    BadSignature,
    /// `exp` is past (beyond the leeway), or missing.
    Expired,
    /// `nbf` is still ahead (beyond the leeway).
    NotYetValid,
    /// `iss` is not `--identity-issuer`.
    WrongIssuer,
    /// `aud` does not name this queue's audience.
    WrongAudience,
    /// The subject claim is missing, empty or not a string.
    NoSubject,
}

impl Refusal {
    pub fn as_str(self) -> &'static str {
        match self {
            Refusal::TooLarge => "too_large",
            Refusal::Malformed => "malformed",
            Refusal::AlgRefused => "alg_refused",
            Refusal::UnknownKey => "unknown_key",
            Refusal::BadSignature => "bad_signature",
            Refusal::Expired => "expired",
            Refusal::NotYetValid => "not_yet_valid",
            Refusal::WrongIssuer => "wrong_issuer",
            Refusal::WrongAudience => "wrong_audience",
            Refusal::NoSubject => "no_subject",
        }
    }

    /// A sentence for the error's message.
    pub fn message(self) -> &'static str {
        match self {
            Refusal::TooLarge => "the identity token is too long",
            Refusal::Malformed => "the identity token is not a signed JWT",
            Refusal::AlgRefused => "the identity token's algorithm is not its key's",
            Refusal::UnknownKey => "the identity token names a key this service does not know",
            Refusal::BadSignature => "the identity token's signature does not match",
            Refusal::Expired => "the identity token has expired (or has no expiry): log in again",
            Refusal::NotYetValid => "the identity token is not valid yet",
            Refusal::WrongIssuer => "the identity token comes from another issuer",
            Refusal::WrongAudience => "the identity token is meant for another audience",
            Refusal::NoSubject => "the identity token names nobody (no subject)",
        }
    }
}

enum PublicKey {
    /// Modulus and exponent, big-endian without leading zeros.
    Rsa(RsaPublicKeyComponents<Vec<u8>>),
    /// An uncompressed point: 0x04, X, Y.
    P256(Vec<u8>),
    Ed25519(Vec<u8>),
}

struct Key {
    kid: Option<String>,
    alg: Alg,
    key: PublicKey,
}

/// The app login's public keys, read from a JWKS document (RFC 7517).
pub struct Keys(Vec<Key>);

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.0.iter().map(|k| (&k.kid, k.alg))).finish()
    }
}

#[derive(Deserialize)]
struct Jwk {
    kty: String,
    kid: Option<String>,
    alg: Option<String>,
    #[serde(rename = "use")]
    usage: Option<String>,
    crv: Option<String>,
    n: Option<String>,
    e: Option<String>,
    x: Option<String>,
    y: Option<String>,
}

fn b64(what: &str, v: Option<&String>) -> Result<Vec<u8>, String> {
    let v = v.ok_or_else(|| format!("no {what}"))?;
    B64.decode(v.trim_end_matches('=')).map_err(|_| format!("{what} is not base64url"))
}

fn strip_zeros(mut b: Vec<u8>) -> Vec<u8> {
    let zeros = b.iter().take_while(|&&x| x == 0).count();
    b.drain(..zeros);
    b
}

impl Jwk {
    /// The key with the one algorithm it verifies; `None` for a key not meant for
    /// signatures (`use: enc`).
    fn key(self) -> Result<Option<Key>, String> {
        if self.usage.as_deref().is_some_and(|u| u != "sig") {
            return Ok(None);
        }
        let (alg, key) = match (self.kty.as_str(), self.crv.as_deref()) {
            ("RSA", _) => {
                let n = strip_zeros(b64("n", self.n.as_ref())?);
                let e = strip_zeros(b64("e", self.e.as_ref())?);
                if n.len() < 256 {
                    return Err("an RSA key shorter than 2048 bits".into());
                }
                (Alg::RS256, PublicKey::Rsa(RsaPublicKeyComponents { n, e }))
            }
            ("EC", Some("P-256")) => {
                let (x, y) = (b64("x", self.x.as_ref())?, b64("y", self.y.as_ref())?);
                if x.len() != 32 || y.len() != 32 {
                    return Err("a P-256 key's x and y are 32 bytes each".into());
                }
                let mut point = vec![4u8];
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                (Alg::ES256, PublicKey::P256(point))
            }
            ("OKP", Some("Ed25519")) => {
                let x = b64("x", self.x.as_ref())?;
                if x.len() != 32 {
                    return Err("an Ed25519 key's x is 32 bytes".into());
                }
                (Alg::EdDSA, PublicKey::Ed25519(x))
            }
            (kty, crv) => {
                return Err(format!(
                    "a {kty} key{}: RSA (RS256), EC P-256 (ES256) and OKP Ed25519 (EdDSA) keys are read",
                    crv.map(|c| format!(" on {c}")).unwrap_or_default()
                ))
            }
        };
        if let Some(named) = &self.alg {
            if named != alg.name() {
                return Err(format!("a key whose alg is {named}: this kind of key verifies {} only", alg.name()));
            }
        }
        Ok(Some(Key { kid: self.kid, alg, key }))
    }
}

impl Keys {
    /// Reads a JWKS document (`{"keys": [...]}`); keys for encryption are skipped,
    /// any other key this service cannot use is an error (naming the key).
    pub fn from_jwks(text: &str) -> Result<Keys, String> {
        #[derive(Deserialize)]
        struct Jwks {
            keys: Vec<Value>,
        }
        let jwks: Jwks = serde_json::from_str(text).map_err(|e| format!("not a JWKS document: {e}"))?;
        let mut keys = Vec::new();
        for (i, v) in jwks.keys.into_iter().enumerate() {
            let jwk: Jwk = serde_json::from_value(v).map_err(|e| format!("key {i}: {e}"))?;
            let name = jwk.kid.clone().unwrap_or_else(|| format!("number {i}"));
            if let Some(key) = jwk.key().map_err(|e| format!("key {name}: {e}"))? {
                if key.kid.is_some() && keys.iter().any(|k: &Key| k.kid == key.kid) {
                    return Err(format!("key {name} is given twice"));
                }
                keys.push(key);
            }
        }
        if keys.is_empty() {
            return Err("no signing keys in the JWKS document".into());
        }
        Ok(Keys(keys))
    }

    /// Reads a JWKS file.
    pub fn from_file(path: &str) -> Result<Keys, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
        Keys::from_jwks(&text).map_err(|e| format!("{path}: {e}"))
    }

    /// The key a token's header names: by `kid`, or the only key when it names none.
    fn find(&self, kid: Option<&str>) -> Option<&Key> {
        match kid {
            Some(kid) => self.0.iter().find(|k| k.kid.as_deref() == Some(kid)),
            None if self.0.len() == 1 => self.0.first(),
            None => None,
        }
    }
}

/// `--identity-jwks`: the keys, read when the flags are (an unreadable file stops the
/// start with the reason).
#[derive(Debug, Clone)]
pub struct JwksFile(pub Arc<Keys>);

impl JwksFile {
    pub fn parse(path: &str) -> Result<JwksFile, String> {
        Keys::from_file(path).map(|k| JwksFile(Arc::new(k)))
    }
}

/// `--identity-queue-audience QUEUE=AUDIENCE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueueAudience {
    pub queue: String,
    pub audience: String,
}

impl QueueAudience {
    pub fn parse(s: &str) -> Result<QueueAudience, String> {
        let (queue, audience) = s.split_once('=').ok_or_else(|| format!("{s:?}: QUEUE=AUDIENCE expected"))?;
        queue_core::keys::check_queue(queue.as_bytes()).map_err(|e| format!("{queue:?}: {e}"))?;
        if audience.is_empty() {
            return Err(format!("{s:?}: an empty audience"));
        }
        Ok(QueueAudience { queue: queue.into(), audience: audience.into() })
    }
}

/// A verified identity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The token's subject claim, as given.
    pub subject: String,
    /// The person's userId in every queue: [`user_id`] of the issuer and subject.
    pub user_id: String,
    /// What the lane claim (`--identity-lane-claim`) names: a string, or each string
    /// of a list (say, the person's groups); empty without that claim.
    pub lanes: Vec<String>,
}

impl Identity {
    /// The first of `queue_lanes` (the queue's lanes, in order) that the token's lane
    /// claim names: the lane this person is entitled to enter.
    pub fn lane_in<'l>(&self, queue_lanes: &'l [String]) -> Option<&'l String> {
        queue_lanes.iter().find(|l| self.lanes.iter().any(|c| c == *l))
    }
}

/// The userId of the person `subject` of `issuer`: `id:` and the base64url SHA-256
/// of issuer and subject (a NUL between them, which neither may hold), 46 characters
/// of the userId alphabet. The same account always gets the same id; no random id
/// (a UUID) can ever equal one; the subject itself is not shown in line.
pub fn user_id(issuer: &str, subject: &str) -> String {
    let mut input = Vec::with_capacity(issuer.len() + subject.len() + 1);
    input.extend_from_slice(issuer.as_bytes());
    input.push(0);
    input.extend_from_slice(subject.as_bytes());
    let digest = ring::digest::digest(&ring::digest::SHA256, &input);
    format!("{ID_PREFIX}{}", B64.encode(digest.as_ref()))
}

/// Whether `user` is a userId derived from an identity (read only with its token).
pub fn is_identity_id(user: &str) -> bool {
    user.starts_with(ID_PREFIX)
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

/// What verifies the app's tokens: keys, the expected issuer and audiences, the
/// subject claim and the leeway.
#[derive(Debug)]
pub struct Verifier {
    keys: KeySource,
    issuer: String,
    audience: String,
    /// Audiences of single queues, instead of `audience` (`--identity-queue-audience`).
    per_queue: HashMap<String, String>,
    claim: String,
    leeway: Duration,
    /// The claim that names the lanes a person may enter (`--identity-lane-claim`).
    lane_claim: Option<String>,
}

/// Where a verifier's keys come from.
#[derive(Debug)]
pub enum KeySource {
    /// Read once (`--identity-jwks`).
    Fixed(Arc<Keys>),
    /// Fetched and kept fresh (`--identity-jwks-url`).
    Remote(Arc<crate::jwks::Remote>),
}

impl KeySource {
    fn current(&self) -> (Arc<Keys>, u64) {
        match self {
            KeySource::Fixed(k) => (k.clone(), 0),
            KeySource::Remote(r) => (r.keys(), r.generation()),
        }
    }
}

fn now_s() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl Verifier {
    pub fn new(
        keys: Arc<Keys>,
        issuer: String,
        audience: String,
        per_queue: HashMap<String, String>,
        claim: String,
        leeway: Duration,
    ) -> Verifier {
        Verifier::with_source(KeySource::Fixed(keys), issuer, audience, per_queue, claim, leeway)
    }

    /// [`Verifier::new`] with keys from `keys` (a file's, or a URL's kept fresh).
    pub fn with_source(
        keys: KeySource,
        issuer: String,
        audience: String,
        per_queue: HashMap<String, String>,
        claim: String,
        leeway: Duration,
    ) -> Verifier {
        Verifier { keys, issuer, audience, per_queue, claim, leeway, lane_claim: None }
    }

    /// Reads the lanes a person may enter from the claim `claim` (a string, or a list
    /// whose strings count; anything else names none).
    pub fn with_lane_claim(mut self, claim: Option<String>) -> Verifier {
        self.lane_claim = claim;
        self
    }

    /// The audience a token for `queue` must name.
    pub fn audience(&self, queue: &str) -> &str {
        self.per_queue.get(queue).map_or(&self.audience, String::as_str)
    }

    /// Checks `token` for `queue` at the current time with the keys at hand.
    pub fn verify(&self, token: &str, queue: &str) -> Result<Identity, Refusal> {
        self.verify_at(token, queue, now_s())
    }

    /// [`Verifier::verify`], and with keys from a URL: a token whose `kid` the set
    /// does not have makes the set be fetched again (at most once per
    /// [`crate::jwks::ON_DEMAND_EVERY`]; the login may have rotated its keys), then
    /// it is checked again.
    pub async fn verify_fresh(&self, token: &str, queue: &str) -> Result<Identity, Refusal> {
        let (keys, generation) = self.keys.current();
        match self.verify_with(&keys, token, queue, now_s()) {
            Err(Refusal::UnknownKey) => {
                let KeySource::Remote(remote) = &self.keys else { return Err(Refusal::UnknownKey) };
                if !remote.refresh_for_unknown_kid(generation).await {
                    return Err(Refusal::UnknownKey);
                }
                self.verify_with(&remote.keys(), token, queue, now_s())
            }
            r => r,
        }
    }

    /// Checks `token` for `queue` at `now` (seconds since the epoch): size, shape,
    /// algorithm (before any key is used), key, signature, then issuer, audience,
    /// times and subject.
    pub fn verify_at(&self, token: &str, queue: &str, now: u64) -> Result<Identity, Refusal> {
        self.verify_with(&self.keys.current().0, token, queue, now)
    }

    fn verify_with(&self, keys: &Keys, token: &str, queue: &str, now: u64) -> Result<Identity, Refusal> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(Refusal::TooLarge);
        }
        let mut parts = token.split('.');
        let (Some(h), Some(p), Some(s), None) = (parts.next(), parts.next(), parts.next(), parts.next()) else {
            return Err(Refusal::Malformed);
        };
        // RFC 7515 4.1.11: `crit` names extensions the verifier must understand; this
        // one understands none, so a header with `crit` (any value) is refused.
        let header: serde_json::Map<String, Value> = decode_json(h)?;
        if header.contains_key("crit") {
            return Err(Refusal::Malformed);
        }
        let header: Header = serde_json::from_value(Value::Object(header)).map_err(|_| Refusal::Malformed)?;
        let alg = match header.alg.as_str() {
            "RS256" => Alg::RS256,
            "ES256" => Alg::ES256,
            "EdDSA" => Alg::EdDSA,
            _ => return Err(Refusal::AlgRefused),
        };
        let key = keys.find(header.kid.as_deref()).ok_or(Refusal::UnknownKey)?;
        if key.alg != alg {
            return Err(Refusal::AlgRefused);
        }
        let sig = B64.decode(s).map_err(|_| Refusal::Malformed)?;
        let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
        let ok = match &key.key {
            PublicKey::Rsa(k) => k.verify(&signature::RSA_PKCS1_2048_8192_SHA256, signed, &sig).is_ok(),
            PublicKey::P256(point) => {
                UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point).verify(signed, &sig).is_ok()
            }
            PublicKey::Ed25519(x) => UnparsedPublicKey::new(&signature::ED25519, x).verify(signed, &sig).is_ok(),
        };
        if !ok {
            return Err(Refusal::BadSignature);
        }
        let claims: serde_json::Map<String, Value> = decode_json(p)?;
        if claims.get("iss").and_then(Value::as_str) != Some(self.issuer.as_str()) {
            return Err(Refusal::WrongIssuer);
        }
        let audience = self.audience(queue);
        let aud_ok = match claims.get("aud") {
            Some(Value::String(a)) => a == audience,
            Some(Value::Array(list)) => list.iter().any(|a| a.as_str() == Some(audience)),
            _ => false,
        };
        if !aud_ok {
            return Err(Refusal::WrongAudience);
        }
        let leeway = self.leeway.as_secs();
        match claims.get("exp").and_then(Value::as_f64) {
            Some(exp) if (now as f64) <= exp + leeway as f64 => {}
            _ => return Err(Refusal::Expired),
        }
        match claims.get("nbf") {
            None => {}
            Some(nbf) => match nbf.as_f64() {
                Some(nbf) if nbf <= (now + leeway) as f64 => {}
                Some(_) => return Err(Refusal::NotYetValid),
                None => return Err(Refusal::Malformed),
            },
        }
        let subject = match claims.get(&self.claim) {
            Some(Value::String(s)) if !s.is_empty() => s.clone(),
            // RFC 7519: a subject is a StringOrURI. A number is refused: big ones would
            // be rounded (two accounts, one place) and 42 and 42.0 would be two people.
            _ => return Err(Refusal::NoSubject),
        };
        let lanes = match self.lane_claim.as_ref().and_then(|c| claims.get(c)) {
            Some(Value::String(l)) => vec![l.clone()],
            Some(Value::Array(list)) => list.iter().filter_map(Value::as_str).take(64).map(str::to_string).collect(),
            _ => Vec::new(),
        };
        Ok(Identity { user_id: user_id(&self.issuer, &subject), subject, lanes })
    }
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, Refusal> {
    let bytes = B64.decode(part).map_err(|_| Refusal::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| Refusal::Malformed)
}

/// The token a request carries: `Authorization: Bearer`, else the cookie `cookie`
/// names. `Err` for one over [`MAX_TOKEN_LEN`] (refused unread).
pub fn token_of<'h>(headers: &'h HeaderMap, cookie: Option<&str>) -> Result<Option<&'h str>, Refusal> {
    let token = bearer_of(headers).or_else(|| cookie.and_then(|name| service_kit::http::cookie(headers, name)));
    match token {
        Some(t) if t.len() > MAX_TOKEN_LEN => Err(Refusal::TooLarge),
        Some("") | None => Ok(None),
        Some(t) => Ok(Some(t)),
    }
}

/// The token of an `Authorization: Bearer` header, if any. A request with none whose
/// identity was still taken had it from the cookie, which a browser also sends with
/// requests another site makes ([`json_content_type`]).
pub fn bearer_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::AUTHORIZATION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| v.strip_prefix("Bearer ").or_else(|| v.strip_prefix("bearer ")))
        .map(str::trim)
}

/// Whether the request says `Content-Type: application/json` (parameters such as
/// `charset` allowed). Another site's page can only send a cross-site request
/// without asking first (a CORS preflight, which this service never grants with
/// credentials) as `text/plain`, a form or multipart; so a state-changing request
/// whose identity came from the cookie must say this (CSRF).
pub fn json_content_type(headers: &HeaderMap) -> bool {
    let mut types = headers.get_all(header::CONTENT_TYPE).iter();
    let (Some(v), None) = (types.next(), types.next()) else { return false };
    v.to_str().ok().and_then(|v| v.split(';').next()).is_some_and(|m| m.trim().eq_ignore_ascii_case("application/json"))
}

/// A queue's `entry` setting (`QUEUE.CONFIG`): who may enter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntryMode {
    /// Anyone (the default): a token is taken when given, a userId alone works.
    Open,
    /// Only with an identity token: entry, status, stream and leave all need one.
    Identified,
    /// By invitation: an access code, or an identity token whose lane claim names one
    /// of the queue's lanes; the queue itself refuses an entry without either (403
    /// `invite_only`). An entry without a code needs the token (401 as `identified`).
    Invite,
}

impl EntryMode {
    pub fn parse(s: &str) -> Option<EntryMode> {
        match s {
            "open" => Some(EntryMode::Open),
            "identified" => Some(EntryMode::Identified),
            "invite" => Some(EntryMode::Invite),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            EntryMode::Open => "open",
            EntryMode::Identified => "identified",
            EntryMode::Invite => "invite",
        }
    }

    /// Whether an entry into this queue needs an identity token (`code`: whether it
    /// brings an access code, which an `invite` queue takes without one).
    pub fn entry_needs_identity(self, code: bool) -> bool {
        match self {
            EntryMode::Open => false,
            EntryMode::Identified => true,
            EntryMode::Invite => !code,
        }
    }

    /// Whether reading, following and leaving a place in this queue needs an identity
    /// token. An `invite` queue's places may have been entered with an access code and
    /// no login, so there a userId this service gave (a UUID) is taken, as in an open
    /// queue.
    pub fn needs_identity(self) -> bool {
        self == EntryMode::Identified
    }
}

/// A queue's `nickname` setting (kept with its page settings, [`crate::brand`]):
/// whether an entry must name a nickname. Seed 000's chat shows one, so `Ask` is the
/// default; a queue whose people go on to an app (an `--admit-url`, such as the
/// gate's `/gate/claim`) defaults to `None`, and an operator may set either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicknameMode {
    /// An entry names a nickname (seed 000's contract): the page shows its form.
    Ask,
    /// An entry may leave the nickname out (queue-api enters the person as
    /// [`NEUTRAL_NICKNAME`]): the page enters at once as it loads, with no form.
    None,
}

/// The nickname an entry that names none is entered with (the engine keeps one for
/// every person; nobody shows it for a queue that asks none).
pub const NEUTRAL_NICKNAME: &str = "guest";

impl NicknameMode {
    pub fn parse(s: &str) -> Option<NicknameMode> {
        match s {
            "ask" => Some(NicknameMode::Ask),
            "none" => Some(NicknameMode::None),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            NicknameMode::Ask => "ask",
            NicknameMode::None => "none",
        }
    }

    /// The mode in effect: the one set (`set`, as the brand hash holds it, already
    /// checked), else `None` for a queue with an admit URL of its own, else `Ask`.
    pub fn effective(set: Option<&str>, own_admit_url: bool) -> NicknameMode {
        match set.and_then(NicknameMode::parse) {
            Some(m) => m,
            None if own_admit_url => NicknameMode::None,
            None => NicknameMode::Ask,
        }
    }

    /// `queue`'s mode, read from the store (one read of its page settings).
    pub async fn of(
        state: &crate::AppState,
        client: &queue_client::QueueClient,
        queue: &str,
    ) -> Result<NicknameMode, queue_client::ClientError> {
        let brand = crate::brand::Brand::from_stored(&client.brand(queue).await?);
        Ok(NicknameMode::effective(brand.get("nickname"), crate::pages::has_admit_url(state, queue)))
    }
}

/// A queue's entry mode is read from its settings at most this often per instance.
const MODE_TTL: Duration = Duration::from_secs(2);

/// Each queue's entry mode as last read, for [`MODE_TTL`].
#[derive(Default)]
pub struct EntryModes(std::sync::Mutex<HashMap<String, (EntryMode, std::time::Instant)>>);

impl EntryModes {
    /// `queue`'s entry mode (cached for [`MODE_TTL`]).
    pub async fn get(
        &self,
        client: &queue_client::QueueClient,
        queue: &str,
    ) -> Result<EntryMode, queue_client::ClientError> {
        if let Some((m, at)) = self.0.lock().unwrap().get(queue) {
            if at.elapsed() < MODE_TTL {
                return Ok(*m);
            }
        }
        let mode = read_mode(client, queue).await?;
        let mut cache = self.0.lock().unwrap();
        if cache.len() > 10_000 {
            cache.clear();
        }
        cache.insert(queue.to_string(), (mode, std::time::Instant::now()));
        Ok(mode)
    }

    /// Forgets what was read of `queue` (its setting just changed here).
    pub fn forget(&self, queue: &str) {
        self.0.lock().unwrap().remove(queue);
    }
}

/// The `entry` field of the queue's settings: `open` when the store has no such
/// setting (an engine older than entry modes); a word it does not know is read as the
/// strictest, `invite`, rather than as open.
pub async fn read_mode(
    client: &queue_client::QueueClient,
    queue: &str,
) -> Result<EntryMode, queue_client::ClientError> {
    match client.config_text(queue, "entry").await {
        Ok(word) => Ok(EntryMode::parse(&word).unwrap_or_else(|| {
            tracing::warn!(queue, entry = %word, "an entry mode this service does not know: read as invite");
            EntryMode::Invite
        })),
        Err(queue_client::ClientError::InvalidArgument(m)) if m.contains("unknown config field") => Ok(EntryMode::Open),
        Err(e) => Err(e),
    }
}

/// Whether the queue refused an entry because it admits by invitation only.
pub fn is_invite_refusal(e: &queue_client::ClientError) -> bool {
    e.to_string().starts_with("INVITE")
}

#[cfg(test)]
mod tests {
    use super::*;
    use ring::rand::SystemRandom;

    #[test]
    fn the_nickname_mode_set_wins_else_the_admit_url_decides() {
        let (ask, none) = (NicknameMode::Ask, NicknameMode::None);
        let cases = [
            (None, false, ask),
            (None, true, none),
            (Some("ask"), true, ask),
            (Some("none"), false, none),
            (Some("junk"), false, ask),
        ];
        for (set, admit, want) in cases {
            assert_eq!(NicknameMode::effective(set, admit), want, "{set:?} {admit}");
        }
    }
    use ring::signature::{EcdsaKeyPair, Ed25519KeyPair, KeyPair};
    use serde_json::json;

    fn enc(v: &Value) -> String {
        B64.encode(serde_json::to_vec(v).unwrap())
    }

    struct Signer {
        pair: Ed25519KeyPair,
    }

    impl Signer {
        fn new() -> Signer {
            let der = Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
            Signer { pair: Ed25519KeyPair::from_pkcs8(der.as_ref()).unwrap() }
        }
        fn jwk(&self, kid: &str) -> Value {
            json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "x": B64.encode(self.pair.public_key().as_ref())})
        }
        fn sign(&self, header: &Value, claims: &Value) -> String {
            let input = format!("{}.{}", enc(header), enc(claims));
            format!("{input}.{}", B64.encode(self.pair.sign(input.as_bytes()).as_ref()))
        }
    }

    fn verifier(jwks: Value) -> Verifier {
        let keys = Arc::new(Keys::from_jwks(&jwks.to_string()).unwrap());
        let per_queue = HashMap::from([("vip".to_string(), "vip-app".to_string())]);
        Verifier::new(
            keys,
            "https://login.example".into(),
            "shop".into(),
            per_queue,
            "sub".into(),
            Duration::from_secs(30),
        )
    }

    fn claims() -> Value {
        json!({"iss": "https://login.example", "aud": "shop", "sub": "42", "exp": 2000, "nbf": 1000})
    }

    /// Signs `payload` as sent, byte for byte (a number `json!` would round first).
    fn sign_text(k: &Signer, header: &Value, payload: &str) -> String {
        let input = format!("{}.{}", enc(header), B64.encode(payload));
        format!("{input}.{}", B64.encode(k.pair.sign(input.as_bytes()).as_ref()))
    }

    #[test]
    fn the_subject_is_a_string_and_no_header_extension_is_taken() {
        let k = Signer::new();
        let v = verifier(json!({"keys": [k.jwk("a")]}));
        let h = json!({"alg": "EdDSA", "kid": "a"});
        // RFC 7519: a subject is a StringOrURI. Numbers (two above u64::MAX would
        // round to one place, 42 and 42.0 differ) are refused, whatever their size.
        for sub in ["18446744073709551616", "18446744073709551617", "42", "42.0", "-1", "true", "[\"42\"]", "{}"] {
            let payload = format!(r#"{{"iss":"https://login.example","aud":"shop","exp":2000,"sub":{sub}}}"#);
            assert_eq!(v.verify_at(&sign_text(&k, &h, &payload), "q", 1500).unwrap_err(), Refusal::NoSubject, "{sub}");
        }
        let payload = r#"{"iss":"https://login.example","aud":"shop","exp":2000,"sub":"42"}"#;
        assert_eq!(v.verify_at(&sign_text(&k, &h, payload), "q", 1500).unwrap().subject, "42");
        // RFC 7515 4.1.11: a `crit` header names extensions that must be understood;
        // this verifier understands none, so any `crit` (even empty) is refused.
        for crit in [json!(["exp"]), json!(["b64"]), json!([]), json!(null), json!("x")] {
            let h = json!({"alg": "EdDSA", "kid": "a", "crit": crit, "exp": 2000});
            assert_eq!(v.verify_at(&k.sign(&h, &claims()), "q", 1500).unwrap_err(), Refusal::Malformed, "{crit}");
        }
        let h = json!({"alg": "EdDSA", "kid": "a", "typ": "JWT", "x-other": 1});
        assert!(v.verify_at(&k.sign(&h, &claims()), "q", 1500).is_ok(), "other header members are ignored");
    }

    #[test]
    fn accepts_and_refuses_each_way() {
        let k = Signer::new();
        let v = verifier(json!({"keys": [k.jwk("a")]}));
        let h = json!({"alg": "EdDSA", "kid": "a"});
        let ok = v.verify_at(&k.sign(&h, &claims()), "q", 1500).unwrap();
        assert_eq!(ok.subject, "42");
        assert_eq!(ok.user_id, user_id("https://login.example", "42"));
        assert!(ok.user_id.starts_with("id:") && ok.user_id.len() <= 64);
        queue_core::keys::check_user(ok.user_id.as_bytes()).unwrap();
        // Within the leeway on both sides.
        assert!(v.verify_at(&k.sign(&h, &claims()), "q", 2030).is_ok());
        assert!(v.verify_at(&k.sign(&h, &claims()), "q", 970).is_ok());
        let refused = |t: &str, now| v.verify_at(t, "q", now).unwrap_err();
        assert_eq!(refused(&k.sign(&h, &claims()), 2031), Refusal::Expired);
        assert_eq!(refused(&k.sign(&h, &claims()), 969), Refusal::NotYetValid);
        let mut c = claims();
        c["iss"] = json!("https://other.example");
        assert_eq!(refused(&k.sign(&h, &c), 1500), Refusal::WrongIssuer);
        let mut c = claims();
        c["aud"] = json!(["x", "shop"]);
        assert!(v.verify_at(&k.sign(&h, &c), "q", 1500).is_ok(), "an audience list naming ours");
        c["aud"] = json!("other");
        assert_eq!(refused(&k.sign(&h, &c), 1500), Refusal::WrongAudience);
        let mut c = claims();
        c.as_object_mut().unwrap().remove("exp");
        assert_eq!(refused(&k.sign(&h, &c), 1500), Refusal::Expired, "no expiry");
        c = claims();
        c["sub"] = json!("");
        assert_eq!(refused(&k.sign(&h, &c), 1500), Refusal::NoSubject);
        // The per-queue audience: a token for the shop is not one for the vip queue.
        assert_eq!(v.verify_at(&k.sign(&h, &claims()), "vip", 1500).unwrap_err(), Refusal::WrongAudience);
        let mut c = claims();
        c["aud"] = json!("vip-app");
        assert!(v.verify_at(&k.sign(&h, &c), "vip", 1500).is_ok());
        assert_eq!(refused(&k.sign(&h, &c), 1500), Refusal::WrongAudience);
    }

    #[test]
    fn the_key_fixes_the_algorithm() {
        let k = Signer::new();
        let other = Signer::new();
        let v = verifier(json!({"keys": [k.jwk("a"), other.jwk("b")]}));
        let token = k.sign(&json!({"alg": "EdDSA", "kid": "a"}), &claims());
        assert!(v.verify_at(&token, "q", 1500).is_ok());
        let refused = |t: &str| v.verify_at(t, "q", 1500).unwrap_err();
        // Signed by a, named b: the signature does not match b.
        assert_eq!(refused(&k.sign(&json!({"alg": "EdDSA", "kid": "b"}), &claims())), Refusal::BadSignature);
        assert_eq!(refused(&k.sign(&json!({"alg": "EdDSA", "kid": "c"}), &claims())), Refusal::UnknownKey);
        assert_eq!(refused(&k.sign(&json!({"alg": "EdDSA"}), &claims())), Refusal::UnknownKey, "two keys, none named");
        for alg in ["ES256", "RS256", "HS256", "none", "NONE", "EdDSA "] {
            assert_eq!(refused(&k.sign(&json!({"alg": alg, "kid": "a"}), &claims())), Refusal::AlgRefused, "{alg}");
        }
        // alg none, no signature.
        let none = format!("{}.{}.", enc(&json!({"alg": "none", "kid": "a"})), enc(&claims()));
        assert_eq!(refused(&none), Refusal::AlgRefused);
        // HS256 with the public key as the secret.
        let input = format!("{}.{}", enc(&json!({"alg": "HS256", "kid": "a"})), enc(&claims()));
        let mac = ring::hmac::sign(
            &ring::hmac::Key::new(ring::hmac::HMAC_SHA256, k.pair.public_key().as_ref()),
            input.as_bytes(),
        );
        assert_eq!(refused(&format!("{input}.{}", B64.encode(mac.as_ref()))), Refusal::AlgRefused);
        // A changed payload.
        let mut parts: Vec<String> = token.split('.').map(String::from).collect();
        let mut c = claims();
        c["sub"] = json!("43");
        parts[1] = enc(&c);
        assert_eq!(refused(&parts.join(".")), Refusal::BadSignature);
        for bad in ["", "a", "a.b", "a.b.c.d", "!!.!!.!!"] {
            assert_eq!(refused(bad), Refusal::Malformed, "{bad}");
        }
        assert_eq!(refused(&"a".repeat(MAX_TOKEN_LEN + 1)), Refusal::TooLarge);
    }

    #[test]
    fn p256_keys_verify_es256_only() {
        let rng = SystemRandom::new();
        let alg = &signature::ECDSA_P256_SHA256_FIXED_SIGNING;
        let der = EcdsaKeyPair::generate_pkcs8(alg, &rng).unwrap();
        let pair = EcdsaKeyPair::from_pkcs8(alg, der.as_ref(), &rng).unwrap();
        let point = pair.public_key().as_ref();
        let jwk = json!({"kty": "EC", "crv": "P-256", "kid": "e", "alg": "ES256", "use": "sig",
            "x": B64.encode(&point[1..33]), "y": B64.encode(&point[33..65])});
        let v = verifier(json!({"keys": [jwk]}));
        let input = format!("{}.{}", enc(&json!({"alg": "ES256", "kid": "e"})), enc(&claims()));
        let sig = pair.sign(&rng, input.as_bytes()).unwrap();
        assert!(v.verify_at(&format!("{input}.{}", B64.encode(sig.as_ref())), "q", 1500).is_ok());
    }

    /// A 2048-bit RSA key for this test only (ring verifies and signs RSA but does not
    /// make RSA keys; `openssl genpkey -algorithm RSA` made this one).
    const RSA_TEST_KEY: &str = "\
-----BEGIN PRIVATE KEY-----
MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQDd0PCS0k6FWLpX
1PacOFaco7tQWej/V6aTxtJ5cxStssJs25dRfJGC4Ib+gPimEeF+ADwU8++9WidI
zPFixANFY9in7ZqhjmYwFgwnE1d+vWKkVbBFHQBCiFLetyoacd1RCk7pNYlUZR21
TVZoQf4jLiIquAmkbpWG//ark94bBrH9mn7S/akPQSpuoA6SE+4DEI0xLOUtThMY
CKINzfo8pnh//mz7LfkP8801Afrn7StBMjmIcbs5bh4DegsFBN92BwQzeZmnuda4
yIRLTBG4EFrA0he7FlKfKknuNURPtG6MGiO3t4HQT2/On9ih786AOs1bb/sTak8Q
FL8AOjI7AgMBAAECggEAHACgFlDxc7kXUTZD6cXc/UpYP9UR6oZUs6wybv2duy3p
iJeSO0nIDucsc52xhjmUp3T9IMII3nUup2yj/o1zQkPQGqcO0d1pviFSaG5zKb9b
4BYnOhpmqX+PQqmJ6au9PllYS+2jyCE5xmUchu3p2OQekRkJspX5T4Ep0VBKBkwu
ZP4xUrqIPpAuFLnvmcZOpC5Lch4nc+Gju/YHhIA9lfX8en3Zm5B8Tvs68Lkj0eaX
CCcV2d89vJ2WfApOEZjDe4Q38h5FtOu2BK8J9Dim3xAlFZmv4pWV9kYL1LJa6tT2
9sq5l9vhe2FO72Xwb+/hkNY5LFVj0TV+GtOSoElS+QKBgQD0w9ZxDiHFcWeeG6AK
qHhAINEojHW1ys2oJx3Gg8TmHJ1GBv+PJ7d6aIrpZFxA9Oz+96Gblt8qP5OKfQRA
u06oQNvySg5T4jDv15kouZIS4C+dDh1wuRxm+6cOcBp1qrDjuG6CF33iE6BPKM9U
sGiOLmGhiilFE+2D4iggBvlRQwKBgQDn/2/picONz59jTD0ZuGHJ/r9R0VytVXDx
bZc4uHi/Byf8ioeU1gss/6PeOz2aygk5xUiVX70/ZsKbxHGcEDn3BmSXtfSZavRB
8hfWXuKimRiCe47vL/kBmLarpoJp3DPtOv72T959HsMDenP0/pdvFQHQOhdBpwOl
OA1n2sLvqQKBgQDpIKJeGhy2ZzZPFHbRz/aA9gDhgy8WUKyjDWbBzn26wuRVb5L3
8ddDAtHUTJ/FysL0cj396Kx0HAvWKw7i7MSVYvlbA4g0A0ujFZGuhVmJGvieuXP3
Cojv2Z8bFFFPY52Jt/+hbuiabSESZIddXYyoZ6rb5rE6NynRpJWdM6dB6wKBgDkU
A3i1yEMPnetUSoQVdRm5b2C13dNXfh4oFFiEKlD1dcUQYCMiNkWv76UxdgqrQnHQ
M/dsQqdipOamAj2fUGOSUxVwUumcAtRmt66qUaAngnw34ga/Csh1xhudL+DTqILp
TOlU5SxrcRdd/UF9kcxmoreUUzx31tHDZKj0jZlhAoGAJWM93T3cHj4R/SrLluyo
bsFfmqvxVYHHjMZVY/aPkoRucIZYwuGRHuVEhGPJl+hlOi04NN6fleeqwht/ap5S
fGkjbt8wx/ZzETx6Hee+jl1Cb3sVoXYLgji8k2GEP3xGkfSd8jMW7iKrPHUIBvfX
jBYm34FOBuJaRvM9uzYjxVU=
-----END PRIVATE KEY-----";

    #[test]
    fn rsa_keys_verify_rs256_only() {
        use base64::engine::general_purpose::STANDARD;
        let body: String = RSA_TEST_KEY.lines().filter(|l| !l.starts_with("-----")).collect();
        let pair = signature::RsaKeyPair::from_pkcs8(&STANDARD.decode(body).unwrap()).unwrap();
        let public: RsaPublicKeyComponents<Vec<u8>> = pair.public().into();
        let (n, e) = (B64.encode(&public.n), B64.encode(&public.e));
        let v = verifier(json!({"keys": [{"kty": "RSA", "kid": "r", "alg": "RS256", "n": n, "e": e}]}));
        let sign = |header: &Value| {
            let input = format!("{}.{}", enc(header), enc(&claims()));
            let mut sig = vec![0; pair.public().modulus_len()];
            pair.sign(&signature::RSA_PKCS1_SHA256, &SystemRandom::new(), input.as_bytes(), &mut sig).unwrap();
            format!("{input}.{}", B64.encode(sig))
        };
        assert!(v.verify_at(&sign(&json!({"alg": "RS256", "kid": "r"})), "q", 1500).is_ok());
        assert!(v.verify_at(&sign(&json!({"alg": "RS256"})), "q", 1500).is_ok(), "the only key");
        for alg in ["PS256", "RS384", "ES256", "HS256"] {
            assert_eq!(
                v.verify_at(&sign(&json!({"alg": alg, "kid": "r"})), "q", 1500),
                Err(Refusal::AlgRefused),
                "{alg}"
            );
        }
        // HS256 with the RSA key's public modulus as the secret: no HMAC, ever.
        let input = format!("{}.{}", enc(&json!({"alg": "HS256", "kid": "r"})), enc(&claims()));
        let secret = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, &public.n);
        let mac = ring::hmac::sign(&secret, input.as_bytes());
        assert_eq!(v.verify_at(&format!("{input}.{}", B64.encode(mac.as_ref())), "q", 1500), Err(Refusal::AlgRefused));
    }

    #[test]
    fn jwks_documents() {
        let k = Signer::new();
        let mut jwk = k.jwk("a");
        jwk["alg"] = json!("ES256");
        assert!(Keys::from_jwks(&json!({"keys": [jwk]}).to_string()).unwrap_err().contains("EdDSA only"));
        let oct = json!({"kty": "oct", "kid": "h", "k": "c2VjcmV0"});
        assert!(Keys::from_jwks(&json!({"keys": [oct]}).to_string()).unwrap_err().contains("oct"));
        let enc_key = json!({"kty": "RSA", "use": "enc", "n": "AQAB", "e": "AQAB"});
        assert!(
            Keys::from_jwks(&json!({"keys": [enc_key, k.jwk("a")]}).to_string()).is_ok(),
            "an encryption key is skipped"
        );
        assert!(Keys::from_jwks(&json!({"keys": [k.jwk("a"), k.jwk("a")]}).to_string()).unwrap_err().contains("twice"));
        assert!(Keys::from_jwks(r#"{"keys": []}"#).is_err());
        assert!(Keys::from_jwks("nope").is_err());
    }

    #[test]
    fn ids_are_namespaced_and_stable() {
        let a = user_id("https://login.example", "42");
        assert_eq!(a, user_id("https://login.example", "42"));
        assert_ne!(a, user_id("https://other.example", "42"));
        assert_ne!(user_id("a", "bc"), user_id("ab", "c"));
        assert!(is_identity_id(&a) && !is_identity_id("0f8fad5b-d9cb-469f-a165-70867728950e"));
    }

    #[test]
    fn only_application_json_is_json() {
        use axum::http::HeaderValue;
        let with = |types: &[&'static str]| {
            let mut h = HeaderMap::new();
            for t in types {
                h.append(header::CONTENT_TYPE, HeaderValue::from_static(t));
            }
            json_content_type(&h)
        };
        assert!(with(&["application/json"]));
        assert!(with(&["Application/JSON; charset=utf-8"]));
        for refused in [
            &[][..],
            &["text/plain;charset=UTF-8"],
            &["application/x-www-form-urlencoded"],
            &["multipart/form-data; boundary=x"],
            &["application/jsonx"],
            &["text/plain; application/json"],
            &["application/json", "text/plain"],
        ] {
            assert!(!with(refused), "{refused:?}");
        }
    }

    #[test]
    fn tokens_from_the_header_or_the_cookie() {
        use axum::http::HeaderValue;
        let mut h = HeaderMap::new();
        assert_eq!(token_of(&h, Some("app_token")), Ok(None));
        h.insert(header::COOKIE, HeaderValue::from_static("x=1; app_token=abc"));
        assert_eq!(token_of(&h, Some("app_token")), Ok(Some("abc")));
        assert_eq!(token_of(&h, None), Ok(None), "no cookie named");
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Bearer xyz"));
        assert_eq!(token_of(&h, Some("app_token")), Ok(Some("xyz")), "the header first");
        let long = format!("Bearer {}", "a".repeat(MAX_TOKEN_LEN + 1));
        h.insert(header::AUTHORIZATION, HeaderValue::from_str(&long).unwrap());
        assert_eq!(token_of(&h, None), Err(Refusal::TooLarge));
    }
}
