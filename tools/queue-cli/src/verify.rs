//! `queue-cli verify`: checks a queue's fair opening from its published proof
//! (`GET /api/queue/opening`), with its own hashing: the seed must hash (SHA-256 of
//! its hex text) to the commitment published before the opening, and the placed
//! order must be the idHashes sorted by hex SHA-1 of `seed:idHash` (ties by idHash).
//! In a queue with lanes the order is one run per lane, lanes in the order `lanes`
//! lists them, each run that long and sorted alone; the runs must add up to
//! `entrants`. Nobody may be listed twice. Every rank is confirmed; with a userId,
//! that person's placed rank (and lane) is printed.

use serde::Deserialize;
use sha1::{Digest, Sha1};
use sha2::Sha256;
use std::collections::{HashMap, HashSet};

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
    /// In a queue with lanes, each lane's entrants in lane order: the lengths of the
    /// order's runs. Empty (or absent, from an older queue-api) without lanes.
    #[serde(default)]
    pub lanes: Vec<LaneCount>,
}

/// One lane of the proof: its name and how many it placed.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct LaneCount {
    pub lane: String,
    pub entrants: u64,
}

/// Where the person asked about was placed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placed {
    /// 1-based, in the whole order.
    pub rank: usize,
    /// With lanes: the lane, the rank within it (1-based) and its entrants.
    pub lane: Option<(String, usize, usize)>,
}

/// What verification found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Not opened yet: nothing to check but the commitment to note.
    NotOpen { state: String, commitment: Option<String>, opens_at: i64 },
    /// Every rank confirmed (`lanes` runs, 0 without lanes); where the user was
    /// placed when asked about (none: not in the opening).
    Verified { entrants: usize, lanes: usize, user: Option<Option<Placed>> },
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The idHash a userId is published as: hex SHA-1.
pub fn id_hash(user: &str) -> String {
    hex(&Sha1::digest(user.as_bytes()))
}

/// The key the opening sorts by: hex SHA-1 of `seed:idHash`.
fn sort_key(seed: &str, h: &str) -> String {
    hex(&Sha1::digest(format!("{seed}:{h}").as_bytes()))
}

/// One run of the order: (lane name, none without lanes; first index; length).
type Run<'a> = (Option<&'a str>, usize, usize);

