//! A verifiably fair opening (docs/commands.md, "A verifiably fair opening").
//!
//! Before a queue's `opens_at`, QUEUE.ENTER puts people in a pre-queue (a hash
//! userId -> nickname: the order they came in does not matter). When the opening is
//! scheduled the queue draws a secret seed and publishes its commitment, the hex
//! SHA-256 of the seed (as the 64 hex characters). The first command on the queue at
//! or after `opens_at` opens it, inside that command: everyone in the pre-queue is
//! placed at the back of the line ordered by `sort_key` = hex SHA-1 of
//! `seed ":" idHash`, where idHash is the hex SHA-1 of the userId; the seed is then
//! revealed and the idHashes are kept in placed order (the proof). Anyone can check
//! that SHA-256(seed) is the commitment published before, and recompute the order.
//!
//! In a queue with lanes each entrant keeps its lane: the pre-queue's value is
//! `<lane index>|<nickname>`, and the opening places each lane's entrants, in the same
//! seeded order, at the back of that lane; the proof lists lane 0's idHashes, then
//! lane 1's, and so on.
//!
//! Part of the engine: the rules ([`super`]) call in here; this file changes the line
//! only through [`super::members`].

use super::members::{add_waiter, is_promoted, lane_next_seq, next_seq, remove};
use super::store::{stat, Aux, Event, Part, Store, ALL_PARTS};
use crate::error::QueueError;
use crate::hex::hex;
use crate::replies::Standing;
pub use crate::replies::{Opening, State};
use sha1::Digest as _;

/// Fields of the opening hash.
pub const SEED: &str = "seed";
pub const COMMITMENT: &str = "commitment";
pub const OPENED_AT: &str = "opened_at";
pub const ENTRANTS: &str = "entrants";
/// In a queue with lanes: how many of the proof's idHashes each lane placed, lanes in
/// order, comma-separated (where each lane's run of the proof ends).
pub const LANE_ENTRANTS: &str = "lane_entrants";

/// Most idHashes one `QUEUE.OPENING Q PROOF start count` lists.
pub const MAX_PROOF_PAGE: i64 = 100_000;

/// Hex SHA-1 of `data`.
pub fn sha1_hex(data: &[u8]) -> String {
    hex(&sha1::Sha1::digest(data))
}

/// The commitment to `seed` (its hex text): hex SHA-256 of that text.
pub fn commitment(seed_hex: &str) -> String {
    hex(&sha2::Sha256::digest(seed_hex.as_bytes()))
}

/// The idHash a userId is published as.
pub fn id_hash(user: &[u8]) -> String {
    sha1_hex(user)
}

/// The key the opening orders entrants by (ascending; ties, which need a SHA-1
/// collision, by idHash).
pub fn sort_key(seed_hex: &str, id_hash: &str) -> String {
    sha1_hex(format!("{seed_hex}:{id_hash}").as_bytes())
}

/// The placed order of the entrants with these idHashes.
pub fn order(seed_hex: &str, id_hashes: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut keyed: Vec<(String, String)> = id_hashes.into_iter().map(|h| (sort_key(seed_hex, &h), h)).collect();
    keyed.sort();
    keyed.into_iter().map(|(_, h)| h).collect()
}

/// Whether an opening is scheduled and not yet done.
pub fn pending<S: Store>(s: &S) -> bool {
    stat(s, stat::OPENING) == 1
}

/// Whether entries go to the pre-queue now (and nobody is promoted).
pub fn before_opening<S: Store>(s: &S, now: i64) -> bool {
    s.setting(crate::config::OPENS_AT) > now
}

/// Schedules an opening when `opens_at` is ahead and none is scheduled: a fresh seed
/// and its commitment; the proof of an earlier opening goes. Called after
/// QUEUE.CONFIG SET and by an entry before the opening. Whether it scheduled.
pub fn schedule_if_needed<S: Store>(s: &mut S, now: i64) -> Result<bool, QueueError> {
    if !before_opening(s, now) || pending(s) {
        return Ok(false);
    }
    s.check(&[Part::Stats])?;
    let seed = hex(&s.random_seed());
    s.aux_del(Aux::Opening);
    s.aux_del(Aux::Proof);
    s.aux_hset(Aux::Opening, SEED.as_bytes(), seed.as_bytes());
    s.aux_hset(Aux::Opening, COMMITMENT.as_bytes(), commitment(&seed).as_bytes());
    s.set_stat(stat::OPENING, 1);
    Ok(true)
}

