//! Who is in line, by number: the records, the ticket holders at the head
//! (`joining`, `p_max`), the number a newcomer gets, and putting a user in line or
//! taking one out. The rules ([`super`]) and the opening ([`super::opening`]) both
//! change the line through these.

use super::layout::mark_layout;
use super::store::{stat, Store};
use crate::config::{Config, FIELDS};
use crate::record::{self, Record};

/// A user's record, decoded (owned, so it outlives the read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Rec {
    Waiting { seen: i64, nickname: Vec<u8> },
    Promoted { expiry: i64, secret: Vec<u8>, nickname: Vec<u8> },
}

/// The queue's settings.
pub fn config<S: Store>(s: &S) -> Config {
    let mut c = Config::default();
    for i in 0..FIELDS.len() {
        c.values[i] = s.setting(i);
    }
    c
}

/// Tickets out: promoted users who have not claimed, withdrawn or been reaped.
pub fn joining<S: Store>(s: &S) -> i64 {
    stat(s, stat::JOINING)
}

/// The highest number a ticket holder has (0 when nobody holds a ticket).
pub fn p_max<S: Store>(s: &S) -> i64 {
    if joining(s) > 0 {
        stat(s, stat::P_MAX)
    } else {
        0
    }
}

/// Whether the user numbered `seq` holds a ticket (expired or not).
pub fn is_promoted<S: Store>(s: &S, seq: i64) -> bool {
    seq <= p_max(s)
}

/// Users in line who have no ticket yet.
pub fn waiting_count<S: Store>(s: &S) -> i64 {
    s.waiting_len() - joining(s)
}

fn decode(v: &[u8]) -> Option<Rec> {
    Some(match record::decode(v)? {
        Record::Waiting { seen, nickname } => Rec::Waiting { seen, nickname: nickname.to_vec() },
        Record::Promoted { expiry, secret, nickname } => {
            Rec::Promoted { expiry, secret: secret.to_vec(), nickname: nickname.to_vec() }
        }
    })
}

/// The record of the user numbered `seq`.
pub fn record<S: Store>(s: &S, seq: i64) -> Option<Rec> {
    decode(s.record(seq)?.as_ref())
}

/// The number of a newcomer at the back of lane `lane` (a queue with lanes).
pub fn lane_next_seq<S: Store>(s: &S, lane: usize) -> i64 {
    let start = crate::lanes::band_start(lane);
    s.waiting_max_in(start + 1, start + crate::lanes::BAND - 1).unwrap_or(start) + 1
}

/// The number for a newcomer: after everyone in line and after every number that
/// holds a ticket (the last ticket holder may have left the line by claiming while
/// earlier ones still hold theirs: numbering after the last one in line would then
/// put the newcomer among the ticket holders, where PROMOTE never looks).
pub fn next_seq<S: Store>(s: &S) -> i64 {
    s.waiting_max().unwrap_or(0).max(p_max(s)) + 1
}

/// Notes that the waiting user `seq` was heard from at `now`.
pub(super) fn touch<S: Store>(s: &mut S, seq: i64, now: i64, nickname: &[u8]) {
    s.put_record(seq, &record::encode_waiting(now, nickname));
}

/// Puts `user` in line with number `seq` (the back of the line).
pub fn add_waiter<S: Store>(s: &mut S, user: &S::User, seq: i64, now: i64, nickname: &[u8]) {
    mark_layout(s);
    s.waiting_add(user, seq);
    touch(s, seq, now, nickname);
}

/// Takes `user` (numbered `seq`) out of line, withdrawing its ticket if it had one;
/// a waiting user's leaving goes into the change log.
pub fn remove<S: Store>(s: &mut S, user: &S::User, seq: i64, was_promoted: bool) {
    take_out(s, user, seq, was_promoted);
    if !was_promoted {
        s.log_draft().note_left(seq);
        // Inside as well (a session): still in the queue's books.
        if s.session_expiry(user).is_some() {
            s.log_draft().note_again(seq);
        }
    }
}

/// [`remove`] without the log (the caller tells it: a head taken by PROMOTE).
pub fn take_out<S: Store>(s: &mut S, user: &S::User, seq: i64, was_promoted: bool) {
    s.remove_watcher(user);
    s.waiting_remove(user);
    s.delete_record(seq);
    if was_promoted {
        let left = joining(s) - 1;
        s.set_stat(stat::JOINING, left);
        if left == 0 {
            s.set_stat(stat::P_MAX, 0);
        }
    }
}
