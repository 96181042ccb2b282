//! A reference model of one queue, written from the rules in docs/commands.md ("The
//! commands", "Claiming twice (HOLDER)", "A slot freed inside a command", "What PROMOTE does", "Errors",
//! "Settings", "The change log and watchers"), not from either implementation: a plain
//! line of people in entry order, a table of sessions, the watchers' registrations and
//! instance leases, the change log's number, and the counters. It knows nothing of
//! chunks, `p_max` or how ranks are computed; a ticket is whatever string the server
//! handed out, remembered by whom it was given to, and a person's number in line is
//! whatever the server gave it (learnt like a ticket, checked against "Key layout"'s
//! rule by the test: after everyone in line and every number ever promoted), used
//! only to say which numbers a change-log entry names.
//!
//! Lanes and access codes ("Lanes and access codes"): each person waits in a lane,
//! the line's waiting part is ordered by lane, then by entry; a person promoted in a
//! queue with lanes gets a new number (learnt like the first), and the log names its
//! ticket under the number it waited under; codes are a table of lane, uses and uses
//! consumed. `entry invite` refuses entries that name neither a lane nor a code.
//!
//! Passing straight in ("Passing straight in (QUEUE.PASS)"): the instant entry and
//! the claim of its ticket in one command, exactly when ENTER would let the person in
//! at once (the counts as housekeeping would leave them) and the claim would succeed;
//! else nothing at all.
//!
//! A sale's end ("A sale's end"): `closes_at` (entries refused with CLOSED from then
//! on), the inventory (entries refused with SOLDOUT at 0; promotions never make the
//! tickets and sessions not reported bought exceed it), QUEUE.SOLD, the message, and
//! the one `state` entry of the change log each change of closed, sold out or message
//! writes.
//!
//! Left out on purpose: the token bucket (runs use `rate` 0), the estimated wait
//! (the measured admission rate), the pre-queue and the opening, which the
//! state-machine test does not exercise.

use std::collections::{BTreeMap, BTreeSet};

#[derive(Debug, Clone, Copy)]
pub struct Settings {
    pub soft_cap: i64,
    pub hard_cap: i64,
    pub batch_max: i64,
    pub ticket_ttl: i64,
    pub session_lease: i64,
    pub abandon_after: i64,
    /// 0: no limit.
    pub max_waiting: i64,
    /// How many lanes (0 or 1: a queue without lanes). Lane `i` is named `l<i>`.
    pub lanes: usize,
    /// `entry invite`: an entry must name a lane or a code.
    pub invite: bool,
}

/// The name of lane `i` in the runs.
pub fn lane_name(i: usize) -> String {
    format!("l{i}")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Place {
    /// Waiting, last heard from at `seen`.
    Waiting { seen: i64 },
    /// Holding a ticket, claimable until `expiry` (exclusive). `ticket` is unknown
    /// for a moment right after the model decides to promote, until the server's
    /// answer tells it.
    Ticket { ticket: Option<String>, expiry: i64 },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Person {
    pub user: String,
    pub nickname: String,
    pub place: Place,
    /// Its number in line, as the server gave it (`None` until learnt).
    pub number: Option<i64>,
    /// Its lane (0 without lanes).
    pub lane: usize,
    /// In a queue with lanes, a ticket holder's number while it waited (its ticket
    /// comes from a new number).
    pub waited_as: Option<i64>,
}

/// An access code: its lane, its uses and the uses consumed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    pub lane: usize,
    pub uses: i64,
    pub used: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub nickname: String,
    pub lease: i64,
    /// The claim that opened it when it named a `HOLDER` ("Claiming twice"): the
    /// ticket, the holder and the lease the claim answered.
    pub claim: Option<(String, String, i64)>,
}

/// Where someone stands, as STATUS, RANKS and ENTER report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Waiting {
        rank: i64,
        nickname: String,
        /// The lane's name in a queue with lanes.
        lane: Option<String>,
    },
    /// Holds a live ticket (`None`: just issued, the server's reply names it).
    Promoted {
        ticket: Option<String>,
        nickname: String,
    },
    Active {
        nickname: String,
    },
    Unknown,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ClaimOutcome {
    Claimed {
        user: String,
        nickname: String,
        lease_ms: i64,
        /// A repeat by the holder of the claim that opened the session: the same
        /// answer, nothing changed.
        again: bool,
    },
    /// The exact error text docs/commands.md lists ("Errors").
    Error(&'static str),
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromoteOutcome {
    pub promoted: Vec<String>,
    pub tickets_expired: i64,
    pub leases_expired: i64,
    pub dropped: i64,
    pub waiting: i64,
    pub joining: i64,
    pub active: i64,
    pub available_slots: i64,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counters {
    pub promoted: i64,
    /// In a queue with lanes, the people promoted from each lane (by lane), let in
    /// at once on entry too: QUEUE.INFO's `lane_counts` (docs/commands.md, QUEUE.INFO).
    pub admitted: BTreeMap<usize, i64>,
    pub claimed: i64,
    pub expired: i64,
    pub dropped: i64,
    pub left: i64,
    pub ended: i64,
    pub lapsed: i64,
    /// Milliseconds the slots freed by an expiry stayed empty until filled.
    pub slot_wait_ms: i64,
}

pub const NOTICKET: &str = "NOTICKET unknown or already used ticket";
pub const EXPIRED: &str = "EXPIRED ticket has expired";
pub const INSIDE: &str = "INSIDE user is already inside";
pub const FULL: &str = "FULL hard cap reached";
pub const CLOSED: &str = "CLOSED this queue is closed to new entries";
pub const SOLDOUT: &str = "SOLDOUT sold out";
pub const SOLD_NEEDS_A_UNIT: &str = "ERR n must be an integer from 1 to 1000000000000";
/// Where the counter `sold` stops ("A sale's end").
pub const MAX_SOLD: i64 = (1 << 53) - 1;
/// How long after its lease ended a push instance stays in `instances` ("The change
/// log and watchers": the longest `abandon_after`, a day).
pub const INSTANCE_KEEP_MS: i64 = 86_400_000;

/// A `state` entry's fields ("A sale's end"): closed, sold out, the message.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SaleState {
    pub closed: bool,
    pub sold_out: bool,
    pub message: String,
}

/// The message as the entry carries it: lowercase hex of its bytes.
fn hex(s: &str) -> String {
    s.bytes().map(|b| format!("{b:02x}")).collect()
}

fn unhex(h: &str) -> Result<String, String> {
    if !h.len().is_multiple_of(2) {
        return Err(format!("message not hex: {h:?}"));
    }
    let bytes = (0..h.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&h[i..i + 2], 16).map_err(|_| format!("message not hex: {h:?}")))
        .collect::<Result<Vec<u8>, String>>()?;
    String::from_utf8(bytes).map_err(|_| format!("message not UTF-8: {h:?}"))
}

/// One entry of the change log (`queue:{Q}:log`) as "The change log and watchers"
/// describes it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogEntry {
    pub n: i64,
    /// The highest number taken from the head (promoted, or dropped on the way).
    pub head: Option<i64>,
    /// How many were taken from the head.
    pub gone: i64,
    /// The tickets of those promoted from the head while registered by a push
    /// instance, in the order promoted (the model names the people: `promoted_watched`,
    /// whose tickets the server's reply tells; see [`Model::name_tickets`]).
    pub tickets: Vec<String>,
    pub promoted_watched: Vec<String>,
    /// Numbers of other waiting users who left, in the order they left.
    pub left: Vec<i64>,
    /// Those of `left` still in the queue's books: entered again, or inside.
    pub again: Vec<i64>,
    /// Of `again`, those waiting in line again with the nickname and lane they had:
    /// (old number, new number, rank after the command). The model names the people
    /// with their old number and rank (`moved_users`); the server gives the new number.
    pub moved: Vec<(i64, i64, i64)>,
    pub moved_users: Vec<(String, i64, i64)>,
    pub reset: bool,
    /// Numbers of people who joined a lane while someone waited in a later lane (the
    /// model names the people: `ahead_users`, whose numbers the server gives).
    pub ahead: Vec<i64>,
    pub ahead_users: Vec<String>,
    /// The queue's state, when it changed ("A sale's end").
    pub state: Option<SaleState>,
    pub waiting: i64,
}