/// Opens the queue if an opening is scheduled and its time has come. Whether it did.
pub fn open_if_due<S: Store>(s: &mut S, now: i64) -> Result<bool, QueueError> {
    if !pending(s) || before_opening(s, now) {
        return Ok(false);
    }
    s.check(&ALL_PARTS)?;
    open(s, now);
    Ok(true)
}

/// An entrant at the opening: lane, sort key, idHash, userId, nickname (sorted so).
type Entrant = (usize, String, String, Vec<u8>, Vec<u8>);

/// A pre-queue value: the nickname, after `<lane index>|` in a queue with lanes.
fn pre_value(lane: Option<usize>, nickname: &[u8]) -> Vec<u8> {
    match lane {
        Some(l) => {
            let mut v = format!("{l}|").into_bytes();
            v.extend_from_slice(nickname);
            v
        }
        None => nickname.to_vec(),
    }
}

/// A pre-queue value read back: (lane index, nickname); lane 0 without lanes.
fn pre_entry(multi: bool, v: Vec<u8>) -> (usize, Vec<u8>) {
    if !multi {
        return (0, v);
    }
    match v.iter().position(|&b| b == b'|') {
        Some(i) => {
            let lane = std::str::from_utf8(&v[..i]).ok().and_then(|l| l.parse().ok()).unwrap_or(0);
            (lane, v[i + 1..].to_vec())
        }
        None => (0, v),
    }
}

/// The opening itself: the pre-queue placed in the seeded order at the back of the
/// line (of each entrant's lane, lanes in order), heard from now; the seed revealed,
/// the proof kept.
fn open<S: Store>(s: &mut S, now: i64) {
    let seed = s.aux_hget(Aux::Opening, SEED.as_bytes()).map(|v| String::from_utf8_lossy(&v).into_owned());
    let seed = seed.unwrap_or_default();
    let lanes = s.lanes();
    let multi = lanes.multi();
    let mut entrants: Vec<Entrant> = s
        .aux_hgetall(Aux::Pre)
        .into_iter()
        .map(|(user, v)| {
            let h = id_hash(&user);
            let (lane, nickname) = pre_entry(multi, v);
            (lane.min(lanes.len().max(1) - 1), sort_key(&seed, &h), h, user, nickname)
        })
        .collect();
    entrants.sort();
    let mut proof = Vec::with_capacity(entrants.len());
    let mut per_lane = vec![0usize; lanes.len().max(1)];
    for (lane, _, h, user, nickname) in entrants {
        let u = s.user_of(&user);
        // Someone in line already (which an entry before the opening prevents) keeps
        // their place.
        if s.waiting_score(&u).is_some() {
            continue;
        }
        let seq = if multi { lane_next_seq(s, lane) } else { next_seq(s) };
        add_waiter(s, &u, seq, now, &nickname);
        proof.push(h.into_bytes());
        per_lane[lane] += 1;
    }
    s.aux_del(Aux::Pre);
    if !proof.is_empty() {
        s.proof_push(&proof);
    }
    s.aux_hset(Aux::Opening, OPENED_AT.as_bytes(), now.to_string().as_bytes());
    s.aux_hset(Aux::Opening, ENTRANTS.as_bytes(), proof.len().to_string().as_bytes());
    if multi {
        let counts: Vec<String> = per_lane.iter().map(usize::to_string).collect();
        s.aux_hset(Aux::Opening, LANE_ENTRANTS.as_bytes(), counts.join(",").as_bytes());
    }
    s.set_stat(stat::OPENING, 0);
    s.log_draft().note_reset();
}

/// QUEUE.ENTER before the opening: into the pre-queue (someone there keeps their
/// place, the order is drawn anyway; someone in line leaves it, giving back any
/// ticket).
pub fn enter_pre<S: Store>(
    s: &mut S,
    user: &S::User,
    nickname: &[u8],
    now: i64,
    lane: Option<usize>,
) -> Result<Standing, QueueError> {
    schedule_if_needed(s, now)?;
    if let Some(seq) = s.waiting_score(user) {
        let holds = is_promoted(s, seq);
        if holds {
            s.check(&ALL_PARTS)?;
        }
        remove(s, user, seq, holds);
        if !holds {
            s.log_draft().note_again(seq);
        }
    }
    s.aux_hset(Aux::Pre, user.as_ref(), &pre_value(lane, nickname));
    s.count(Event::Entered, 1);
    Ok(Standing::Pre { nickname: nickname.to_vec(), opens_at: s.setting(crate::config::OPENS_AT) })
}

