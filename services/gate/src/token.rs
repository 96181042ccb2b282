//! The admission token: a compact JWS (RFC 7515) JWT (RFC 7519) signed with EdDSA
//! (Ed25519, RFC 8037) or ES256 (ECDSA P-256 with SHA-256), built on `ring`.
//!
//! Why our own few lines of JWT over ring rather than a JWT crate: the gate needs one
//! header shape, one claim set and two algorithms, and the dangerous parts of JWT
//! libraries are the generic ones (`alg: none`, an HMAC key confused with a public
//! key, algorithm chosen by the token). Here the `kid` picks the key, the key fixes
//! the algorithm, and a header whose `alg` differs from it is refused before any
//! signature check. ring (already in the build through rustls) does the
//! cryptography: constant-time, audited, fixed-size r||s ECDSA signatures as JWS wants.
//!
//! Keys are PKCS#8 PEM files (`openssl genpkey -algorithm ed25519`, or
//! `-algorithm EC -pkeyopt ec_paramgen_curve:P-256`); the first one signs, all of them
//! verify, so a key is rotated by adding the new one first and dropping the old one
//! after the longest token lifetime. The `kid` is the key's RFC 7638 JWK thumbprint.

use base64::engine::general_purpose::URL_SAFE_NO_PAD as B64;
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, EcdsaKeyPair, Ed25519KeyPair, KeyPair, UnparsedPublicKey};
use rustls_pki_types::pem::{self, PemObject};
use rustls_pki_types::{PrivatePkcs1KeyDer, PrivatePkcs8KeyDer, PrivateSec1KeyDer};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::path::Path;

/// The `iss` of every token the gate issues.
pub const ISSUER: &str = "valkey-queue-gate";

/// Tokens longer than this are refused unread (a cookie holds a few hundred bytes).
pub const MAX_TOKEN_LEN: usize = 2048;

/// The signature algorithms the gate signs and verifies with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Alg {
    /// Ed25519 (RFC 8037), the default: small keys and signatures, fast, deterministic.
    EdDSA,
    /// ECDSA P-256 with SHA-256, for verifiers without Ed25519 support.
    ES256,
}

impl Alg {
    pub fn name(self) -> &'static str {
        match self {
            Alg::EdDSA => "EdDSA",
            Alg::ES256 => "ES256",
        }
    }
}

/// The claims of an admission token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Always [`ISSUER`].
    pub iss: String,
    /// The queue the person was admitted to.
    pub aud: String,
    /// The person (the queue's userId).
    pub sub: String,
    /// This session's id (new at each claim; a renewed token keeps it).
    pub sid: String,
    /// Issued at (seconds since the epoch).
    pub iat: u64,
    /// Expires at (seconds since the epoch).
    pub exp: u64,
    /// When the ticket was claimed (seconds since the epoch; OpenID's claim name):
    /// renewals keep it, so that the longest session can be enforced.
    pub auth_time: u64,
}

/// Why a token was refused by [`Keys::verify`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenError {
    /// Not three base64url parts of JSON, or too long.
    Malformed,
    /// A `kid` none of the gate's keys has.
    UnknownKey,
    /// The header's `alg` is not the algorithm of the key its `kid` names.
    WrongAlgorithm,
    /// The signature does not match.
    BadSignature,
    /// Signed by us but not a claim set we issue (another issuer, missing claims).
    BadClaims,
}

impl TokenError {
    pub fn as_str(self) -> &'static str {
        match self {
            TokenError::Malformed => "malformed",
            TokenError::UnknownKey => "unknown_key",
            TokenError::WrongAlgorithm => "wrong_algorithm",
            TokenError::BadSignature => "bad_signature",
            TokenError::BadClaims => "bad_claims",
        }
    }
}

enum Pair {
    Ed25519(Ed25519KeyPair),
    P256(EcdsaKeyPair),
}

