//! Per-queue settings. A queue's config hash holds only what an operator set; every
//! other field takes its default (the module's `queue.default-*` configs, or the
//! built-in values below), so a fresh queue works without any setup.

use crate::error::QueueError;

/// One setting: its name as used by `QUEUE.CONFIG`, its built-in default and range.
#[derive(Debug, Clone, Copy)]
pub struct Field {
    pub name: &'static str,
    pub default: i64,
    pub min: i64,
    pub max: i64,
    pub help: &'static str,
}

const DAY_MS: i64 = 86_400_000;

/// Indexes into `FIELDS`.
pub const SOFT_CAP: usize = 0;
pub const HARD_CAP: usize = 1;
pub const RATE: usize = 2;
pub const BURST: usize = 3;
pub const BATCH_MAX: usize = 4;
pub const TICKET_TTL: usize = 5;
pub const SESSION_LEASE: usize = 6;
pub const ABANDON_AFTER: usize = 7;
pub const OPENS_AT: usize = 8;
pub const POW_DIFFICULTY: usize = 9;
pub const MAX_WAITING: usize = 10;
pub const CLOSES_AT: usize = 11;

/// The latest `opens_at` (the end of year 9999 in ms; exact in Lua's doubles).
pub const MAX_OPENS_AT: i64 = 253_402_300_799_999;

/// The schema, in the order `QUEUE.CONFIG Q GET *` and `QUEUE.INFO` list it.
pub const FIELDS: [Field; 12] = [
    Field {
        name: "soft_cap",
        default: 1000,
        min: 0,
        max: 10_000_000,
        help: "users inside plus unclaimed tickets that PROMOTE fills up to (0 pauses admission)",
    },
    Field {
        name: "hard_cap",
        default: 0,
        min: 0,
        max: 10_000_000,
        help: "sessions TICKET.CLAIM never exceeds (0: no hard cap)",
    },
    Field {
        name: "rate",
        default: 0,
        min: 0,
        max: 1_000_000,
        help: "token bucket refill, users per second (0: no rate limit)",
    },
    Field { name: "burst", default: 0, min: 0, max: 10_000_000, help: "token bucket size (0: same as rate)" },
    Field { name: "batch_max", default: 1000, min: 1, max: 100_000, help: "most tickets one PROMOTE issues" },
    Field { name: "ticket_ttl", default: 60_000, min: 100, max: DAY_MS, help: "ms a ticket stays claimable" },
    Field {
        name: "session_lease",
        default: 30_000,
        min: 100,
        max: DAY_MS,
        help: "ms a session lives without a heartbeat",
    },
    Field {
        name: "abandon_after",
        // Three minutes: a page in a background tab, whose timers the browser may
        // throttle to one a minute, misses two keep-alives and still keeps its place.
        default: 180_000,
        min: 0,
        max: DAY_MS,
        help: "ms a waiting user may go unheard before being dropped (0: never)",
    },
    Field {
        name: "opens_at",
        default: 0,
        min: 0,
        max: MAX_OPENS_AT,
        help: "ms since the epoch the queue opens at: before it entries join a pre-queue, shuffled at the opening (0: open)",
    },
    Field {
        name: "pow_difficulty",
        default: 0,
        min: 0,
        max: crate::pow::MAX_DIFFICULTY,
        help: "leading zero bits of the proof of work queue-api asks at entry (0: none; 16 recommended)",
    },
    Field {
        name: "max_waiting",
        default: 0,
        min: 0,
        max: 100_000_000,
        help: "most people waiting (in line and in the pre-queue) before QUEUE.ENTER refuses newcomers with LINEFULL (0: no limit)",
    },
    Field {
        name: "closes_at",
        default: 0,
        min: 0,
        max: MAX_OPENS_AT,
        help: "ms since the epoch the queue closes at: from then on QUEUE.ENTER is refused with CLOSED (0: never)",
    },
];