/// Where `user` stands if in the pre-queue.
pub fn pre_standing<S: Store>(s: &S, user: &S::User) -> Option<Standing> {
    if !pending(s) {
        return None;
    }
    let (_, nickname) = pre_entry(s.lanes().multi(), s.aux_hget(Aux::Pre, user.as_ref())?);
    Some(Standing::Pre { nickname, opens_at: s.setting(crate::config::OPENS_AT) })
}

/// QUEUE.LEAVE of someone in the pre-queue: whether they were there.
pub fn leave_pre<S: Store>(s: &mut S, user: &S::User) -> bool {
    pending(s) && s.aux_hdel(Aux::Pre, user.as_ref())
}

fn text<S: Store>(s: &S, field: &str) -> Option<String> {
    s.aux_hget(Aux::Opening, field.as_bytes()).map(|v| String::from_utf8_lossy(&v).into_owned())
}

/// QUEUE.OPENING, without writing. An opening whose time has come but that no
/// command has opened yet reads as scheduled.
pub fn info<S: Store>(s: &S) -> Opening {
    let opens_at = s.setting(crate::config::OPENS_AT);
    let commitment = text(s, COMMITMENT);
    let opened_at = text(s, OPENED_AT).and_then(|v| v.parse().ok());
    if pending(s) {
        return Opening {
            opens_at,
            state: State::Scheduled,
            commitment,
            seed: None,
            opened_at: None,
            entrants: s.aux_hlen(Aux::Pre),
            lanes: pre_lane_counts(s),
        };
    }
    match (commitment, opened_at) {
        (Some(commitment), Some(opened_at)) => Opening {
            opens_at,
            state: State::Open,
            commitment: Some(commitment),
            seed: text(s, SEED),
            opened_at: Some(opened_at),
            entrants: text(s, ENTRANTS).and_then(|v| v.parse().ok()).unwrap_or(0),
            lanes: opened_lane_counts(s),
        },
        _ => Opening {
            opens_at,
            state: State::None,
            commitment: None,
            seed: None,
            opened_at: None,
            entrants: 0,
            lanes: Vec::new(),
        },
    }
}

/// A scheduled queue with lanes: its pre-queue's entrants per lane (one pass over the
/// pre-queue; the lane clamped as the opening clamps it). Empty without lanes.
fn pre_lane_counts<S: Store>(s: &S) -> Vec<(Vec<u8>, i64)> {
    let lanes = s.lanes();
    if !lanes.multi() {
        return Vec::new();
    }
    let mut counts = vec![0i64; lanes.len()];
    for (_, v) in s.aux_hgetall(Aux::Pre) {
        let (lane, _) = pre_entry(true, v);
        counts[lane.min(lanes.len() - 1)] += 1;
    }
    counts.into_iter().enumerate().map(|(i, n)| (lanes.name(i).to_vec(), n)).collect()
}

/// An opened queue's entrants per lane, as the opening wrote them (`lane_entrants`),
/// named by the queue's lanes now (a lane the queue no longer has: its index).
/// Empty when the opening wrote none (no lanes then).
fn opened_lane_counts<S: Store>(s: &S) -> Vec<(Vec<u8>, i64)> {
    let Some(text) = text(s, LANE_ENTRANTS) else {
        return Vec::new();
    };
    let lanes = s.lanes();
    text.split(',')
        .enumerate()
        .map(|(i, n)| {
            let name =
                if lanes.multi() && i < lanes.len() { lanes.name(i).to_vec() } else { i.to_string().into_bytes() };
            (name, n.parse().unwrap_or(0))
        })
        .collect()
}

/// A page of the proof (nothing before the opening).
pub fn proof<S: Store>(s: &S, start: i64, count: i64) -> Vec<Vec<u8>> {
    if pending(s) {
        return Vec::new();
    }
    s.proof_range(start, count)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_the_standard_ones() {
        assert_eq!(sha1_hex(b"abc"), "a9993e364706816aba3e25717850c26c9cd0d89d");
        assert_eq!(commitment("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    }

    #[test]
    fn order_is_by_sort_key() {
        let hashes: Vec<String> = ["a", "b", "c", "d"].iter().map(|u| id_hash(u.as_bytes())).collect();
        let o = order("00", hashes.clone());
        let keys: Vec<String> = o.iter().map(|h| sort_key("00", h)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert_eq!(o.len(), 4);
        assert_ne!(order("00", hashes.clone()), order("01", hashes), "another seed, another order (for these)");
    }
}