/// One private key: signs (if first) and verifies.
struct PrivateKey {
    kid: String,
    alg: Alg,
    pair: Pair,
    /// The base64url header `{"alg":..,"kid":..,"typ":"JWT"}`, made once.
    header: String,
    jwk: Jwk,
}

/// A public key's members that its RFC 7638 thumbprint hashes: `crv`, `kty`, `x` and,
/// for an EC key, `y`. Declared in lexicographic order, so that they serialize in it:
/// a struct's fields come out in their declared order whatever map serde_json uses
/// (its `preserve_order` feature, enabled by any crate of the build, would change the
/// order of a `json!` object, and with it every `kid`).
#[derive(Debug, Clone, Serialize)]
struct Members {
    crv: &'static str,
    kty: &'static str,
    x: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    y: Option<String>,
}

impl Members {
    /// The RFC 7638 thumbprint: base64url of the SHA-256 of the members as JSON, in
    /// lexicographic order, without spaces (section 3.3: none of them needs escaping).
    fn thumbprint(&self) -> String {
        let canonical = serde_json::to_string(self).expect("a JWK serializes");
        B64.encode(ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes()).as_ref())
    }
}

/// A public key as the JWKS publishes it (RFC 7517), members in lexicographic order.
#[derive(Debug, Clone, Serialize)]
struct Jwk {
    alg: &'static str,
    crv: &'static str,
    kid: String,
    kty: &'static str,
    #[serde(rename = "use")]
    usage: &'static str,
    x: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    y: Option<String>,
}

/// A token's header, members in lexicographic order.
#[derive(Serialize)]
struct HeaderOut<'a> {
    alg: &'static str,
    kid: &'a str,
    typ: &'static str,
}

/// The gate's keys: the first signs, all verify.
pub struct Keys {
    keys: Vec<PrivateKey>,
    by_kid: HashMap<String, usize>,
    rng: SystemRandom,
    jwks: String,
}

impl std::fmt::Debug for Keys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.keys.iter().map(|k| (&k.kid, k.alg))).finish()
    }
}

#[derive(Deserialize)]
struct Header {
    alg: String,
    kid: Option<String>,
}

impl Keys {
    /// Reads PKCS#8 PEM private keys (Ed25519 or P-256); the first signs.
    pub fn from_files<P: AsRef<Path>>(paths: &[P]) -> Result<Keys, String> {
        let mut ders = Vec::new();
        for p in paths {
            let p = p.as_ref();
            let text = std::fs::read_to_string(p).map_err(|e| format!("key file {}: {e}", p.display()))?;
            ders.push(pem_to_der(&text).map_err(|e| format!("key file {}: {e}", p.display()))?);
        }
        Keys::from_pkcs8(&ders)
    }