impl LogEntry {
    /// The stream entry's fields, in the documented order, absent when empty.
    pub fn fields(&self) -> Vec<(String, String)> {
        let mut f = vec![("n".to_string(), self.n.to_string())];
        if let Some(h) = self.head {
            f.push(("head".into(), h.to_string()));
            f.push(("gone".into(), self.gone.to_string()));
        }
        if !self.tickets.is_empty() {
            f.push(("tickets".into(), self.tickets.join(",")));
        }
        let list = |v: &[i64]| v.iter().map(i64::to_string).collect::<Vec<_>>().join(",");
        if !self.left.is_empty() {
            f.push(("left".into(), list(&self.left)));
        }
        if !self.again.is_empty() {
            f.push(("again".into(), list(&self.again)));
        }
        if !self.moved.is_empty() {
            let moved: Vec<String> = self.moved.iter().map(|(o, n, r)| format!("{o}:{n}:{r}")).collect();
            f.push(("moved".into(), moved.join(",")));
        }
        if self.reset {
            f.push(("reset".into(), "1".into()));
        }
        if !self.ahead.is_empty() {
            f.push(("ahead".into(), list(&self.ahead)));
        }
        if let Some(s) = &self.state {
            f.push(("closed".into(), u8::from(s.closed).to_string()));
            f.push(("sold_out".into(), u8::from(s.sold_out).to_string()));
            f.push(("message".into(), hex(&s.message)));
        }
        f.push(("waiting".into(), self.waiting.to_string()));
        f
    }

    /// Reads an entry's fields back (any order; unknown fields refused).
    pub fn parse(fields: &[(String, String)]) -> Result<LogEntry, String> {
        let mut e = LogEntry::default();
        let int = |v: &str| v.parse::<i64>().map_err(|_| format!("not a number: {v:?} in {fields:?}"));
        for (k, v) in fields {
            match k.as_str() {
                "n" => e.n = int(v)?,
                "head" => e.head = Some(int(v)?),
                "gone" => e.gone = int(v)?,
                "tickets" => e.tickets = v.split(',').map(str::to_string).collect(),
                "left" => e.left = v.split(',').map(int).collect::<Result<_, _>>()?,
                "again" => e.again = v.split(',').map(int).collect::<Result<_, _>>()?,
                "moved" => {
                    e.moved = v
                        .split(',')
                        .map(|m| match m.split(':').map(int).collect::<Result<Vec<_>, _>>()?[..] {
                            [o, n, r] => Ok((o, n, r)),
                            _ => Err(format!("moved {m:?} is not old:new:rank in {fields:?}")),
                        })
                        .collect::<Result<_, _>>()?
                }
                "reset" => e.reset = v == "1",
                "ahead" => e.ahead = v.split(',').map(int).collect::<Result<_, _>>()?,
                "closed" => e.state.get_or_insert_with(SaleState::default).closed = v == "1",
                "sold_out" => e.state.get_or_insert_with(SaleState::default).sold_out = v == "1",
                "message" => e.state.get_or_insert_with(SaleState::default).message = unhex(v)?,
                "waiting" => e.waiting = int(v)?,
                other => return Err(format!("unknown field {other:?} in {fields:?}")),
            }
        }
        Ok(e)
    }
}

/// What the command being modelled took out of the line's waiting part so far.
#[derive(Debug, Default)]
struct Pending {
    head: Option<i64>,
    gone: i64,
    promoted_watched: Vec<String>,
    left: Vec<i64>,
    again: Vec<i64>,
    moved_users: Vec<(String, i64, i64)>,
    reset: bool,
    ahead_users: Vec<String>,
    /// The queue's state changed (closed, sold out, message).
    state: bool,
}