/// The runs of the order, one unnamed run without lanes. Errors when the lanes do
/// not add up to `entrants` or name a lane twice.
fn runs(proof: &Proof) -> Result<Vec<Run<'_>>, String> {
    if proof.lanes.is_empty() {
        return Ok(vec![(None, 0, proof.order.len())]);
    }
    let mut names = HashSet::new();
    for l in &proof.lanes {
        if !names.insert(l.lane.as_str()) {
            return Err(format!("lane {:?} is listed twice in lanes", l.lane));
        }
    }
    let sum: u64 = proof.lanes.iter().map(|l| l.entrants).sum();
    if sum != proof.entrants {
        let parts: Vec<String> = proof.lanes.iter().map(|l| format!("{} {}", l.lane, l.entrants)).collect();
        return Err(format!(
            "the lanes' entrants add up to {sum} ({}), but {} entrants are announced",
            parts.join(" + "),
            proof.entrants
        ));
    }
    let mut start = 0;
    Ok(proof
        .lanes
        .iter()
        .map(|l| {
            let run = (Some(l.lane.as_str()), start, l.entrants as usize);
            start += l.entrants as usize;
            run
        })
        .collect())
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
    let runs = runs(proof)?;
    let mut seen: HashMap<&str, usize> = HashMap::with_capacity(proof.order.len());
    for (i, h) in proof.order.iter().enumerate() {
        if let Some(first) = seen.insert(h.as_str(), i) {
            return Err(format!("the idHash {h} is listed twice, at ranks {} and {}", first + 1, i + 1));
        }
    }
    for &(lane, start, len) in &runs {
        let run = &proof.order[start..start + len];
        let mut keyed: Vec<(String, &String)> = run.iter().map(|h| (sort_key(seed, h), h)).collect();
        keyed.sort();
        for (k, ((_, want), got)) in keyed.iter().zip(run).enumerate() {
            if *want != got {
                let rank = start + k + 1;
                return Err(match lane {
                    None => format!("rank {rank}: the proof lists {got}, the seed places {want} there"),
                    Some(name) => format!(
                        "lane {name}, rank {} of its {len} (rank {rank} overall): the proof lists {got}, the seed \
                         places {want} there (the lane's run is out of order, or holds someone of another lane)",
                        k + 1
                    ),
                });
            }
        }
    }
    let placed = user.map(|u| {
        let h = id_hash(u);
        let i = proof.order.iter().position(|x| *x == h)?;
        let lane = runs
            .iter()
            .find(|(_, start, len)| (*start..start + len).contains(&i))
            .and_then(|(name, start, len)| name.map(|n| (n.to_string(), i - start + 1, *len)));
        Some(Placed { rank: i + 1, lane })
    });
    Ok(Outcome::Verified { entrants: proof.order.len(), lanes: proof.lanes.len(), user: placed })
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
            if !proof.lanes.is_empty() {
                println!("in the pre-queue now: {}", lane_list(&proof.lanes));
            }
            2
        }
        Ok(Outcome::Verified { entrants, lanes, user: placed }) => {
            println!(
                "queue {}: opening at {} ms verified: SHA-256(seed) matches the commitment, all {entrants} ranks confirmed",
                proof.queue,
                proof.opened_at.unwrap_or(0)
            );
            if lanes > 0 {
                println!("lane by lane, each run in the seed's order: {}", lane_list(&proof.lanes));
            }
            match (user, placed) {
                (Some(u), Some(Some(Placed { rank, lane }))) => {
                    match lane {
                        Some((name, k, of)) => {
                            println!("{u} was placed at rank {rank} of {entrants}, rank {k} of {of} in lane {name}")
                        }
                        None => println!("{u} was placed at rank {rank} of {entrants}"),
                    }
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

/// `presale 4, general 3`.
fn lane_list(lanes: &[LaneCount]) -> String {
    lanes.iter().map(|l| format!("{} {}", l.lane, l.entrants)).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const SEED: &str = "abababababababababababababababababababababababababababababababab";

    /// A true proof of `lanes` (name, users), as the opening places them: lane by
    /// lane, each in the seed's order; one run without a name when `lanes` has one
    /// lane named "".
    fn proof_of(lanes: &[(&str, &[&str])]) -> Proof {
        let mut order = Vec::new();
        let mut counts = Vec::new();
        for (name, users) in lanes {
            let mut keyed: Vec<(String, String)> = users
                .iter()
                .map(|u| {
                    let h = id_hash(u);
                    (sort_key(SEED, &h), h)
                })
                .collect();
            keyed.sort();
            order.extend(keyed.into_iter().map(|(_, h)| h));
            if !name.is_empty() {
                counts.push(LaneCount { lane: name.to_string(), entrants: users.len() as u64 });
            }
        }
        Proof {
            queue: "q".into(),
            opens_at: 1,
            commitment: Some(hex(&Sha256::digest(SEED.as_bytes()))),
            state: "open".into(),
            entrants: order.len() as u64,
            seed: Some(SEED.into()),
            opened_at: Some(1),
            order,
            lanes: counts,
        }
    }

    fn proof(users: &[&str]) -> Proof {
        proof_of(&[("", users)])
    }

    const PRESALE: &[&str] = &["a", "b", "c", "d"];
    const GENERAL: &[&str] = &["e", "f", "g", "h", "i"];

    fn two_lanes() -> Proof {
        proof_of(&[("presale", PRESALE), ("general", GENERAL)])
    }

    #[test]
    fn a_true_proof_verifies_and_finds_the_user() {
        let p = proof(&["a", "b", "c", "d", "e"]);
        let Outcome::Verified { entrants, lanes, user } = check(&p, Some("c")).unwrap() else { panic!() };
        assert_eq!((entrants, lanes), (5, 0));
        let placed = user.unwrap().unwrap();
        assert_eq!(p.order[placed.rank - 1], id_hash("c"));
        assert_eq!(placed.lane, None);
        assert_eq!(check(&p, Some("zz")).unwrap(), Outcome::Verified { entrants: 5, lanes: 0, user: Some(None) });
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

    /// The keys of the two lanes' runs overlap, so that one sorted list of everyone
    /// would not be the lane-by-lane order: the lanes are really checked run by run.
    #[test]
    fn lanes_verify_run_by_run_and_place_the_user_in_their_lane() {
        let p = two_lanes();
        let mut all = p.order.clone();
        all.sort_by_key(|h| sort_key(SEED, h));
        assert_ne!(all, p.order, "the test's lanes must not be one sorted run");
        let Outcome::Verified { entrants, lanes, user } = check(&p, Some("g")).unwrap() else { panic!() };
        assert_eq!((entrants, lanes), (9, 2));
        let placed = user.unwrap().unwrap();
        assert_eq!(p.order[placed.rank - 1], id_hash("g"));
        let (lane, k, of) = placed.lane.unwrap();
        assert_eq!((lane.as_str(), k + 4, of), ("general", placed.rank, 5));
        // The same order read as one run (lanes dropped) does not verify.
        let mut one_run = p.clone();
        one_run.lanes.clear();
        assert!(check(&one_run, None).unwrap_err().starts_with("rank "));
        // An empty lane is a run of length 0.
        let with_empty = proof_of(&[("vip", &[]), ("presale", PRESALE), ("general", GENERAL)]);
        assert!(matches!(check(&with_empty, None), Ok(Outcome::Verified { lanes: 3, .. })));
    }

    #[test]
    fn a_lane_count_changed_fails() {
        let mut p = two_lanes();
        p.lanes[0].entrants += 1;
        let e = check(&p, None).unwrap_err();
        assert_eq!(e, "the lanes' entrants add up to 10 (presale 5 + general 5), but 9 entrants are announced");
        // Counts shifted between lanes (the sum kept): the runs no longer hold their
        // lanes' entrants, and one of them is out of order.
        for (from, to) in [(0, 1), (1, 0)] {
            let mut p = two_lanes();
            p.lanes[from].entrants -= 1;
            p.lanes[to].entrants += 1;
            shifted_or_sorted(&p);
        }
        let mut twice = two_lanes();
        twice.lanes[1].lane = "presale".into();
        assert!(check(&twice, None).unwrap_err().contains("listed twice in lanes"));
    }

    /// A shifted boundary fails unless the moved idHash happens to sort into its new
    /// run, which these fixed users are chosen not to allow.
    fn shifted_or_sorted(p: &Proof) {
        let e = check(p, None).unwrap_err();
        assert!(e.starts_with("lane ") && e.contains("out of order"), "{e}");
    }

    #[test]
    fn a_person_moved_to_another_lane_fails() {
        // Someone of presale listed in general's run instead (counts adjusted to
        // match), wherever in that run they are put but their sorted place.
        let good = two_lanes();
        let moved = good.order[1].clone();
        let mut general: Vec<String> = good.order[4..].to_vec();
        let mut tried = 0;
        for at in 0..=general.len() {
            general.insert(at, moved.clone());
            let keys: Vec<String> = general.iter().map(|h| sort_key(SEED, h)).collect();
            let sorted = keys.windows(2).all(|w| w[0] <= w[1]);
            general.remove(at);
            if sorted {
                continue;
            }
            let mut p = good.clone();
            p.order.remove(1);
            p.order.insert(3 + at, moved.clone());
            p.lanes[0].entrants -= 1;
            p.lanes[1].entrants += 1;
            let e = check(&p, None).unwrap_err();
            assert!(e.starts_with("lane general, rank ") && e.contains("holds someone of another lane"), "{e}");
            tried += 1;
        }
        assert!(tried >= 4, "{tried}");
        // Moved without adjusting the counts: the boundary then cuts the runs wrong.
        let mut p = good.clone();
        p.order.remove(1);
        p.order.push(moved);
        assert!(check(&p, None).unwrap_err().starts_with("lane "));
    }

    #[test]
    fn a_lane_run_out_of_order_or_a_person_twice_fails() {
        let mut p = two_lanes();
        p.order.swap(5, 6);
        let e = check(&p, None).unwrap_err();
        assert!(e.starts_with("lane general, rank 2 of its 5 (rank 6 overall): the proof lists "), "{e}");
        let mut p = two_lanes();
        p.order[6] = p.order[2].clone();
        assert_eq!(
            check(&p, None).unwrap_err(),
            format!("the idHash {} is listed twice, at ranks 3 and 7", p.order[2])
        );
    }
}