    /// Keys from PKCS#8 DER documents; the first signs.
    pub fn from_pkcs8(ders: &[Vec<u8>]) -> Result<Keys, String> {
        if ders.is_empty() {
            return Err("no keys".into());
        }
        let rng = SystemRandom::new();
        let mut keys = Vec::new();
        let mut by_kid = HashMap::new();
        for der in ders {
            let key = private_key(der, &rng)?;
            if by_kid.insert(key.kid.clone(), keys.len()).is_some() {
                return Err(format!("the same key is given twice (kid {})", key.kid));
            }
            keys.push(key);
        }
        #[derive(Serialize)]
        struct Jwks<'a> {
            keys: Vec<&'a Jwk>,
        }
        let jwks =
            serde_json::to_string(&Jwks { keys: keys.iter().map(|k| &k.jwk).collect() }).expect("a JWKS serializes");
        Ok(Keys { keys, by_kid, rng, jwks })
    }

    /// A fresh Ed25519 key that lives as long as the process (local runs without
    /// `--key`: tokens do not survive a restart and other instances cannot verify them).
    pub fn ephemeral() -> Keys {
        Keys::from_pkcs8(&[generate_ed25519_pkcs8()]).expect("a generated key")
    }

    /// The signing key's id.
    pub fn signing_kid(&self) -> &str {
        &self.keys[0].kid
    }

    /// The signing key's algorithm.
    pub fn signing_alg(&self) -> Alg {
        self.keys[0].alg
    }

    /// The public keys as a JWKS document (RFC 7517).
    pub fn jwks(&self) -> &str {
        &self.jwks
    }

    /// Signs `claims` with the first key.
    pub fn sign(&self, claims: &Claims) -> String {
        let key = &self.keys[0];
        let payload = B64.encode(serde_json::to_vec(claims).expect("claims serialize"));
        let input = format!("{}.{}", key.header, payload);
        let sig = match &key.pair {
            Pair::Ed25519(p) => p.sign(input.as_bytes()).as_ref().to_vec(),
            Pair::P256(p) => p.sign(&self.rng, input.as_bytes()).expect("ECDSA signing").as_ref().to_vec(),
        };
        format!("{input}.{}", B64.encode(sig))
    }

    /// Checks the token's signature and shape (not its times or audience: the caller
    /// compares those with the request).
    pub fn verify(&self, token: &str) -> Result<Claims, TokenError> {
        if token.len() > MAX_TOKEN_LEN {
            return Err(TokenError::Malformed);
        }
        let mut parts = token.splitn(3, '.');
        let (Some(h), Some(p), Some(s)) = (parts.next(), parts.next(), parts.next()) else {
            return Err(TokenError::Malformed);
        };
        if s.contains('.') {
            return Err(TokenError::Malformed);
        }
        let header: Header = decode_json(h)?;
        let kid = header.kid.ok_or(TokenError::UnknownKey)?;
        let key = self.by_kid.get(&kid).map(|&i| &self.keys[i]).ok_or(TokenError::UnknownKey)?;
        if header.alg != key.alg.name() {
            return Err(TokenError::WrongAlgorithm);
        }
        let sig = B64.decode(s).map_err(|_| TokenError::Malformed)?;
        let signed = &token.as_bytes()[..h.len() + 1 + p.len()];
        let ok = match &key.pair {
            Pair::Ed25519(pair) => {
                UnparsedPublicKey::new(&signature::ED25519, pair.public_key().as_ref()).verify(signed, &sig).is_ok()
            }
            Pair::P256(pair) => UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, pair.public_key().as_ref())
                .verify(signed, &sig)
                .is_ok(),
        };
        if !ok {
            return Err(TokenError::BadSignature);
        }
        let claims: Claims = decode_json(p).map_err(|_| TokenError::BadClaims)?;
        if claims.iss != ISSUER || claims.sub.is_empty() || claims.aud.is_empty() || claims.sid.is_empty() {
            return Err(TokenError::BadClaims);
        }
        Ok(claims)
    }
}

fn decode_json<T: serde::de::DeserializeOwned>(part: &str) -> Result<T, TokenError> {
    let bytes = B64.decode(part).map_err(|_| TokenError::Malformed)?;
    serde_json::from_slice(&bytes).map_err(|_| TokenError::Malformed)
}

