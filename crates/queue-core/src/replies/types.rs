//! What the commands reply, as values: the backends turn these into replies in the
//! field order of [`super`].

use crate::config::{Config, FIELDS};

/// Where a user stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Standing {
    Waiting {
        seq: i64,
        rank: i64,
        seen: i64,
        nickname: Vec<u8>,
    },
    /// In the pre-queue of an opening at `opens_at` (ms): WAITING with rank 0.
    Pre {
        nickname: Vec<u8>,
        opens_at: i64,
    },
    Promoted {
        ticket: Vec<u8>,
        nickname: Vec<u8>,
    },
    Active {
        nickname: Option<Vec<u8>>,
    },
    Unknown,
}

impl Standing {
    /// The reply's `status` field.
    pub fn status(&self) -> &'static str {
        match self {
            Standing::Waiting { .. } | Standing::Pre { .. } => "WAITING",
            Standing::Promoted { .. } => "PROMOTED",
            Standing::Active { .. } => "ACTIVE",
            Standing::Unknown => "UNKNOWN",
        }
    }
    /// The reply's `rank` (0 unless waiting).
    pub fn rank(&self) -> i64 {
        match self {
            Standing::Waiting { rank, .. } => *rank,
            _ => 0,
        }
    }
    pub fn nickname(&self) -> Option<&[u8]> {
        match self {
            Standing::Waiting { nickname, .. }
            | Standing::Promoted { nickname, .. }
            | Standing::Pre { nickname, .. } => Some(nickname),
            Standing::Active { nickname } => nickname.as_deref(),
            Standing::Unknown => None,
        }
    }
    /// The reply's `opensAt`: set only in a pre-queue.
    pub fn opens_at(&self) -> Option<i64> {
        match self {
            Standing::Pre { opens_at, .. } => Some(*opens_at),
            _ => None,
        }
    }
    pub fn ticket(&self) -> Option<&[u8]> {
        match self {
            Standing::Promoted { ticket, .. } => Some(ticket),
            _ => None,
        }
    }
}

/// PROMOTE's reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Promotion {
    pub promoted: i64,
    pub tickets_expired: i64,
    pub leases_expired: i64,
    pub dropped: i64,
    pub waiting: i64,
    pub joining: i64,
    pub active: i64,
    pub available_slots: i64,
}

impl Promotion {
    /// The reply's fields by name.
    pub fn fields(&self) -> [(&'static str, i64); 8] {
        [
            ("promoted", self.promoted),
            ("tickets_expired", self.tickets_expired),
            ("leases_expired", self.leases_expired),
            ("dropped", self.dropped),
            ("waiting", self.waiting),
            ("joining", self.joining),
            ("active", self.active),
            ("available_slots", self.available_slots),
        ]
    }
}

/// TICKET.CLAIM's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claimed<U> {
    pub user: U,
    pub nickname: Vec<u8>,
    pub lease_ms: i64,
}

/// QUEUE.INFO's values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Info {
    pub waiting: i64,
    pub joining: i64,
    pub active: i64,
    pub available_slots: i64,
    pub tokens: i64,
    pub admission_rate_per_min: i64,
    pub config: Config,
    /// The text setting `entry` (listed after the numeric settings).
    pub entry: crate::config::EntryMode,
    /// In the order of `replies::COUNTERS`.
    pub counters: [i64; 8],
    /// Per lane of a queue with lanes, in the queue's order; empty without lanes.
    pub lane_counts: Vec<LaneCount>,
    /// `closes_at` has passed.
    pub closed: bool,
    /// Units left to sell (None: no limit).
    pub inventory: Option<i64>,
    /// Tickets out and sessions (both counting expired ones until PROMOTE drops
    /// them), less the people inside reported as having bought.
    pub outstanding: i64,
    /// The inventory is 0.
    pub sold_out: bool,
    /// The operator's message (empty: none).
    pub message: Vec<u8>,
}

/// One lane's line of QUEUE.INFO's `lane_counts`: `[lane, waiting, admitted]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LaneCount {
    pub lane: Vec<u8>,
    /// People waiting in the lane now (the pre-queue not included).
    pub waiting: i64,
    /// People promoted from the lane (let in at once on entry too), the stats field
    /// `admitted:<lane>`.
    pub admitted: i64,
}

impl Info {
    /// The reply's fields by name: counts, every setting, counters.
    pub fn fields(&self) -> Vec<(&'static str, i64)> {
        let mut f = vec![
            ("waiting", self.waiting),
            ("joining", self.joining),
            ("active", self.active),
            ("available_slots", self.available_slots),
            ("tokens", self.tokens),
            ("admission_rate_per_min", self.admission_rate_per_min),
        ];
        f.extend(FIELDS.iter().zip(self.config.values).map(|(field, v)| (field.name, v)));
        f.extend(crate::replies::COUNTERS.into_iter().zip(self.counters));
        f.push(("closed", i64::from(self.closed)));
        f.push(("outstanding", self.outstanding));
        f.push(("sold_out", i64::from(self.sold_out)));
        f
    }
}

/// QUEUE.LINE: one page of the waiting users in line order, for refreshing every
/// rank of a long line at the cost of a walk (push updates): no per-user lookup, and
/// nobody counts as heard from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Line<U> {
    /// The rank of `users[0]` (0 when the page is empty); the others follow one by one.
    pub first_rank: i64,
    /// The number of the last user listed, to continue after; 0 at the end of the line.
    pub cursor: i64,
    /// What the estimated wait is computed from: the admissions per minute as
    /// `admission::admissions_per_minute` reads them now (0: unknown), and the `rate`
    /// setting (already taken into account there).
    pub measured_per_min: i64,
    pub rate: i64,
    pub users: Vec<U>,
}

/// QUEUE.OPENING's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    None,
    Scheduled,
    Open,
}

impl State {
    pub fn as_str(self) -> &'static str {
        match self {
            State::None => "none",
            State::Scheduled => "scheduled",
            State::Open => "open",
        }
    }
}

/// QUEUE.OPENING's reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Opening {
    /// The `opens_at` setting (0: open).
    pub opens_at: i64,
    pub state: State,
    pub commitment: Option<String>,
    /// Revealed once open.
    pub seed: Option<String>,
    pub opened_at: Option<i64>,
    /// In the pre-queue while scheduled; placed at the opening once open.
    pub entrants: i64,
    /// A queue with lanes, scheduled or open: each lane's name and its entrants, in
    /// lane order (where each lane's run of the proof ends). Empty otherwise.
    pub lanes: Vec<(Vec<u8>, i64)>,
}