/// The text setting `message`: an operator's message to everyone waiting (empty: none).
pub const MESSAGE: &str = "message";
/// Longest `message`, in bytes.
pub const MAX_MESSAGE_LEN: usize = 500;

/// The setting `inventory`: units left to sell (kept in the stats hash, since
/// QUEUE.SOLD lowers it; absent or -1: no limit).
pub const INVENTORY: &str = "inventory";
/// The largest `inventory` (exact in Lua's doubles).
pub const MAX_INVENTORY: i64 = 1_000_000_000_000;

/// Whether `name` is the text setting [`MESSAGE`] (any case).
pub fn is_message(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(MESSAGE.as_bytes())
}

/// Whether `name` is the setting [`INVENTORY`] (any case).
pub fn is_inventory(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(INVENTORY.as_bytes())
}

/// A value given for `message`: at most [`MAX_MESSAGE_LEN`] bytes, no control
/// characters (as a nickname; the bytes are kept as given, UTF-8 expected).
pub fn check_message(raw: &[u8]) -> Result<&[u8], QueueError> {
    if raw.len() > MAX_MESSAGE_LEN || raw.iter().any(|&b| b < 0x20 || b == 0x7f) {
        return Err(QueueError::InvalidMessage);
    }
    Ok(raw)
}

/// A value given for `inventory`: -1 (no limit) or 0 to [`MAX_INVENTORY`].
pub fn check_inventory(raw: &[u8]) -> Result<i64, QueueError> {
    let v = crate::args::parse_i64(raw).ok_or(QueueError::NotInteger)?;
    if !(-1..=MAX_INVENTORY).contains(&v) {
        return Err(QueueError::OutOfRange(INVENTORY, -1, MAX_INVENTORY));
    }
    Ok(v)
}

/// The text setting `entry`: who may enter the queue. Kept apart from the numeric
/// [`FIELDS`] (whose values every reader takes for integers): `QUEUE.CONFIG` sets and
/// gets it by this name, and `QUEUE.CONFIG Q GET *` and `QUEUE.INFO` list it after
/// them. No module-wide default: a queue that never set it is [`EntryMode::Open`].
pub const ENTRY: &str = "entry";

/// The values of [`ENTRY`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum EntryMode {
    /// Anyone may enter.
    #[default]
    Open,
    /// Only people the services identified (signed in) may enter: enforced by
    /// queue-api, which sees identities; the engine only keeps the setting.
    Identified,
    /// Only with an invitation (an access code or a lane): QUEUE.ENTER refuses other
    /// entries with `INVITE`.
    Invite,
}

impl EntryMode {
    /// Every mode, in the order the error text names them.
    pub const ALL: [EntryMode; 3] = [EntryMode::Open, EntryMode::Identified, EntryMode::Invite];

    pub fn as_str(self) -> &'static str {
        match self {
            EntryMode::Open => "open",
            EntryMode::Identified => "identified",
            EntryMode::Invite => "invite",
        }
    }

    /// A mode from its name (any case), else `InvalidEntry`.
    pub fn parse(raw: &[u8]) -> Result<EntryMode, QueueError> {
        EntryMode::ALL
            .into_iter()
            .find(|m| m.as_str().as_bytes().eq_ignore_ascii_case(raw))
            .ok_or(QueueError::InvalidEntry)
    }
}

/// Whether `name` is the text setting [`ENTRY`] (any case, as field names are).
pub fn is_entry(name: &[u8]) -> bool {
    name.eq_ignore_ascii_case(ENTRY.as_bytes())
}

pub fn field(name: &[u8]) -> Result<&'static Field, QueueError> {
    FIELDS
        .iter()
        .find(|f| f.name.as_bytes().eq_ignore_ascii_case(name))
        .ok_or_else(|| QueueError::UnknownConfigField(printable(name)))
}

/// A name as it may appear in an error text: bytes outside printable ASCII become
/// '?' (the Lua fallback does the same, so the texts match byte for byte).
pub fn printable(name: &[u8]) -> String {
    name.iter().map(|&b| if (0x20..0x7f).contains(&b) { b as char } else { '?' }).collect()
}

