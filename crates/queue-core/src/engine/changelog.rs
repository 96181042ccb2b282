//! The change log and watchers (docs/commands.md, "The change log and watchers"):
//! what a command took out of the line's waiting part, gathered while it runs (into
//! the store's [`LogDraft`](super::store::LogDraft)) and appended as one log entry at
//! its end ([`close_log`]); push instances registering the people they stream to
//! ([`watch`], [`unwatch`]), whose leases count those people as heard from
//! ([`heard_from`]).

use super::layout::ensure_layout;
use super::members::{touch, waiting_count};
use super::opening;
use super::standing::standing;
use super::store::{stat, Part, Store};
use crate::admission;
use crate::error::QueueError;
use crate::replies::Standing;

/// `user`, taken from the head, was promoted with `ticket`: listed when a push
/// instance has them registered (so that it needs not ask for the ticket). In a queue
/// with lanes the ticket carries a new number: listed as `<old number>=<ticket>`.
pub(super) fn note_ticket<S: Store>(s: &mut S, user: &S::User, ticket: &[u8], old: Option<i64>) {
    if s.watcher(user).is_some() {
        let mut t = old.map(|o| format!("{o}=").into_bytes()).unwrap_or_default();
        t.extend_from_slice(ticket);
        s.log_draft().tickets.push(t);
    }
}

/// What a waiting user's new place in line keeps of the old one when they enter again,
/// read before the old one is given up ([`reentering`], then [`reentered`]).
pub(super) struct Reentry {
    old: i64,
    nickname: Option<Vec<u8>>,
    watcher: Option<Vec<u8>>,
}

/// The waiting user `user`, numbered `old`, enters again: their nickname and
/// registration as they are now.
pub(super) fn reentering<S: Store>(s: &S, user: &S::User, old: i64) -> Reentry {
    let nickname = match super::members::record(s, old) {
        Some(super::members::Rec::Waiting { nickname, .. }) => Some(nickname),
        _ => None,
    };
    Reentry { old, nickname, watcher: s.watcher(user) }
}

/// The re-entrant waits again, numbered `seq` at `rank`, as `nickname`: a push
/// instance's registration stays (they still wait), and with the nickname and lane
/// they had the entry tells their new number and rank (`moved`), so that nobody needs
/// to ask about them.
pub(super) fn reentered<S: Store>(s: &mut S, user: &S::User, r: Reentry, seq: i64, rank: i64, nickname: &[u8]) {
    if let Some(instance) = &r.watcher {
        s.set_watcher(user, instance);
    }
    if r.nickname.as_deref() == Some(nickname) && r.old / crate::lanes::BAND == seq / crate::lanes::BAND {
        s.log_draft().note_moved(r.old, seq, rank);
    }
}

/// Appends the command's entry, if it has one: called once at the command's end (or
/// earlier by a command that replies with the log's number), after every change.
pub fn close_log<S: Store>(s: &mut S) {
    let d = std::mem::take(s.log_draft());
    if d.is_empty() {
        return;
    }
    let n = stat(s, stat::LOG) + 1;
    s.set_stat(stat::LOG, n);
    let num = |v: i64| v.to_string().into_bytes();
    let mut fields: Vec<(&'static str, Vec<u8>)> = vec![("n", num(n))];
    if let Some((head, gone)) = d.head {
        fields.push(("head", num(head)));
        fields.push(("gone", num(gone)));
    }
    if !d.tickets.is_empty() {
        fields.push(("tickets", d.tickets.join(&b","[..])));
    }
    let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",").into_bytes();
    if !d.left.is_empty() {
        fields.push(("left", list(&d.left)));
    }
    if !d.again.is_empty() {
        fields.push(("again", list(&d.again)));
    }
    if !d.moved.is_empty() {
        let moved: Vec<String> = d.moved.iter().map(|(old, new, rank)| format!("{old}:{new}:{rank}")).collect();
        fields.push(("moved", moved.join(",").into_bytes()));
    }
    if d.reset {
        fields.push(("reset", b"1".to_vec()));
    }
    if !d.ahead.is_empty() {
        fields.push(("ahead", list(&d.ahead)));
    }
    if d.state {
        // The message in hex: a published change is its words separated by spaces.
        let flag = |f: &'static str| num(stat(s, f));
        fields.push(("closed", flag(stat::CLOSED)));
        fields.push(("sold_out", flag(stat::SOLD_OUT)));
        fields.push(("message", crate::hex::hex(&s.message()).into_bytes()));
    }
    fields.push(("waiting", num(waiting_count(s))));
    s.log_append(&fields);
}

/// The instances a registration lists (the `watched` hash's value: their ids,
/// comma-separated, in the order they registered; an id has no comma).
fn listed(registration: &[u8]) -> impl Iterator<Item = &[u8]> {
    registration.split(|&b| b == b',').filter(|i| !i.is_empty())
}

