//! The app's login, played by the swarm: a signing key (given as a PKCS#8 file, or
//! made here and written to that file), the JWKS queue-api is started with
//! (`--identity-jwks`), and one short-lived access token per virtual user, whose
//! subject is the user's account. queue-api verifies RS256, ES256 and EdDSA; a key
//! made here is ES256 (P-256), a key given may be any of the three.

use base64::engine::general_purpose::{STANDARD, URL_SAFE_NO_PAD};
use base64::Engine;
use ring::rand::SystemRandom;
use ring::signature::{self, KeyPair};
use serde_json::{json, Value};
use sha2::Digest;
use std::path::Path;

enum Pair {
    Es256(signature::EcdsaKeyPair),
    EdDsa(signature::Ed25519KeyPair),
    Rs256(signature::RsaKeyPair),
}

/// A login's signing key and what its tokens say.
pub struct Login {
    pair: Pair,
    kid: String,
    rng: SystemRandom,
    pub issuer: String,
    pub audience: String,
}

impl std::fmt::Debug for Login {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Login({} key {}, iss {}, aud {})", self.alg(), self.kid, self.issuer, self.audience)
    }
}

/// The DER inside a PEM `PRIVATE KEY` block, or the file as it came (DER).
fn der_of(file: &[u8]) -> Result<Vec<u8>, String> {
    let Ok(text) = std::str::from_utf8(file) else { return Ok(file.to_vec()) };
    if !text.contains("-----BEGIN") {
        return Ok(file.to_vec());
    }
    if !text.contains("-----BEGIN PRIVATE KEY-----") {
        return Err(
            "a PEM key must be PKCS#8 (-----BEGIN PRIVATE KEY-----; convert with `openssl pkcs8 -topk8 -nocrypt`)"
                .into(),
        );
    }
    let body: String = text
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN PRIVATE KEY-----"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    STANDARD.decode(body.trim()).map_err(|e| format!("the PEM key's base64 does not read: {e}"))
}

fn pem_of(der: &[u8]) -> String {
    let b64 = STANDARD.encode(der);
    let lines: Vec<&str> =
        b64.as_bytes().chunks(64).map(|c| std::str::from_utf8(c).expect("base64 is ASCII")).collect();
    format!("-----BEGIN PRIVATE KEY-----\n{}\n-----END PRIVATE KEY-----\n", lines.join("\n"))
}