/// A watcher's rank arithmetic, exactly as "The change log and watchers" states it:
/// for a waiting user with number `s` and rank `r` after entry `n`, its standing after
/// entry `n+1`: `None` when gone, else its new rank.
pub fn apply_entry(s: i64, r: i64, e: &LogEntry) -> Option<i64> {
    if e.head.is_some_and(|h| s <= h) || e.left.contains(&s) {
        return None;
    }
    let mut r = r;
    if e.head.is_some_and(|h| h < s) {
        r -= e.gone;
    }
    r -= e.left.iter().filter(|&&x| x < s).count() as i64;
    r += e.ahead.iter().filter(|&&x| x < s).count() as i64;
    Some(r)
}

pub struct Model {
    pub s: Settings,
    /// Everyone in line, in entry order: waiting people and ticket holders.
    pub line: Vec<Person>,
    pub sessions: BTreeMap<String, Session>,
    pub counters: Counters,
    /// Watcher registrations: userId -> the push instances watching it, in the order
    /// they registered ("Watchers": the hash's value lists them comma-separated).
    pub watched: BTreeMap<String, Vec<String>>,
    /// Push instances' leases: instance -> lease expiry (ms).
    pub instances: BTreeMap<String, i64>,
    /// The change log's last number (0 before any entry).
    pub log_n: i64,
    /// The highest number promoted since tickets were last all gone ("Key layout"'s
    /// `p_max`: newcomers are numbered after it), once known.
    pub max_promoted: i64,
    /// Access codes: hash -> code.
    pub codes: BTreeMap<String, Code>,
    /// A sale's end: `closes_at` (0: never), the units left (None: no limit), the
    /// people inside reported as having bought, units sold, the message, and the
    /// state (closed, sold out) the change log last said.
    pub closes_at: i64,
    pub inventory: Option<i64>,
    pub bought: BTreeSet<String>,
    pub sold: i64,
    pub message: String,
    pub announced: (bool, bool),
    pending: Pending,
}

impl Model {
    pub fn new(s: Settings) -> Self {
        Model {
            s,
            line: Vec::new(),
            sessions: BTreeMap::new(),
            counters: Counters::default(),
            watched: BTreeMap::new(),
            instances: BTreeMap::new(),
            log_n: 0,
            max_promoted: 0,
            codes: BTreeMap::new(),
            closes_at: 0,
            inventory: None,
            bought: BTreeSet::new(),
            sold: 0,
            message: String::new(),
            announced: (false, false),
            pending: Pending::default(),
        }
    }

    /// Closed at `now`: `closes_at` set and passed.
    pub fn closed(&self, now: i64) -> bool {
        self.closes_at > 0 && now >= self.closes_at
    }

    /// Sold out: an inventory of 0.
    pub fn sold_out(&self) -> bool {
        self.inventory == Some(0)
    }

    /// Tickets out and sessions (expired ones too until housekeeping drops them), less
    /// the people inside reported as having bought.
    pub fn outstanding(&self) -> i64 {
        let bought = self.bought.iter().filter(|u| self.sessions.contains_key(*u)).count() as i64;
        (self.joining() + self.sessions.len() as i64 - bought).max(0)
    }

    /// How many more may be promoted within the inventory (None: no limit).
    fn room(&self) -> Option<i64> {
        self.inventory.map(|i| (i - self.outstanding()).max(0))
    }

    /// The state entry, when closed or sold out is not what the log last said.
    pub fn note_state(&mut self, now: i64) {
        let state = (self.closed(now), self.sold_out());
        if state != self.announced {
            self.announced = state;
            self.pending.state = true;
        }
    }

