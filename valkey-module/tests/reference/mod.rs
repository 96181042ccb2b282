//! A reference model of one queue, written from the rules in docs/commands.md ("The
//! commands", "A slot freed inside a command", "What PROMOTE does", "Errors",
//! "Settings"), not from either implementation: a plain
//! line of people in entry order, a table of sessions, and the counters. It knows
//! nothing of sequence numbers, chunks, `p_max` or how ranks are computed; a ticket is
//! whatever string the server handed out, remembered by whom it was given to.
//!
//! Left out on purpose: the token bucket (runs use `rate` 0) and the estimated wait
//! (the measured admission rate), which the state-machine test does not compare.

use std::collections::BTreeMap;

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
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    pub nickname: String,
    pub lease: i64,
}

/// Where someone stands, as STATUS, RANKS and ENTER report it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Waiting {
        rank: i64,
        nickname: String,
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

pub struct Model {
    pub s: Settings,
    /// Everyone in line, in entry order: waiting people and ticket holders.
    pub line: Vec<Person>,
    pub sessions: BTreeMap<String, Session>,
    pub counters: Counters,
}

impl Model {
    pub fn new(s: Settings) -> Self {
        Model { s, line: Vec::new(), sessions: BTreeMap::new(), counters: Counters::default() }
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

    /// A waiting person is dropped once not heard from for longer than abandon_after.
    fn abandoned(&self, seen: i64, now: i64) -> bool {
        self.s.abandon_after > 0 && now - seen > self.s.abandon_after
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
        self.line.retain(|p| !matches!(p.place, Place::Ticket { expiry, .. } if expiry <= now));
        freed.extend(self.sessions.values().filter(|s| s.lease <= now).map(|s| s.lease));
        let leases = freed.len() as i64 - tickets;
        self.sessions.retain(|_, s| s.lease > now);
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
        let n = self.free_slots(self.sessions.len() as i64).min(self.s.batch_max);
        let (mut promoted, mut i) = (0, 0);
        while promoted < n && i < self.line.len() {
            if let Place::Waiting { seen } = self.line[i].place {
                if self.abandoned(seen, now) {
                    self.line.remove(i);
                    self.counters.dropped += 1;
                    continue;
                }
                self.line[i].place = Place::Ticket { ticket: None, expiry: now + self.s.ticket_ttl };
                promoted += 1;
            }
            i += 1;
        }
        self.counters.promoted += promoted;
        self.note_slot_wait(freed, promoted, now);
    }

    fn rank_of(&self, i: usize) -> i64 {
        self.line[..=i].iter().filter(|p| matches!(p.place, Place::Waiting { .. })).count() as i64
    }

    /// The refusal QUEUE.ENTER gives instead of entering, if any: `max_waiting`
    /// people already wait and `user` is not among those in the line (waiting or
    /// holding a ticket), who may always enter again.
    pub fn refuses_entry(&self, user: &str) -> Option<&'static str> {
        let full = self.s.max_waiting > 0 && self.waiting() >= self.s.max_waiting;
        (full && self.position(user).is_none()).then_some("LINEFULL the line is full, try again later")
    }

    /// QUEUE.ENTER: to the back of the line (re-entry gives up the old place and any
    /// ticket, which goes to the head of the line at once); in at once when nobody
    /// else waits and there is room.
    pub fn enter(&mut self, user: &str, nickname: &str, now: i64) -> Standing {
        if let Some(i) = self.position(user) {
            if matches!(self.line.remove(i).place, Place::Ticket { .. }) {
                self.fill(now, Vec::new());
            }
        }
        let admit_now = self.waiting() == 0 && self.s.soft_cap > 0;
        if admit_now {
            let (_, _, freed) = self.reap(now);
            if self.free_slots(self.sessions.len() as i64) > 0 {
                self.note_slot_wait(freed, 1, now);
                self.line.push(Person {
                    user: user.into(),
                    nickname: nickname.into(),
                    place: Place::Ticket { ticket: None, expiry: now + self.s.ticket_ttl },
                });
                self.counters.promoted += 1;
                return Standing::Promoted { ticket: None, nickname: nickname.into() };
            }
        }
        self.line.push(Person { user: user.into(), nickname: nickname.into(), place: Place::Waiting { seen: now } });
        Standing::Waiting { rank: self.waiting(), nickname: nickname.into() }
    }

    /// QUEUE.STATUS (and each user of QUEUE.RANKS): a waiting person counts as heard
    /// from; the stored time is refreshed at most every abandon_after / 8 (between
    /// 250 ms and 30 s), so that polling is not a write each time.
    pub fn status(&mut self, user: &str, now: i64) -> Standing {
        if let Some(i) = self.position(user) {
            let rank = self.rank_of(i);
            let refresh = (self.s.abandon_after / 8).clamp(250, 30_000);
            let abandon_after = self.s.abandon_after;
            let p = &mut self.line[i];
            return match &mut p.place {
                Place::Waiting { seen } => {
                    if abandon_after > 0 && now - *seen >= refresh {
                        *seen = now;
                    }
                    Standing::Waiting { rank, nickname: p.nickname.clone() }
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
                self.counters.left += 1;
                if matches!(gone.place, Place::Ticket { .. }) {
                    self.fill(now, Vec::new());
                }
                1
            }
            None => 0,
        }
    }

    /// QUEUE.PROMOTE [MAX n].
    pub fn promote(&mut self, max: Option<i64>, now: i64) -> PromoteOutcome {
        let (tickets_expired, leases_expired, freed) = self.reap(now);
        let mut n = self.free_slots(self.sessions.len() as i64).min(self.s.batch_max);
        if let Some(m) = max {
            n = n.min(m);
        }
        // Silent waiters are dropped, never promoted; then the head gets tickets.
        let before = self.line.len();
        let line = std::mem::take(&mut self.line);
        self.line = line
            .into_iter()
            .filter(|p| !matches!(p.place, Place::Waiting { seen } if self.abandoned(seen, now)))
            .collect();
        let dropped = (before - self.line.len()) as i64;
        let mut promoted = Vec::new();
        for p in self.line.iter_mut() {
            if promoted.len() as i64 >= n {
                break;
            }
            if matches!(p.place, Place::Waiting { .. }) {
                p.place = Place::Ticket { ticket: None, expiry: now + self.s.ticket_ttl };
                promoted.push(p.user.clone());
            }
        }
        self.counters.promoted += promoted.len() as i64;
        self.counters.dropped += dropped;
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

    /// TICKET.CLAIM: good exactly once, before it expires, while the user is not
    /// inside already and the hard cap allows.
    pub fn claim(&mut self, id: &str, now: i64) -> ClaimOutcome {
        let Some(i) =
            self.line.iter().position(|p| matches!(&p.place, Place::Ticket { ticket: Some(t), .. } if t == id))
        else {
            return ClaimOutcome::Error(NOTICKET);
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
        self.sessions.insert(user.clone(), Session { nickname: p.nickname.clone(), lease: now + self.s.session_lease });
        self.counters.claimed += 1;
        ClaimOutcome::Claimed { user, nickname: p.nickname, lease_ms: self.s.session_lease }
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
            self.counters.ended += 1;
            self.fill(now, Vec::new());
            1
        } else {
            0
        }
    }

    /// QUEUE.INFO's counts as of `now`: (waiting, joining, active, available_slots).
    pub fn info(&self, now: i64) -> (i64, i64, i64, i64) {
        let active = self.live_sessions(now);
        (self.waiting(), self.joining(), active, self.free_slots(active))
    }
}