/// When a waiting user last counted as heard from: the later of its own time and the
/// latest lease expiry of the instances watching it.
pub fn heard_from<S: Store>(s: &S, user: &S::User, seen: i64) -> i64 {
    let Some(registration) = s.watcher(user) else { return seen };
    listed(&registration).filter_map(|i| s.instance_lease(i)).fold(seen, i64::max)
}

/// Registers `user` as watched by `instance` too: added at the end of the instances
/// listed unless listed already, and the listed instances whose lease has ended
/// (before `now`) dropped, so that the list holds the live instances that follow the
/// user, each counting them as heard from until its own lease ends.
fn add_watcher<S: Store>(s: &mut S, user: &S::User, instance: &[u8], now: i64) {
    let registration = s.watcher(user).unwrap_or_default();
    if listed(&registration).any(|i| i == instance) {
        return;
    }
    let mut kept: Vec<&[u8]> =
        listed(&registration).filter(|&i| s.instance_lease(i).is_some_and(|until| until >= now)).collect();
    kept.push(instance);
    s.set_watcher(user, &kept.join(&b','));
}

/// Takes `instance` out of `user`'s registration; whether it was listed. The
/// registration goes when nobody is left in it.
fn remove_watcher_of<S: Store>(s: &mut S, user: &S::User, instance: &[u8]) -> bool {
    let Some(registration) = s.watcher(user) else { return false };
    let rest: Vec<&[u8]> = listed(&registration).filter(|&i| i != instance).collect();
    if rest.len() == listed(&registration).count() {
        return false;
    }
    if rest.is_empty() {
        s.remove_watcher(user);
    } else {
        s.set_watcher(user, &rest.join(&b','));
    }
    true
}

/// Whether a waiting user whose record says `seen` is dropped as silent at `now`:
/// the record first (one read), the watcher only when the record alone says so.
pub(super) fn abandoned<S: Store>(s: &S, user: &S::User, seen: i64, now: i64, abandon_after: i64) -> bool {
    admission::is_abandoned(seen, now, abandon_after)
        && admission::is_abandoned(heard_from(s, user, seen), now, abandon_after)
}

/// QUEUE.WATCH's reply: the log's number as of it, the number waiting, and each
/// user's number in line (0 unless waiting in line) and standing.
pub struct Watched {
    pub log: i64,
    pub waiting: i64,
    pub users: Vec<(i64, Standing)>,
}

/// QUEUE.WATCH: extends `instance`'s lease to now + `lease_ms` and registers the
/// users who wait (in line or in the pre-queue) as watched by it; nobody counts as
/// heard from. A user who does not wait loses its registration by this instance.
pub fn watch<S: Store>(s: &mut S, instance: &[u8], lease_ms: i64, users: &[S::User]) -> Result<Watched, QueueError> {
    s.check(&[Part::Waiting, Part::Watched, Part::Instances])?;
    ensure_layout(s)?;
    let now = s.now();
    opening::open_if_due(s, now)?;
    s.set_instance_lease(instance, now + lease_ms);
    // Instances whose lease ended more than INSTANCE_KEEP_MS ago count nobody as heard
    // from under any `abandon_after`: nothing reads them any more.
    for gone in s.instances_ended_before(now - crate::keys::INSTANCE_KEEP_MS, crate::keys::INSTANCE_PRUNE_MAX) {
        s.remove_instance(&gone);
    }
    let mut out = Vec::with_capacity(users.len());
    for u in users {
        let st = standing(s, u, now);
        let seq = match &st {
            Standing::Waiting { seq, .. } => *seq,
            _ => 0,
        };
        match &st {
            Standing::Waiting { .. } | Standing::Pre { .. } => add_watcher(s, u, instance, now),
            _ => {
                remove_watcher_of(s, u, instance);
            }
        }
        out.push((seq, st));
    }
    // The opening may have happened in this command: its entry comes first, so that
    // the number replied covers it.
    close_log(s);
    Ok(Watched { log: stat(s, stat::LOG), waiting: waiting_count(s), users: out })
}

/// QUEUE.UNWATCH: removes the registrations `instance` holds of these users; each
/// waiting user it removes counts as heard from now. Returns how many it removed.
pub fn unwatch<S: Store>(s: &mut S, instance: &[u8], users: &[S::User]) -> Result<i64, QueueError> {
    s.check(&[Part::Waiting, Part::Watched])?;
    ensure_layout(s)?;
    let now = s.now();
    opening::open_if_due(s, now)?;
    let mut removed = 0;
    for u in users {
        if !remove_watcher_of(s, u, instance) {
            continue;
        }
        removed += 1;
        if let Standing::Waiting { seq, nickname, .. } = standing(s, u, now) {
            touch(s, seq, now, &nickname);
        }
    }
    Ok(removed)
}