fn private_key(der: &[u8], rng: &SystemRandom) -> Result<PrivateKey, String> {
    let (alg, pair, members) = if let Ok(p) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
        let x = B64.encode(p.public_key().as_ref());
        (Alg::EdDSA, Pair::Ed25519(p), Members { crv: "Ed25519", kty: "OKP", x, y: None })
    } else {
        match EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, rng) {
            Ok(p) => {
                // An uncompressed point: 0x04, X (32 bytes), Y (32 bytes).
                let point = p.public_key().as_ref();
                let (x, y) = (B64.encode(&point[1..33]), B64.encode(&point[33..65]));
                (Alg::ES256, Pair::P256(p), Members { crv: "P-256", kty: "EC", x, y: Some(y) })
            }
            Err(_) => {
                return Err("not an Ed25519 or P-256 private key in PKCS#8 form (make one with \
                            `openssl genpkey -algorithm ed25519`; convert an EC key with \
                            `openssl pkcs8 -topk8 -nocrypt`)"
                    .into())
            }
        }
    };
    let kid = members.thumbprint();
    let header = HeaderOut { alg: alg.name(), kid: &kid, typ: "JWT" };
    let header = B64.encode(serde_json::to_string(&header).expect("a header serializes"));
    let Members { crv, kty, x, y } = members;
    let jwk = Jwk { alg: alg.name(), crv, kid: kid.clone(), kty, usage: "sig", x, y };
    Ok(PrivateKey { kid, alg, pair, header, jwk })
}

/// The DER of the first `-----BEGIN PRIVATE KEY-----` (PKCS#8) block of a PEM file,
/// with a clear refusal for the keys the gate does not read: SEC1 (`EC PRIVATE KEY`),
/// PKCS#1 (`RSA PRIVATE KEY`) and encrypted PKCS#8.
pub fn pem_to_der(text: &str) -> Result<Vec<u8>, String> {
    let pem = text.as_bytes();
    match PrivatePkcs8KeyDer::from_pem_slice(pem) {
        Ok(key) => Ok(key.secret_pkcs8_der().to_vec()),
        Err(pem::Error::NoItemsFound) if PrivateSec1KeyDer::from_pem_slice(pem).is_ok() => {
            Err("an SEC1 EC key: convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt`".into())
        }
        Err(pem::Error::NoItemsFound) if PrivatePkcs1KeyDer::from_pem_slice(pem).is_ok() => {
            Err("an RSA key: the gate signs with Ed25519 or P-256 keys".into())
        }
        // A section rustls-pki-types does not know, and so skips.
        Err(pem::Error::NoItemsFound)
            if memchr::memmem::find(pem, b"-----BEGIN ENCRYPTED PRIVATE KEY-----").is_some() =>
        {
            Err("an encrypted key: the gate reads unencrypted PKCS#8 keys".into())
        }
        Err(pem::Error::NoItemsFound) => Err("no -----BEGIN PRIVATE KEY----- block".into()),
        Err(pem::Error::MissingSectionEnd { end_marker }) => {
            Err(format!("no -----END {}----- line", String::from_utf8_lossy(&end_marker)))
        }
        Err(e) => Err(format!("unreadable PEM: {e}")),
    }
}

/// A new Ed25519 private key in PKCS#8 (v2) DER.
pub fn generate_ed25519_pkcs8() -> Vec<u8> {
    Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("system randomness").as_ref().to_vec()
}