impl Login {
    /// Reads the PKCS#8 key at `path` (PEM or DER: P-256, Ed25519 or RSA); when the file
    /// does not exist, makes a fresh P-256 key and writes it there (PEM, mode 0600).
    pub fn load_or_create(path: &Path, issuer: &str, audience: &str) -> Result<Login, String> {
        let rng = SystemRandom::new();
        let der = match std::fs::read(path) {
            Ok(file) => der_of(&file)?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let doc = signature::EcdsaKeyPair::generate_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, &rng)
                    .map_err(|_| "could not make a P-256 key".to_string())?;
                write_private(path, pem_of(doc.as_ref()).as_bytes())?;
                doc.as_ref().to_vec()
            }
            Err(e) => return Err(format!("reading the key {}: {e}", path.display())),
        };
        Login::from_pkcs8(&der, issuer, audience).map_err(|e| format!("the key {}: {e}", path.display()))
    }

    /// A key from PKCS#8 DER: P-256 (ES256), Ed25519 (EdDSA) or RSA of 2048 bits or more (RS256).
    pub fn from_pkcs8(der: &[u8], issuer: &str, audience: &str) -> Result<Login, String> {
        if issuer.is_empty() || audience.is_empty() {
            return Err("the issuer and the audience must not be empty".into());
        }
        let rng = SystemRandom::new();
        let pair = if let Ok(p) =
            signature::EcdsaKeyPair::from_pkcs8(&signature::ECDSA_P256_SHA256_FIXED_SIGNING, der, &rng)
        {
            Pair::Es256(p)
        } else if let Ok(p) = signature::Ed25519KeyPair::from_pkcs8_maybe_unchecked(der) {
            Pair::EdDsa(p)
        } else if let Ok(p) = signature::RsaKeyPair::from_pkcs8(der) {
            Pair::Rs256(p)
        } else {
            return Err("not a PKCS#8 P-256, Ed25519 or RSA (2048 bits or more) private key".into());
        };
        let public: &[u8] = match &pair {
            Pair::Es256(p) => p.public_key().as_ref(),
            Pair::EdDsa(p) => p.public_key().as_ref(),
            Pair::Rs256(p) => p.public_key().as_ref(),
        };
        let kid = format!("swarm-{}", &URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(public))[..12]);
        Ok(Login { pair, kid, rng, issuer: issuer.to_string(), audience: audience.to_string() })
    }

    pub fn alg(&self) -> &'static str {
        match self.pair {
            Pair::Es256(_) => "ES256",
            Pair::EdDsa(_) => "EdDSA",
            Pair::Rs256(_) => "RS256",
        }
    }

    /// The public key as a JWKS (RFC 7517), as queue-api's `--identity-jwks` reads it.
    pub fn jwks(&self) -> Value {
        let b64 = |b: &[u8]| URL_SAFE_NO_PAD.encode(b);
        let key = match &self.pair {
            Pair::Es256(p) => {
                let point = p.public_key().as_ref(); // 0x04 || x || y
                json!({"kty": "EC", "crv": "P-256", "x": b64(&point[1..33]), "y": b64(&point[33..65])})
            }
            Pair::EdDsa(p) => json!({"kty": "OKP", "crv": "Ed25519", "x": b64(p.public_key().as_ref())}),
            Pair::Rs256(p) => {
                let public = ring::rsa::PublicKeyComponents::<Vec<u8>>::from(p.public());
                json!({"kty": "RSA", "n": b64(&public.n), "e": b64(&public.e)})
            }
        };
        let mut key = key;
        key["kid"] = json!(self.kid);
        key["alg"] = json!(self.alg());
        key["use"] = json!("sig");
        json!({ "keys": [key] })
    }

    /// Writes [`Login::jwks`] to `path`.
    pub fn write_jwks(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(&self.jwks()).expect("a JWKS serializes");
        std::fs::write(path, text + "\n").map_err(|e| format!("writing the JWKS {}: {e}", path.display()))
    }

    /// A signed access token for `subject`, valid from a minute ago for `lifetime_secs`,
    /// with `extra` claims added (say, a lane claim).
    pub fn token(&self, subject: &str, lifetime_secs: u64, extra: Option<(&str, Value)>) -> String {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
        let header = json!({"alg": self.alg(), "kid": self.kid, "typ": "JWT"});
        let mut claims = json!({"iss": self.issuer, "aud": self.audience, "sub": subject,
            "iat": now.saturating_sub(60), "exp": now + lifetime_secs});
        if let Some((name, value)) = extra {
            claims[name] = value;
        }
        let enc = |v: &Value| URL_SAFE_NO_PAD.encode(v.to_string());
        let input = format!("{}.{}", enc(&header), enc(&claims));
        let sig = match &self.pair {
            Pair::Es256(p) => p.sign(&self.rng, input.as_bytes()).expect("P-256 signs").as_ref().to_vec(),
            Pair::EdDsa(p) => p.sign(input.as_bytes()).as_ref().to_vec(),
            Pair::Rs256(p) => {
                let mut sig = vec![0; p.public().modulus_len()];
                p.sign(&signature::RSA_PKCS1_SHA256, &self.rng, input.as_bytes(), &mut sig).expect("RSA signs");
                sig
            }
        };
        format!("{input}.{}", URL_SAFE_NO_PAD.encode(sig))
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> Result<(), String> {
    use std::io::Write;
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut f = options.open(path).map_err(|e| format!("writing the key {}: {e}", path.display()))?;
    f.write_all(bytes).map_err(|e| format!("writing the key {}: {e}", path.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn verify(login: &Login, token: &str) -> bool {
        let (input, sig) = token.rsplit_once('.').unwrap();
        let sig = URL_SAFE_NO_PAD.decode(sig).unwrap();
        let jwk = &login.jwks()["keys"][0];
        let d = |f: &str| URL_SAFE_NO_PAD.decode(jwk[f].as_str().unwrap()).unwrap();
        match login.alg() {
            "ES256" => {
                let point = [&[4u8][..], &d("x"), &d("y")].concat();
                signature::UnparsedPublicKey::new(&signature::ECDSA_P256_SHA256_FIXED, point)
                    .verify(input.as_bytes(), &sig)
                    .is_ok()
            }
            "EdDSA" => {
                signature::UnparsedPublicKey::new(&signature::ED25519, d("x")).verify(input.as_bytes(), &sig).is_ok()
            }
            _ => unreachable!(),
        }
    }

    #[test]
    fn a_key_made_here_is_written_read_back_and_its_tokens_verify_with_the_jwks() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("key.pem");
        let made = Login::load_or_create(&path, "https://login.test", "shop").unwrap();
        let again = Login::load_or_create(&path, "https://login.test", "shop").unwrap();
        assert_eq!(made.jwks(), again.jwks(), "the same key read back");
        assert_eq!(made.alg(), "ES256");
        let token = again.token("acct-1", 600, Some(("groups", json!(["presale"]))));
        assert!(verify(&made, &token));
        let claims: Value =
            serde_json::from_slice(&URL_SAFE_NO_PAD.decode(token.split('.').nth(1).unwrap()).unwrap()).unwrap();
        assert_eq!((claims["sub"].as_str(), claims["aud"].as_str()), (Some("acct-1"), Some("shop")));
        assert_eq!(claims["groups"], json!(["presale"]));
        let mut bad = token.clone();
        bad.push('A');
        assert!(!verify(&made, &bad));
    }

    #[test]
    fn an_ed25519_key_is_read_and_garbage_is_refused_with_a_reason() {
        let doc = signature::Ed25519KeyPair::generate_pkcs8(&SystemRandom::new()).unwrap();
        let login = Login::from_pkcs8(doc.as_ref(), "iss", "aud").unwrap();
        assert_eq!(login.alg(), "EdDSA");
        assert!(verify(&login, &login.token("a", 60, None)));
        let e = Login::from_pkcs8(b"not a key", "iss", "aud").unwrap_err();
        assert!(e.contains("PKCS#8"), "{e}");
        assert!(Login::from_pkcs8(doc.as_ref(), "", "aud").is_err());
        assert!(der_of(b"-----BEGIN EC PRIVATE KEY-----\nAAAA\n-----END EC PRIVATE KEY-----\n").is_err());
    }
}
