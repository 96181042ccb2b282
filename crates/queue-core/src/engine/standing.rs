//! Where a user stands, read without writing: waiting in line (with its rank),
//! holding a ticket, in the pre-queue, inside (a live session), or unknown. The rules
//! ([`super`]) and the watchers ([`super::changelog`]) both read it.

use super::members::{joining, record, Rec};
use super::opening;
use super::store::Store;
use crate::replies::Standing;
use crate::ticket;

/// Where `user` stands as of `now` (tickets and leases past their time count as gone).
pub fn standing<S: Store>(s: &S, user: &S::User, now: i64) -> Standing {
    if let Some((rank, seq)) = s.waiting_rank(user) {
        return match record(s, seq) {
            Some(Rec::Waiting { seen, nickname }) => {
                Standing::Waiting { seq, rank: rank + 1 - joining(s), seen, nickname }
            }
            Some(Rec::Promoted { expiry, secret, nickname }) if expiry > now => {
                Standing::Promoted { ticket: ticket::ticket_id(seq, &secret), nickname }
            }
            _ => Standing::Unknown,
        };
    }
    if let Some(st) = opening::pre_standing(s, user) {
        return st;
    }
    if s.session_expiry(user).is_some_and(|exp| exp > now) {
        return Standing::Active { nickname: s.active_nickname(user).map(|n| n.as_ref().to_vec()) };
    }
    Standing::Unknown
}
