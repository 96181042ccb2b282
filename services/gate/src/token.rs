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
    /// The base64url header `{"alg":..,"typ":"JWT","kid":..}`, made once.
    header: String,
    jwk: serde_json::Value,
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
        let jwks = serde_json::json!({ "keys": keys.iter().map(|k| k.jwk.clone()).collect::<Vec<_>>() }).to_string();
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
    let (alg, pair, jwk) = if let Ok(p) = Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
        let x = B64.encode(p.public_key().as_ref());
        let jwk = serde_json::json!({ "crv": "Ed25519", "kty": "OKP", "x": x });
        (Alg::EdDSA, Pair::Ed25519(p), jwk)
    } else {
        match EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, rng) {
            Ok(p) => {
                // An uncompressed point: 0x04, X (32 bytes), Y (32 bytes).
                let point = p.public_key().as_ref();
                let (x, y) = (B64.encode(&point[1..33]), B64.encode(&point[33..65]));
                let jwk = serde_json::json!({ "crv": "P-256", "kty": "EC", "x": x, "y": y });
                (Alg::ES256, Pair::P256(p), jwk)
            }
            Err(_) => {
                return Err("not an Ed25519 or P-256 private key in PKCS#8 form (make one with \
                            `openssl genpkey -algorithm ed25519`; convert an EC key with \
                            `openssl pkcs8 -topk8 -nocrypt`)"
                    .into())
            }
        }
    };
    // RFC 7638: the SHA-256 of the required members in lexicographic order, no spaces
    // (serde_json's map is ordered by key).
    let thumbprint = ring::digest::digest(&ring::digest::SHA256, jwk.to_string().as_bytes());
    let kid = B64.encode(thumbprint.as_ref());
    let mut published = jwk;
    published["kid"] = kid.clone().into();
    published["alg"] = alg.name().into();
    published["use"] = "sig".into();
    let header = B64.encode(serde_json::json!({ "alg": alg.name(), "typ": "JWT", "kid": kid }).to_string());
    Ok(PrivateKey { kid, alg, pair, header, jwk: published })
}

/// The DER inside a `-----BEGIN PRIVATE KEY-----` PEM block.
pub fn pem_to_der(text: &str) -> Result<Vec<u8>, String> {
    const BEGIN: &str = "-----BEGIN PRIVATE KEY-----";
    const END: &str = "-----END PRIVATE KEY-----";
    let Some(start) = text.find(BEGIN) else {
        if text.contains("-----BEGIN EC PRIVATE KEY-----") {
            return Err("an SEC1 EC key: convert it to PKCS#8 with `openssl pkcs8 -topk8 -nocrypt`".into());
        }
        if text.contains("ENCRYPTED PRIVATE KEY") {
            return Err("an encrypted key: the gate reads unencrypted PKCS#8 keys".into());
        }
        return Err(format!("no {BEGIN} block"));
    };
    let body = &text[start + BEGIN.len()..];
    let end = body.find(END).ok_or_else(|| format!("no {END} line"))?;
    let b64: String = body[..end].chars().filter(|c| !c.is_whitespace()).collect();
    base64::engine::general_purpose::STANDARD.decode(b64).map_err(|e| format!("bad base64 in the PEM block: {e}"))
}

/// A new Ed25519 private key in PKCS#8 (v2) DER.
pub fn generate_ed25519_pkcs8() -> Vec<u8> {
    Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).expect("system randomness").as_ref().to_vec()
}

/// A PKCS#8 DER document as a PEM block.
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

    #[test]
    fn pem_round_trip_and_errors() {
        let der = generate_ed25519_pkcs8();
        assert_eq!(pem_to_der(&der_to_pem(&der)).unwrap(), der);
        assert!(pem_to_der("-----BEGIN EC PRIVATE KEY-----\nAA==\n").unwrap_err().contains("pkcs8"));
        assert!(Keys::from_pkcs8(&[vec![1, 2, 3]]).is_err());
        assert!(Keys::from_pkcs8(&[der.clone(), der]).unwrap_err().contains("twice"));
    }
}