/// A PKCS#8 DER document as a PEM block (rustls-pki-types reads PEM, it does not
/// write it: these few lines are the writing side, for the key a local run makes).
pub fn der_to_pem(der: &[u8]) -> String {
    let b64 = base64::engine::general_purpose::STANDARD.encode(der);
    let mut out = String::from("-----BEGIN PRIVATE KEY-----\n");
    for chunk in b64.as_bytes().chunks(64) {
        out.push_str(std::str::from_utf8(chunk).expect("base64 is ascii"));
        out.push('\n');
    }
    out.push_str("-----END PRIVATE KEY-----\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims() -> Claims {
        Claims {
            iss: ISSUER.into(),
            aud: "drop".into(),
            sub: "u-1".into(),
            sid: "s-1".into(),
            iat: 1,
            exp: 2,
            auth_time: 1,
        }
    }

    fn p256() -> Vec<u8> {
        EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &SystemRandom::new())
            .unwrap()
            .as_ref()
            .to_vec()
    }

    #[test]
    fn round_trip_both_algorithms() {
        for der in [generate_ed25519_pkcs8(), p256()] {
            let keys = Keys::from_pkcs8(&[der]).unwrap();
            let token = keys.sign(&claims());
            assert_eq!(keys.verify(&token), Ok(claims()));
        }
    }

    #[test]
    fn refusals() {
        let keys = Keys::from_pkcs8(&[generate_ed25519_pkcs8()]).unwrap();
        let other = Keys::from_pkcs8(&[generate_ed25519_pkcs8()]).unwrap();
        let token = keys.sign(&claims());
        assert_eq!(keys.verify(&other.sign(&claims())), Err(TokenError::UnknownKey));
        let parts: Vec<&str> = token.split('.').collect();
        let mut forged = claims();
        forged.sub = "u-2".into();
        let forged_payload = B64.encode(serde_json::to_vec(&forged).unwrap());
        assert_eq!(
            keys.verify(&format!("{}.{}.{}", parts[0], forged_payload, parts[2])),
            Err(TokenError::BadSignature)
        );
        // A key of ours that did not sign it, named by our signer's kid.
        let impostor = other.sign(&claims());
        let ip: Vec<&str> = impostor.split('.').collect();
        assert_eq!(keys.verify(&format!("{}.{}.{}", parts[0], ip[1], ip[2])), Err(TokenError::BadSignature));
        let none = B64.encode(format!(r#"{{"alg":"none","kid":"{}"}}"#, keys.signing_kid()));
        assert_eq!(keys.verify(&format!("{none}.{}.", parts[1])), Err(TokenError::WrongAlgorithm));
        assert_eq!(keys.verify("a.b"), Err(TokenError::Malformed));
        assert_eq!(keys.verify(&format!("{token}.x")), Err(TokenError::Malformed));
        assert_eq!(keys.verify(&"x".repeat(5000)), Err(TokenError::Malformed));
    }

    #[test]
    fn rotation_verifies_with_every_key_signs_with_the_first() {
        let (old, new) = (generate_ed25519_pkcs8(), p256());
        let before = Keys::from_pkcs8(std::slice::from_ref(&old)).unwrap();
        let during = Keys::from_pkcs8(&[new, old]).unwrap();
        assert_eq!(during.verify(&before.sign(&claims())), Ok(claims()));
        assert_eq!(during.signing_alg(), Alg::ES256);
        let jwks: serde_json::Value = serde_json::from_str(during.jwks()).unwrap();
        assert_eq!(jwks["keys"].as_array().unwrap().len(), 2);
        assert_eq!(jwks["keys"][0]["kid"], during.signing_kid());
    }

    /// RFC 8037, appendix A: the Ed25519 key of A.1 (its private part `d`, as PKCS#8
    /// v1: RFC 8410's fixed prefix and the 32 bytes; its public part is A.1's `x`) has
    /// the RFC 7638 thumbprint that A.3 publishes.
    #[test]
    fn kid_is_the_published_rfc_7638_thumbprint() {
        let d = B64.decode("nWGxne_9WmC6hEr0kuwsxERJxWl7MmkZcDusAxyuf2A").unwrap();
        let prefix = [0x30, 0x2e, 0x02, 0x01, 0x00, 0x30, 0x05, 0x06, 0x03, 0x2b, 0x65, 0x70, 0x04, 0x22, 0x04, 0x20];
        let keys = Keys::from_pkcs8(&[[&prefix[..], &d].concat()]).unwrap();
        assert_eq!(keys.signing_kid(), "kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k");
        assert_eq!(
            keys.jwks(),
            r#"{"keys":[{"alg":"EdDSA","crv":"Ed25519","kid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k","kty":"OKP","use":"sig","x":"11qYAYKxCrfVS_7TyWQHOg7hcvPapiMlrwIaaPcHURo"}]}"#
        );
        let header = keys.sign(&claims()).split('.').next().unwrap().to_string();
        assert_eq!(
            B64.decode(header).unwrap(),
            br#"{"alg":"EdDSA","kid":"kPrK_qmxVWaYVA9wwBF6Iuo3vVzz7TxHCTwXBygrS4k","typ":"JWT"}"#
        );
    }

    /// A P-256 key made for this test with `openssl genpkey -algorithm EC -pkeyopt
    /// ec_paramgen_curve:P-256` (it signs nothing else). Its thumbprint was computed
    /// apart from this code: the public point from `openssl pkey -pubout -outform DER`
    /// (its last 65 bytes: 0x04, X, Y), then in Python `base64.urlsafe_b64encode(
    /// hashlib.sha256(json.dumps({"kty": "EC", "crv": "P-256", "x": b64u(X), "y":
    /// b64u(Y)}, sort_keys=True, separators=(",", ":")).encode()).digest())` without
    /// its padding, `b64u` being the same unpadded base64url.
    #[test]
    fn kid_of_a_p256_key_is_its_rfc_7638_thumbprint() {
        const KEY: &str = "-----BEGIN PRIVATE KEY-----
MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQgK1Wg3ozCJ35ZktiJ
26guZyIpzVVbZX5X8dd8n8dRq4qhRANCAAS9x91Vvn/S/NhjfKjE7l9/yW+FIJbc
7+eMgR2jLbVT60dpKqWKtLlmYTzUNoxLuHc7/sSeln8/hEs/BfLxaTdS
-----END PRIVATE KEY-----
";
        let keys = Keys::from_pkcs8(&[pem_to_der(KEY).unwrap()]).unwrap();
        assert_eq!(keys.signing_alg(), Alg::ES256);
        assert_eq!(keys.signing_kid(), "4byjGeb34B-yaOhKjy7U5ppBMQ4VZP77USWu4_ZB-o0");
        let jwks: serde_json::Value = serde_json::from_str(keys.jwks()).unwrap();
        assert_eq!(jwks["keys"][0]["x"], "vcfdVb5_0vzYY3yoxO5ff8lvhSCW3O_njIEdoy21U-s");
        assert_eq!(jwks["keys"][0]["y"], "R2kqpYq0uWZhPNQ2jEu4dzv-xJ6Wfz-ESz8F8vFpN1I");
    }

    #[test]
    fn pem_refusals_say_what_the_key_is() {
        let block = |label: &str| format!("-----BEGIN {label}-----\nAA==\n-----END {label}-----\n");
        assert!(pem_to_der(&block("RSA PRIVATE KEY")).unwrap_err().contains("RSA"));
        assert!(pem_to_der(&block("ENCRYPTED PRIVATE KEY")).unwrap_err().contains("encrypted"));
        assert!(pem_to_der(&block("CERTIFICATE")).unwrap_err().contains("no -----BEGIN PRIVATE KEY----- block"));
        assert!(pem_to_der("").unwrap_err().contains("no -----BEGIN PRIVATE KEY----- block"));
        assert!(pem_to_der("-----BEGIN PRIVATE KEY-----\nAA==\n")
            .unwrap_err()
            .contains("no -----END PRIVATE KEY----- line"));
        // The first PKCS#8 block is the key, whatever comes before it.
        let der = generate_ed25519_pkcs8();
        assert_eq!(pem_to_der(&(block("EC PARAMETERS") + &der_to_pem(&der))).unwrap(), der);
    }

    #[test]
    fn pem_round_trip_and_errors() {
        let der = generate_ed25519_pkcs8();
        assert_eq!(pem_to_der(&der_to_pem(&der)).unwrap(), der);
        assert!(pem_to_der("-----BEGIN EC PRIVATE KEY-----\nAA==\n-----END EC PRIVATE KEY-----\n")
            .unwrap_err()
            .contains("pkcs8"));
        assert!(Keys::from_pkcs8(&[vec![1, 2, 3]]).is_err());
        assert!(Keys::from_pkcs8(&[der.clone(), der]).unwrap_err().contains("twice"));
    }
}