    /// The refusal every form of QUEUE.ENTER gets first: CLOSED, then SOLDOUT. The
    /// state entry is written either way.
    pub fn refuses_sale(&mut self, now: i64) -> Option<&'static str> {
        self.note_state(now);
        if self.closed(now) {
            Some(CLOSED)
        } else if self.sold_out() {
            Some(SOLDOUT)
        } else {
            None
        }
    }

    /// QUEUE.CONFIG SET of the sale's settings (any SET notes the state).
    pub fn configure_sale(&mut self, closes_at: Option<i64>, inventory: Option<i64>, message: Option<&str>, now: i64) {
        if let Some(at) = closes_at {
            self.closes_at = at;
        }
        if let Some(v) = inventory {
            self.inventory = (v >= 0).then_some(v);
        }
        self.note_state(now);
        if let Some(m) = message {
            self.message = m.to_string();
            self.pending.state = true;
        }
    }

    /// QUEUE.SOLD n [USER u]: the units left (None: no limit). With USER, n must be at
    /// least 1 (nothing written otherwise); the counter `sold` stops at 2^53 - 1.
    pub fn sold(&mut self, n: i64, user: Option<&str>, now: i64) -> Result<Option<i64>, &'static str> {
        if user.is_some() && n < 1 {
            return Err(SOLD_NEEDS_A_UNIT);
        }
        if let Some(i) = self.inventory {
            self.inventory = Some((i - n).max(0));
        }
        self.sold = (self.sold + n).min(MAX_SOLD);
        if let Some(u) = user {
            if self.sessions.get(u).is_some_and(|s| s.lease > now) {
                self.bought.insert(u.to_string());
            }
        }
        self.note_state(now);
        Ok(self.inventory)
    }

    /// Marks of people no longer inside go with their sessions.
    fn prune_bought(&mut self) {
        let sessions = &self.sessions;
        self.bought.retain(|u| sessions.contains_key(u));
    }

    /// The change-log entry the command just modelled writes, if any ("An entry is
    /// written when head, left or reset is"), numbered one after the last.
    pub fn take_log(&mut self) -> Option<LogEntry> {
        let p = std::mem::take(&mut self.pending);
        if p.head.is_none() && p.left.is_empty() && !p.reset && p.ahead_users.is_empty() && !p.state {
            return None;
        }
        self.log_n += 1;
        Some(LogEntry {
            n: self.log_n,
            head: p.head,
            gone: p.gone,
            tickets: Vec::new(),
            promoted_watched: p.promoted_watched,
            left: p.left,
            again: p.again,
            moved: Vec::new(),
            moved_users: p.moved_users,
            reset: p.reset,
            ahead: Vec::new(),
            ahead_users: p.ahead_users,
            state: p.state.then(|| SaleState {
                closed: self.announced.0,
                sold_out: self.announced.1,
                message: self.message.clone(),
            }),
            waiting: self.waiting(),
        })
    }

    /// Fills an entry's `tickets` with the tickets its promoted and watched people hold
    /// (learnt from the server's replies since); `None` when one is not known.
    pub fn name_tickets(&self, e: &mut LogEntry) -> Option<()> {
        e.tickets = e
            .promoted_watched
            .iter()
            .map(|u| {
                let p = &self.line[self.position(u)?];
                match (&p.place, p.waited_as) {
                    (Place::Ticket { ticket: Some(t), .. }, Some(w)) if self.has_lanes() => Some(format!("{w}={t}")),
                    (Place::Ticket { ticket, .. }, _) if !self.has_lanes() => ticket.clone(),
                    _ => None,
                }
            })
            .collect::<Option<_>>()?;
        e.ahead = e.ahead_users.iter().map(|u| self.line[self.position(u)?].number).collect::<Option<_>>()?;
        e.moved = e
            .moved_users
            .iter()
            .map(|(u, old, rank)| Some((*old, self.line[self.position(u)?].number?, *rank)))
            .collect::<Option<_>>()?;
        Some(())
    }

    pub fn has_lanes(&self) -> bool {
        self.s.lanes > 1
    }

    /// The lane's name a standing map shows for a waiting person (queues with lanes).
    fn lane_shown(&self, lane: usize) -> Option<String> {
        self.has_lanes().then(|| lane_name(lane))
    }

    fn number_of(p: &Person) -> i64 {
        p.number.unwrap_or_else(|| panic!("model: {} left the waiting part before its number was learnt", p.user))
    }

    /// A waiting person taken from the head (promoted, or dropped on the way).
    fn took_from_head(&mut self, number: i64) {
        self.pending.head = Some(self.pending.head.map_or(number, |h| h.max(number)));
        self.pending.gone += 1;
    }

    /// A waiting person left from elsewhere than the head (LEAVE, re-entry, the sweep);
    /// one who is inside as well (a session) is still in the queue's books.
    fn left_line(&mut self, user: &str, number: i64) {
        self.pending.left.push(number);
        if self.sessions.contains_key(user) {
            self.still_there(number);
        }
    }

    /// Someone who left the waiting part with `number` is in the queue's books still.
    fn still_there(&mut self, number: i64) {
        if self.pending.again.last() != Some(&number) {
            self.pending.again.push(number);
        }
    }

    /// Someone leaves the line altogether (left, re-entered, dropped, claimed, a ticket
    /// expired): its registration goes (a re-entrant who waits again gets it back).
    fn out_of_line(&mut self, user: &str) {
        self.watched.remove(user);
        if self.joining() == 0 {
            self.max_promoted = 0;
        }
    }

    /// When a waiting person was last heard from: the later of its own time and the
    /// latest lease expiry of the instances it is registered under.
    fn heard_from(&self, user: &str, seen: i64) -> i64 {
        let leases = self.watched.get(user).into_iter().flatten().filter_map(|i| self.instances.get(i));
        leases.copied().fold(seen, i64::max)
    }

    fn position(&self, user: &str) -> Option<usize> {
        self.line.iter().position(|p| p.user == user)
    }

    pub fn waiting(&self) -> i64 {
        self.line.iter().filter(|p| matches!(p.place, Place::Waiting { .. })).count() as i64
    }

    /// Tickets out, expired ones included until housekeeping drops them.
    pub fn joining(&self) -> i64 {
        self.line.len() as i64 - self.waiting()
    }

    pub fn live_sessions(&self, now: i64) -> i64 {
        self.sessions.values().filter(|s| s.lease > now).count() as i64
    }

    fn free_slots(&self, active: i64) -> i64 {
        (self.s.soft_cap - active - self.joining()).max(0)
    }

    /// A waiting person is dropped once not heard from for longer than abandon_after
    /// (heard from: its own time, or the lease of the instance watching it).
    fn abandoned(&self, user: &str, seen: i64, now: i64) -> bool {
        self.s.abandon_after > 0 && now - self.heard_from(user, seen) > self.s.abandon_after
    }

    /// Housekeeping: expired tickets and leases go, their places come back. Returns
    /// how many of each, and the moments the places became free (the deadlines).
    fn reap(&mut self, now: i64) -> (i64, i64, Vec<i64>) {
        let mut freed = Vec::new();
        for p in &self.line {
            if let Place::Ticket { expiry, .. } = p.place {
                if expiry <= now {
                    freed.push(expiry);
                }
            }
        }
        let tickets = freed.len() as i64;
        let expired: Vec<String> = self
            .line
            .iter()
            .filter(|p| matches!(p.place, Place::Ticket { expiry, .. } if expiry <= now))
            .map(|p| p.user.clone())
            .collect();
        self.line.retain(|p| !matches!(p.place, Place::Ticket { expiry, .. } if expiry <= now));
        for u in &expired {
            self.out_of_line(u);
        }
        freed.extend(self.sessions.values().filter(|s| s.lease <= now).map(|s| s.lease));
        let leases = freed.len() as i64 - tickets;
        self.sessions.retain(|_, s| s.lease > now);
        self.prune_bought();
        self.counters.expired += tickets;
        self.counters.lapsed += leases;
        (tickets, leases, freed)
    }

    /// `promoted` people just took places: those freed longest ago go first, each
    /// having stood empty since it was freed (places freed inside the command: not
    /// at all).
    fn note_slot_wait(&mut self, mut freed: Vec<i64>, promoted: i64, now: i64) {
        freed.sort();
        self.counters.slot_wait_ms += freed.iter().take(promoted as usize).map(|t| now - t).sum::<i64>();
    }

    /// A slot freed inside a command (a session ended, a ticket holder left or
    /// re-entered, a claim found its ticket expired): the first waiting people get the
    /// free tickets at once, up to batch_max; silent waiters met on the way are
    /// dropped, never promoted.
    fn fill(&mut self, now: i64, freed: Vec<i64>) {
        if self.waiting() == 0 {
            return;
        }
        let mut n = self.free_slots(self.sessions.len() as i64).min(self.s.batch_max);
        if let Some(room) = self.room() {
            n = n.min(room);
        }
        let promoted = self.admit_head(n, now).0;
        self.counters.promoted += promoted;
        self.note_slot_wait(freed, promoted, now);
    }

    /// Tickets for up to `n` waiting people from the head, in line order; silent ones
    /// met on the way are dropped, never promoted. Everyone met is taken from the head.
    /// Returns (promoted, dropped, who was promoted).
    fn admit_head(&mut self, n: i64, now: i64) -> (i64, i64, Vec<String>) {
        let (mut promoted, mut dropped, mut who, mut i) = (0, 0, Vec::new(), 0);
        while promoted < n && i < self.line.len() {
            if let Place::Waiting { seen } = self.line[i].place {
                let number = Self::number_of(&self.line[i]);
                self.took_from_head(number);
                if self.abandoned(&self.line[i].user, seen, now) {
                    let p = self.line.remove(i);
                    self.out_of_line(&p.user);
                    dropped += 1;
                    self.counters.dropped += 1;
                    continue;
                }
                self.line[i].place = Place::Ticket { ticket: None, expiry: now + self.s.ticket_ttl };
                if self.has_lanes() {
                    // Renumbered into the holders' band: the new number is learnt.
                    self.line[i].waited_as = Some(number);
                    self.line[i].number = None;
                }
                if self.watched.contains_key(&self.line[i].user) {
                    self.pending.promoted_watched.push(self.line[i].user.clone());
                }
                self.max_promoted = self.max_promoted.max(number);
                if self.has_lanes() {
                    *self.counters.admitted.entry(self.line[i].lane).or_default() += 1;
                }
                who.push(self.line[i].user.clone());
                promoted += 1;
            }
            i += 1;
        }
        (promoted, dropped, who)
    }

    fn rank_of(&self, i: usize) -> i64 {
        self.line[..=i].iter().filter(|p| matches!(p.place, Place::Waiting { .. })).count() as i64
    }

    /// The refusal QUEUE.ENTER gives instead of entering, if any, else the lane it
    /// enters: `LANE` or `CODE` in a queue without lanes; a lane the queue does not
    /// have; a code it does not have or whose uses are all consumed (`NOCODE`), or of
    /// another lane than `LANE` (`WRONGLANE`); neither in an `invite` queue; then
    /// `max_waiting` people already wait and `user` is not among those in the line
    /// (waiting or holding a ticket), who may always enter again. The docs leave the
    /// order of the first four open but for INVITE before LINEFULL; the model takes
    /// the order the arguments are read in: lane, code, invitation, room.
    pub fn refuses_entry(&self, user: &str, lane: Option<&str>, code: Option<&str>) -> Result<usize, String> {
        if (lane.is_some() || code.is_some()) && !self.has_lanes() {
            return Err("ERR this queue has no lanes".into());
        }
        let named = match lane {
            Some(l) => {
                Some((0..self.s.lanes).find(|&i| lane_name(i) == l).ok_or_else(|| format!("ERR unknown lane '{l}'"))?)
            }
            None => None,
        };
        let mut into = named.unwrap_or(self.s.lanes.max(1) - 1);
        if let Some(h) = code {
            let c = self.codes.get(h).filter(|c| c.used < c.uses);
            let c = c.ok_or_else(|| "NOCODE unknown or used-up access code".to_string())?;
            if named.is_some_and(|l| l != c.lane) {
                return Err("WRONGLANE the access code is for another lane".into());
            }
            into = c.lane;
        }
        if self.s.invite && lane.is_none() && code.is_none() {
            return Err("INVITE this queue admits by invitation only".into());
        }
        let full = self.s.max_waiting > 0 && self.waiting() >= self.s.max_waiting;
        if full && self.position(user).is_none() {
            return Err("LINEFULL the line is full, try again later".into());
        }
        Ok(into)
    }

    /// QUEUE.CODES ADD: how many codes are new; one already there moves to `lane`
    /// with `uses`, keeping the uses it consumed.
    pub fn codes_add(&mut self, lane: usize, uses: i64, hs: &[String]) -> i64 {
        let mut new = 0;
        for h in hs {
            match self.codes.get_mut(h) {
                Some(c) => {
                    c.lane = lane;
                    c.uses = uses;
                }
                None => {
                    new += 1;
                    self.codes.insert(h.clone(), Code { lane, uses, used: 0 });
                }
            }
        }
        new
    }

    /// QUEUE.CODES REMOVE: how many of these codes were there.
    pub fn codes_remove(&mut self, hs: &[String]) -> i64 {
        hs.iter().filter(|h| self.codes.remove(*h).is_some()).count() as i64
    }

    /// QUEUE.CODES COUNTS: per lane in order (lane, codes, uses consumed, uses left);
    /// empty without lanes.
    pub fn codes_counts(&self) -> Vec<(String, i64, i64, i64)> {
        if !self.has_lanes() {
            return Vec::new();
        }
        (0..self.s.lanes)
            .map(|l| {
                let of: Vec<&Code> = self.codes.values().filter(|c| c.lane == l).collect();
                // "uses consumed" counts at most a code's uses (one added again with
                // fewer uses than it consumed has none left).
                let used = of.iter().map(|c| c.used.min(c.uses)).sum();
                let left = of.iter().map(|c| (c.uses - c.used).max(0)).sum();
                (lane_name(l), of.len() as i64, used, left)
            })
            .collect()
    }

    /// QUEUE.ENTER: to the back of the line (re-entry gives up the old place and any
    /// ticket, which goes to the head of the line at once); in at once when nobody
    /// else waits and there is room.
    ///
    /// In a queue with lanes, into `lane` (what [`Model::refuses_entry`] gave): at the back
    /// of that lane, ahead of everyone waiting in later lanes (an `ahead` in the
    /// change log); a code's use is consumed.
    pub fn enter(&mut self, user: &str, nickname: &str, lane: usize, code: Option<&str>, now: i64) -> Standing {
        if let Some(c) = code.and_then(|h| self.codes.get_mut(h)) {
            c.used += 1;
        }
        // A waiting person entering again: their registration, nickname, lane and number.
        let mut was_waiting = None;
        if let Some(i) = self.position(user) {
            let old = self.line.remove(i);
            let watcher = self.watched.get(user).cloned();
            self.out_of_line(user);
            match old.place {
                Place::Ticket { .. } => self.fill(now, Vec::new()),
                Place::Waiting { .. } => {
                    let number = Self::number_of(&old);
                    self.left_line(user, number);
                    self.still_there(number);
                    was_waiting = Some((watcher, old.nickname.clone(), old.lane, number));
                }
            }
        }
        let admit_now = self.waiting() == 0 && self.s.soft_cap > 0;
        if admit_now {
            let (_, _, freed) = self.reap(now);
            if self.free_slots(self.sessions.len() as i64) > 0 && self.room().is_none_or(|r| r >= 1) {
                self.note_slot_wait(freed, 1, now);
                self.line.push(Person {
                    user: user.into(),
                    nickname: nickname.into(),
                    place: Place::Ticket { ticket: None, expiry: now + self.s.ticket_ttl },
                    number: None,
                    lane,
                    waited_as: None,
                });
                self.counters.promoted += 1;
                if self.has_lanes() {
                    *self.counters.admitted.entry(lane).or_default() += 1;
                }
                return Standing::Promoted { ticket: None, nickname: nickname.into() };
            }
        }
        // At the back of its lane: before the first person waiting in a later lane.
        let at = self
            .line
            .iter()
            .position(|p| matches!(p.place, Place::Waiting { .. }) && p.lane > lane)
            .unwrap_or(self.line.len());
        if at < self.line.len() {
            self.pending.ahead_users.push(user.into());
        }
        self.line.insert(
            at,
            Person {
                user: user.into(),
                nickname: nickname.into(),
                place: Place::Waiting { seen: now },
                number: None,
                lane,
                waited_as: None,
            },
        );
        let rank = self.rank_of(at);
        // "The change log and watchers": someone entering again who waits again keeps
        // their registration; with the nickname and lane they had, `moved` tells it.
        if let Some((watcher, old_nickname, old_lane, number)) = was_waiting {
            if let Some(w) = watcher {
                self.watched.insert(user.into(), w);
            }
            if old_nickname == nickname && old_lane == lane {
                self.pending.moved_users.push((user.into(), number, rank));
            }
        }
        Standing::Waiting { rank, nickname: nickname.into(), lane: self.lane_shown(lane) }
    }

    /// QUEUE.STATUS (and each user of QUEUE.RANKS): a waiting person counts as heard
    /// from; the stored time is refreshed at most every abandon_after / 8 (between
    /// 250 ms and 30 s), so that polling is not a write each time.
    pub fn status(&mut self, user: &str, now: i64) -> Standing {
        self.standing(user, now, true)
    }

    /// Where `user` stands; with `heard`, a waiting person counts as heard from (as
    /// STATUS, RANKS and UNWATCH do; WATCH does not).
    fn standing(&mut self, user: &str, now: i64, heard: bool) -> Standing {
        if let Some(i) = self.position(user) {
            let rank = self.rank_of(i);
            let refresh = (self.s.abandon_after / 8).clamp(250, 30_000);
            let abandon_after = self.s.abandon_after;
            let lane = self.lane_shown(self.line[i].lane);
            let p = &mut self.line[i];
            return match &mut p.place {
                Place::Waiting { seen } => {
                    if heard && abandon_after > 0 && now - *seen >= refresh {
                        *seen = now;
                    }
                    Standing::Waiting { rank, nickname: p.nickname.clone(), lane }
                }
                Place::Ticket { ticket, expiry } if *expiry > now => {
                    Standing::Promoted { ticket: ticket.clone(), nickname: p.nickname.clone() }
                }
                Place::Ticket { .. } => Standing::Unknown,
            };
        }
        match self.sessions.get(user) {
            Some(s) if s.lease > now => Standing::Active { nickname: s.nickname.clone() },
            _ => Standing::Unknown,
        }
    }

    /// QUEUE.LEAVE: 1 when the person was in line (waiting or holding a ticket, which
    /// then goes to the head of the line at once).
    pub fn leave(&mut self, user: &str, now: i64) -> i64 {
        match self.position(user) {
            Some(i) => {
                let gone = self.line.remove(i);
                self.out_of_line(user);
                self.counters.left += 1;
                match gone.place {
                    Place::Ticket { .. } => self.fill(now, Vec::new()),
                    Place::Waiting { .. } => self.left_line(&gone.user, Self::number_of(&gone)),
                }
                1
            }
            None => 0,
        }
    }

    /// QUEUE.PROMOTE [MAX n].
    pub fn promote(&mut self, max: Option<i64>, now: i64) -> PromoteOutcome {
        self.note_state(now);
        let (tickets_expired, leases_expired, freed) = self.reap(now);
        let mut n = self.free_slots(self.sessions.len() as i64).min(self.s.batch_max);
        if let Some(m) = max {
            n = n.min(m);
        }
        if let Some(room) = self.room() {
            n = n.min(room);
        }
        // The head gets tickets, silent waiters met on the way dropped, never promoted
        // (taken from the head); then the sweep drops silent ones further back (with
        // fewer than 256 waiters, all of them), in line order (each one "left").
        let (_, mut dropped, promoted) = self.admit_head(n, now);
        let mut i = 0;
        while i < self.line.len() {
            match self.line[i].place {
                Place::Waiting { seen } if self.abandoned(&self.line[i].user, seen, now) => {
                    let p = self.line.remove(i);
                    self.out_of_line(&p.user);
                    self.left_line(&p.user, Self::number_of(&p));
                    dropped += 1;
                    self.counters.dropped += 1;
                }
                _ => i += 1,
            }
        }
        self.counters.promoted += promoted.len() as i64;
        self.note_slot_wait(freed, promoted.len() as i64, now);
        let active = self.sessions.len() as i64;
        PromoteOutcome {
            promoted,
            tickets_expired,
            leases_expired,
            dropped,
            waiting: self.waiting(),
            joining: self.joining(),
            active,
            available_slots: self.free_slots(active),
        }
    }

    /// Records the ticket string the server gave `user` for the ticket the model issued.
    pub fn learn_ticket(&mut self, user: &str, id: &str) {
        let i = self.position(user).expect("learn_ticket: user in line");
        match &mut self.line[i].place {
            Place::Ticket { ticket, .. } if ticket.is_none() => *ticket = Some(id.into()),
            other => panic!("learn_ticket: {user} is {other:?}"),
        }
    }

    /// TICKET.CLAIM [HOLDER h]: good exactly once, before it expires, while the user
    /// is not inside already and the hard cap allows; with a holder, claiming the same
    /// ticket again while the session it opened lives answers the same again.
    pub fn claim(&mut self, id: &str, holder: Option<&str>, now: i64) -> ClaimOutcome {
        let Some(i) =
            self.line.iter().position(|p| matches!(&p.place, Place::Ticket { ticket: Some(t), .. } if t == id))
        else {
            let again = holder.and_then(|h| {
                self.sessions
                    .iter()
                    .find(|(_, s)| s.lease > now && s.claim.as_ref().is_some_and(|(t, held, _)| t == id && held == h))
            });
            return match again {
                Some((user, s)) => ClaimOutcome::Claimed {
                    user: user.clone(),
                    nickname: s.nickname.clone(),
                    lease_ms: s.claim.as_ref().unwrap().2,
                    again: true,
                },
                None => ClaimOutcome::Error(NOTICKET),
            };
        };
        let Place::Ticket { expiry, .. } = self.line[i].place else { unreachable!() };
        if expiry <= now {
            // Housekeeping happens now, and the freed places go to the head of the line.
            let (_, _, freed) = self.reap(now);
            self.fill(now, freed);
            return ClaimOutcome::Error(EXPIRED);
        }
        let user = self.line[i].user.clone();
        if self.sessions.get(&user).is_some_and(|s| s.lease > now) {
            return ClaimOutcome::Error(INSIDE);
        }
        if self.s.hard_cap > 0 && self.live_sessions(now) >= self.s.hard_cap {
            return ClaimOutcome::Error(FULL);
        }
        let p = self.line.remove(i);
        self.out_of_line(&user);
        let lease_ms = self.s.session_lease;
        let claim = holder.map(|h| (id.to_string(), h.to_string(), lease_ms));
        self.bought.remove(&user);
        self.sessions.insert(user.clone(), Session { nickname: p.nickname.clone(), lease: now + lease_ms, claim });
        self.counters.claimed += 1;
        ClaimOutcome::Claimed { user, nickname: p.nickname, lease_ms, again: false }
    }

    /// QUEUE.PASS: the claim's nickname and lease when the person passes straight in
    /// (the entry promoted at once, then its ticket claimed, with `holder` remembered
    /// as the claim's holder; the ticket the server names is learnt with
    /// [`Model::learn_pass_ticket`]); None, and nothing changed, otherwise: entry
    /// `invite`, closed, sold out, the person in line or inside, anyone waiting, the
    /// hard cap reached, or no free slot or unit to sell as housekeeping would leave
    /// the tickets and sessions.
    pub fn pass(&mut self, user: &str, nickname: &str, holder: Option<&str>, now: i64) -> Option<(String, i64)> {
        if self.s.invite || self.closed(now) || self.sold_out() {
            return None;
        }
        if self.position(user).is_some() || self.sessions.get(user).is_some_and(|s| s.lease > now) {
            return None;
        }
        if self.waiting() > 0 || (self.s.hard_cap > 0 && self.live_sessions(now) >= self.s.hard_cap) {
            return None;
        }
        let live_tickets =
            self.line.iter().filter(|p| matches!(p.place, Place::Ticket { expiry, .. } if expiry > now)).count() as i64;
        let live = self.live_sessions(now);
        let bought = self.bought.iter().filter(|u| self.sessions.get(*u).is_some_and(|s| s.lease > now)).count() as i64;
        let free = self.s.soft_cap - live - live_tickets > 0;
        let room = self.inventory.is_none_or(|i| i - (live_tickets + live - bought).max(0) >= 1);
        if !(free && room) {
            return None;
        }
        self.note_state(now);
        let lane = self.s.lanes.max(1) - 1;
        let st = self.enter(user, nickname, lane, None, now);
        assert!(matches!(st, Standing::Promoted { .. }), "model: a pass's entry waits: {st:?}");
        let i = self.position(user).expect("model: the pass's ticket holder");
        let p = self.line.remove(i);
        self.out_of_line(user);
        let lease_ms = self.s.session_lease;
        let claim = holder.map(|h| (String::new(), h.to_string(), lease_ms));
        self.bought.remove(user);
        self.sessions.insert(user.to_string(), Session { nickname: p.nickname.clone(), lease: now + lease_ms, claim });
        self.counters.claimed += 1;
        Some((p.nickname, lease_ms))
    }

    /// The ticket a pass used, as the server named it (a claim with a holder
    /// remembers it).
    pub fn learn_pass_ticket(&mut self, user: &str, ticket: &str) {
        if let Some((t, ..)) = self.sessions.get_mut(user).and_then(|s| s.claim.as_mut()) {
            *t = ticket.to_string();
        }
    }

    /// SESSION.HEARTBEAT: extends each live lease (1), 0 where none is live.
    pub fn heartbeat(&mut self, users: &[&str], now: i64) -> Vec<i64> {
        let lease = self.s.session_lease;
        users
            .iter()
            .map(|u| match self.sessions.get_mut(*u) {
                Some(s) if s.lease > now => {
                    s.lease = now + lease;
                    1
                }
                _ => 0,
            })
            .collect()
    }

    /// SESSION.END: 1 when the user had a session (even one whose lease ran out); its
    /// slot goes to the head of the line at once.
    pub fn end(&mut self, user: &str, now: i64) -> i64 {
        if self.sessions.remove(user).is_some() {
            self.prune_bought();
            self.counters.ended += 1;
            self.fill(now, Vec::new());
            1
        } else {
            0
        }
    }

    /// QUEUE.WATCH: extends `instance`'s lease to now + lease_ms and registers the
    /// named users who wait under it; nobody counts as heard from. Returns the log
    /// number, the number waiting, and per user its number in line while waiting (else
    /// 0) with its standing.
    ///
    /// Not in docs/commands.md, done by both implementations: a named user who does
    /// not wait loses its registration by this instance (one by another instance
    /// stays). Only the `watched` hash shows it: a registration counts for waiting
    /// users only, and one who waits again has re-entered, which keeps it.
    pub fn watch(
        &mut self,
        instance: &str,
        lease_ms: i64,
        users: &[&str],
        now: i64,
    ) -> (i64, i64, Vec<(i64, Standing)>) {
        self.instances.insert(instance.to_string(), now + lease_ms);
        // Instances whose lease ended more than a day ago go.
        self.instances.retain(|_, lease| *lease >= now - INSTANCE_KEEP_MS);
        let mut each = Vec::new();
        for u in users {
            let standing = self.standing(u, now, false);
            let number = match self.position(u) {
                Some(i) if matches!(self.line[i].place, Place::Waiting { .. }) => {
                    // Added at the end unless listed; the listed instances whose
                    // lease ended before now go.
                    let listed = self.watched.get(*u).cloned().unwrap_or_default();
                    if !listed.iter().any(|i| i == instance) {
                        let mut kept: Vec<String> =
                            listed.into_iter().filter(|i| self.instances.get(i).is_some_and(|&l| l >= now)).collect();
                        kept.push(instance.to_string());
                        self.watched.insert(u.to_string(), kept);
                    }
                    Self::number_of(&self.line[i])
                }
                _ => {
                    self.unlist(u, instance);
                    0
                }
            };
            each.push((number, standing));
        }
        (self.log_n, self.waiting(), each)
    }

    /// Takes `instance` out of `user`'s registration, which goes when nobody is left
    /// in it; whether it was listed.
    fn unlist(&mut self, user: &str, instance: &str) -> bool {
        let Some(listed) = self.watched.get_mut(user) else { return false };
        let before = listed.len();
        listed.retain(|i| i != instance);
        let found = listed.len() < before;
        if listed.is_empty() {
            self.watched.remove(user);
        }
        found
    }

    /// QUEUE.UNWATCH: removes the named users' registrations under `instance` (how
    /// many); each waiting user whose registration goes counts as heard from now (its
    /// time set to now, not kept to the refresh interval STATUS keeps). The docs say
    /// "a waiting user counts as heard from now" after "each user registered by
    /// instance is no longer watched": read as a user whose registration goes, as
    /// both implementations do (a user named but not registered by it is untouched).
    pub fn unwatch(&mut self, instance: &str, users: &[&str], now: i64) -> i64 {
        let mut removed = 0;
        for u in users {
            if self.unlist(u, instance) {
                removed += 1;
                if let Some(i) = self.position(u) {
                    if let Place::Waiting { seen } = &mut self.line[i].place {
                        *seen = now;
                    }
                }
            }
        }
        removed
    }

    /// A person's number in line, learnt from the server.
    pub fn learn_number(&mut self, user: &str, number: i64) {
        let i = self.position(user).expect("learn_number: user in line");
        assert!(self.line[i].number.is_none(), "learn_number: {user} has a number");
        self.line[i].number = Some(number);
        if matches!(self.line[i].place, Place::Ticket { .. }) {
            self.max_promoted = self.max_promoted.max(number);
        }
    }

    /// The waiting people with their numbers and ranks, in line order.
    pub fn waiting_numbers(&self) -> Vec<(String, Option<i64>, i64)> {
        let mut r = 0;
        let mut out = Vec::new();
        for p in &self.line {
            if matches!(p.place, Place::Waiting { .. }) {
                r += 1;
                out.push((p.user.clone(), p.number, r));
            }
        }
        out
    }

    /// QUEUE.INFO's `lane_counts`: per lane in order, (name, waiting in it now,
    /// promoted from it); empty without lanes.
    pub fn lane_counts(&self) -> Vec<(String, i64, i64)> {
        if !self.has_lanes() {
            return Vec::new();
        }
        (0..self.s.lanes)
            .map(|l| {
                let waiting =
                    self.line.iter().filter(|p| p.lane == l && matches!(p.place, Place::Waiting { .. })).count();
                (lane_name(l), waiting as i64, self.counters.admitted.get(&l).copied().unwrap_or(0))
            })
            .collect()
    }

    /// QUEUE.INFO's counts as of `now`: (waiting, joining, active, available_slots).
    pub fn info(&self, now: i64) -> (i64, i64, i64, i64) {
        let active = self.live_sessions(now);
        (self.waiting(), self.joining(), active, self.free_slots(active))
    }
}
