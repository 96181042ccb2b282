//! The proof of work a queue may ask at entry (its `pow_difficulty` setting, 0 =
//! off; see `queue_core::pow`). `GET /api/queue/challenge` hands one out; an entry
//! without a solution, or with one that has expired, is answered 428 with a fresh
//! challenge in the body, so a client needs no second request to learn the rules.

use crate::error::ApiError;
use crate::extract::Field;
use crate::AppState;
use queue_client::QueueClient;
use queue_core::pow::{Challenge, Challenger};
use serde::Deserialize;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// A queue's difficulty is read from its settings at most this often per instance.
const DIFFICULTY_TTL: Duration = Duration::from_secs(2);

/// An entry's `pow` field: `{"challenge": "...", "nonce": "..."}`.
#[derive(Debug, Deserialize, PartialEq)]
pub struct Proof {
    pub challenge: String,
    pub nonce: String,
}

/// The challenger and what each queue asks. (Not the gate service's `Gate`, the
/// proxy's state: this checks an entry's proof of work.)
pub struct ProofOfWork {
    challenger: Challenger,
    difficulty: Mutex<HashMap<String, (u8, Instant)>>,
}

fn now_ms() -> i64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as i64)
}

impl ProofOfWork {
    /// Signs with `secret`, or with random bytes when none is given (one instance).
    pub fn new(secret: Option<&str>) -> ProofOfWork {
        let challenger = match secret.filter(|s| !s.is_empty()) {
            Some(s) => Challenger::new(s.as_bytes()),
            None => Challenger::new(uuid::Uuid::new_v4().as_bytes()),
        };
        ProofOfWork { challenger, difficulty: Mutex::new(HashMap::new()) }
    }

    /// What `queue` asks now (cached for [`DIFFICULTY_TTL`]).
    pub async fn difficulty(&self, client: &QueueClient, queue: &str) -> Result<u8, ApiError> {
        if let Some((d, at)) = self.difficulty.lock().unwrap().get(queue) {
            if at.elapsed() < DIFFICULTY_TTL {
                return Ok(*d);
            }
        }
        let d = client.config_get(queue).await?.pow_difficulty().clamp(0, 255) as u8;
        let mut cache = self.difficulty.lock().unwrap();
        if cache.len() > 10_000 {
            cache.clear();
        }
        cache.insert(queue.to_string(), (d, Instant::now()));
        Ok(d)
    }

    pub fn issue(&self, queue: &str, client_addr: &str, difficulty: u8) -> Challenge {
        let id: [u8; 12] = uuid::Uuid::new_v4().as_bytes()[..12].try_into().expect("12 bytes");
        self.challenger.issue(queue, client_addr, difficulty, now_ms(), id)
    }
}

/// A challenge as JSON.
pub fn challenge_json(queue: &str, c: Option<&Challenge>) -> Value {
    match c {
        Some(c) => {
            json!({ "queue": queue, "difficulty": c.difficulty, "challenge": c.challenge, "expiresAt": c.expires_at_ms })
        }
        None => json!({ "queue": queue, "difficulty": 0, "challenge": null, "expiresAt": null }),
    }
}

/// Lets an entry through when `queue` asks no proof or `proof` solves a challenge
/// issued to `client_addr` for it, used now for the first time.
pub async fn admit(
    state: &AppState,
    client: &QueueClient,
    queue: &str,
    client_addr: &str,
    proof: &Field<Proof>,
) -> Result<(), ApiError> {
    let gate = &state.pow;
    // A proof that cannot be one is refused even where none is asked.
    let proof = match proof {
        Field::Given(p) if queue_core::pow::well_formed(&p.challenge, &p.nonce) => Some(p),
        Field::Given(_) => {
            return Err(ApiError::BadRequest(
                "pow.challenge must be a challenge this service gave, pow.nonce digits".into(),
            ))
        }
        Field::WrongType => return Err(ApiError::BadRequest("pow must be {\"challenge\", \"nonce\"}".into())),
        Field::Absent | Field::Null => None,
    };
    let required = gate.difficulty(client, queue).await?;
    if required == 0 {
        return Ok(());
    }
    let fresh = |why: &'static str| {
        state.metrics.pow_refused(why).increment(1);
        state.metrics.pow_challenges.increment(1);
        ApiError::ProofRequired(why, challenge_json(queue, Some(&gate.issue(queue, client_addr, required))))
    };
    let Some(proof) = proof else {
        return Err(fresh("missing"));
    };
    let solved = match gate.challenger.check(queue, client_addr, &proof.challenge, &proof.nonce, required, now_ms()) {
        Ok(s) => s,
        Err(r) if r.wants_new_challenge() => return Err(fresh(r.as_str())),
        Err(r) => {
            state.metrics.pow_refused(r.as_str()).increment(1);
            return Err(ApiError::BadRequest(format!("the proof of work does not check out ({})", r.as_str())));
        }
    };
    if !client.use_challenge(queue, &solved.id, solved.expires_at_ms - now_ms()).await? {
        state.metrics.pow_refused("used").increment(1);
        return Err(ApiError::ProofUsed);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proofs_as_sent() {
        let p: Field<Proof> = serde_json::from_str(r#"{"challenge": "ab", "nonce": "12"}"#).unwrap();
        assert_eq!(p, Field::Given(Proof { challenge: "ab".into(), nonce: "12".into() }));
        let p: Field<Proof> = serde_json::from_str(r#"{"challenge": "ab", "nonce": 12}"#).unwrap();
        assert_eq!(p, Field::WrongType, "the nonce is a string of digits");
    }
}
