//! `queue-cli verify`: checks a queue's fair opening from its published proof
//! (`GET /api/queue/opening`), with its own hashing: the seed must hash (SHA-256 of
//! its hex text) to the commitment published before the opening, and the placed
//! order must be the idHashes sorted by hex SHA-1 of `seed:idHash`. Every rank is
//! confirmed; with a userId, that person's placed rank is printed.

use serde::Deserialize;
use sha1::{Digest, Sha1};
use sha2::Sha256;

/// The proof as queue-api publishes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Proof {
    pub queue: String,
    pub opens_at: i64,
    pub commitment: Option<String>,
    pub state: String,
    pub entrants: u64,
    pub seed: Option<String>,
    pub opened_at: Option<i64>,
    #[serde(default)]
    pub order: Vec<String>,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not opened yet: nothing to check but the commitment to note.
    NotOpen { state: String, commitment: Option<String>, opens_at: i64 },
    /// Every rank confirmed; the user's placed rank (1-based) when asked about.
    Verified { entrants: usize, user_rank: Option<Option<usize>> },
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The idHash a userId is published as: hex SHA-1.
pub fn id_hash(user: &str) -> String {
    hex(&Sha1::digest(user.as_bytes()))
}

/// Checks `proof`; an error says what does not match.
pub fn check(proof: &Proof, user: Option<&str>) -> Result<Outcome, String> {
    if proof.state != "open" {
        return Ok(Outcome::NotOpen {
            state: proof.state.clone(),
            commitment: proof.commitment.clone(),
            opens_at: proof.opens_at,
        });
    }
    let seed = proof.seed.as_deref().ok_or("the queue is open but publishes no seed")?;
    let commitment = proof.commitment.as_deref().ok_or("the queue is open but publishes no commitment")?;
    if seed.len() != 64 || !seed.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(format!("the seed {seed:?} is not 64 hex characters"));
    }
    let hashed = hex(&Sha256::digest(seed.as_bytes()));
    if hashed != commitment.to_ascii_lowercase() {
        return Err(format!("SHA-256 of the seed is {hashed}, but the commitment was {commitment}"));
    }
    if proof.order.len() as u64 != proof.entrants {
        return Err(format!("{} entrants announced, {} idHashes listed", proof.entrants, proof.order.len()));
    }
    let mut keyed: Vec<(String, &String)> =
        proof.order.iter().map(|h| (hex(&Sha1::digest(format!("{seed}:{h}").as_bytes())), h)).collect();
    keyed.sort();
    if keyed.windows(2).any(|w| w[0].1 == w[1].1) {
        return Err("an idHash is listed twice".into());
    }
    for (i, ((_, want), got)) in keyed.iter().zip(&proof.order).enumerate() {
        if *want != got {
            return Err(format!("rank {}: the proof lists {got}, the seed places {want} there", i + 1));
        }
    }
    let user_rank = user.map(|u| {
        let h = id_hash(u);
        proof.order.iter().position(|x| *x == h).map(|i| i + 1)
    });
    Ok(Outcome::Verified { entrants: proof.order.len(), user_rank })
}

/// Fetches the proof of `queue` from queue-api at `api`.
pub async fn fetch(api: &str, queue: &str) -> Result<Proof, String> {
    let url = format!("{}/api/queue/opening", api.trim_end_matches('/'));
    let resp = reqwest::Client::new()
        .get(&url)
        .query(&[("queue", queue)])
        .send()
        .await
        .map_err(|e| format!("cannot reach {url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    resp.json::<Proof>().await.map_err(|e| format!("{url}: not a proof: {e}"))
}

/// The command: 0 verified, 1 a mismatch (or the user is not in the opening), 2 not
/// opened yet or unreachable.
pub async fn run(api: &str, queue: &str, user: Option<&str>) -> u8 {
    let proof = match fetch(api, queue).await {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return 2;
        }
    };
    match check(&proof, user) {
        Ok(Outcome::NotOpen { state, commitment, opens_at }) => {
            println!("queue {}: not opened yet (state {state}, opens at {opens_at} ms)", proof.queue);
            if let Some(c) = commitment {
                println!("commitment {c}: keep it; after the opening the seed must hash to it");
            }
            2
        }
        Ok(Outcome::Verified { entrants, user_rank }) => {
            println!(
                "queue {}: opening at {} ms verified: SHA-256(seed) matches the commitment, all {entrants} ranks confirmed",
                proof.queue,
                proof.opened_at.unwrap_or(0)
            );
            match (user, user_rank) {
                (Some(u), Some(Some(rank))) => {
                    println!("{u} was placed at rank {rank} of {entrants}");
                    0
                }
                (Some(u), Some(None)) => {
                    println!("FAILED: {u} (idHash {}) is not in the opening", id_hash(u));
                    1
                }
                _ => 0,
            }
        }
        Err(e) => {
            println!("FAILED: queue {}: {e}", proof.queue);
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn proof(users: &[&str]) -> Proof {
        let seed = "ab".repeat(32);
        let mut keyed: Vec<(String, String)> = users
            .iter()
            .map(|u| {
                let h = id_hash(u);
                (hex(&Sha1::digest(format!("{seed}:{h}").as_bytes())), h)
            })
            .collect();
        keyed.sort();
        Proof {
            queue: "q".into(),
            opens_at: 1,
            commitment: Some(hex(&Sha256::digest(seed.as_bytes()))),
            state: "open".into(),
            entrants: users.len() as u64,
            seed: Some(seed),
            opened_at: Some(1),
            order: keyed.into_iter().map(|(_, h)| h).collect(),
        }
    }

    #[test]
    fn a_true_proof_verifies_and_finds_the_user() {
        let p = proof(&["a", "b", "c", "d", "e"]);
        let Outcome::Verified { entrants, user_rank } = check(&p, Some("c")).unwrap() else { panic!() };
        assert_eq!(entrants, 5);
        let rank = user_rank.unwrap().unwrap();
        assert_eq!(p.order[rank - 1], id_hash("c"));
        assert_eq!(check(&p, Some("zz")).unwrap(), Outcome::Verified { entrants: 5, user_rank: Some(None) });
    }

    #[test]
    fn tampering_fails() {
        let good = proof(&["a", "b", "c", "d", "e"]);
        let mut swapped = good.clone();
        swapped.order.swap(1, 3);
        assert!(check(&swapped, None).unwrap_err().starts_with("rank 2:"));
        let mut other_seed = good.clone();
        other_seed.seed = Some("cd".repeat(32));
        assert!(check(&other_seed, None).unwrap_err().contains("commitment"));
        let mut dropped = good.clone();
        dropped.order.pop();
        assert!(check(&dropped, None).is_err());
        let mut twice = good;
        twice.order[1] = twice.order[0].clone();
        assert!(check(&twice, None).is_err());
    }
}