/// Checks a value given for `field`.
pub fn check_value(field: &Field, raw: &[u8]) -> Result<i64, QueueError> {
    let v = crate::args::parse_i64(raw).ok_or(QueueError::NotInteger)?;
    if v < field.min || v > field.max {
        return Err(QueueError::OutOfRange(field.name, field.min, field.max));
    }
    Ok(v)
}

/// Effective settings of one queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    pub values: [i64; FIELDS.len()],
}

impl Default for Config {
    fn default() -> Self {
        Config { values: FIELDS.map(|f| f.default) }
    }
}

impl Config {
    fn index(name: &str) -> usize {
        FIELDS.iter().position(|f| f.name == name).expect("known field")
    }
    pub fn get(&self, name: &str) -> i64 {
        self.values[Self::index(name)]
    }
    pub fn soft_cap(&self) -> i64 {
        self.values[SOFT_CAP]
    }
    pub fn hard_cap(&self) -> i64 {
        self.values[HARD_CAP]
    }
    pub fn rate(&self) -> i64 {
        self.values[RATE]
    }
    /// Bucket size in users: `burst`, or `rate` when burst is 0, and at least 1.
    pub fn bucket_size(&self) -> i64 {
        let b = if self.values[BURST] > 0 { self.values[BURST] } else { self.values[RATE] };
        b.max(1)
    }
    pub fn batch_max(&self) -> i64 {
        self.values[BATCH_MAX]
    }
    pub fn ticket_ttl(&self) -> i64 {
        self.values[TICKET_TTL]
    }
    pub fn session_lease(&self) -> i64 {
        self.values[SESSION_LEASE]
    }
    pub fn abandon_after(&self) -> i64 {
        self.values[ABANDON_AFTER]
    }
    pub fn pow_difficulty(&self) -> i64 {
        self.values[POW_DIFFICULTY]
    }
    pub fn opens_at(&self) -> i64 {
        self.values[OPENS_AT]
    }
    pub fn max_waiting(&self) -> i64 {
        self.values[MAX_WAITING]
    }
    pub fn closes_at(&self) -> i64 {
        self.values[CLOSES_AT]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_and_bucket_size() {
        let mut c = Config::default();
        assert_eq!(c.soft_cap(), 1000);
        assert_eq!(c.bucket_size(), 1);
        c.values[RATE] = 5;
        assert_eq!(c.bucket_size(), 5);
        c.values[BURST] = 20;
        assert_eq!(c.bucket_size(), 20);
        assert_eq!(c.get("burst"), 20);
    }

    #[test]
    fn values_are_checked() {
        let f = field(b"batch_max").unwrap();
        assert_eq!(check_value(f, b"0"), Err(QueueError::OutOfRange("batch_max", 1, 100_000)));
        assert_eq!(check_value(f, b"x"), Err(QueueError::NotInteger));
        assert_eq!(check_value(f, b"10"), Ok(10));
        assert_eq!(field(b"colour").unwrap_err().to_string(), "ERR unknown config field 'colour'");
        assert_eq!(field(b"c\xffo\r\n").unwrap_err().to_string(), "ERR unknown config field 'c?o??'");
    }

    #[test]
    fn entry_modes() {
        assert_eq!(EntryMode::parse(b"invite"), Ok(EntryMode::Invite));
        assert_eq!(EntryMode::parse(b"Identified"), Ok(EntryMode::Identified));
        assert_eq!(EntryMode::parse(b"OPEN"), Ok(EntryMode::Open));
        for bad in [&b""[..], b"closed", b"open ", b"1"] {
            assert_eq!(EntryMode::parse(bad), Err(QueueError::InvalidEntry));
        }
        assert_eq!(QueueError::InvalidEntry.to_string(), "ERR entry must be one of open, identified, invite");
        assert!(is_entry(b"ENTRY") && !is_entry(b"entries"));
        assert_eq!(EntryMode::default(), EntryMode::Open);
    }
}
