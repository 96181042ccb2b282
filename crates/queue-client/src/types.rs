//! Typed replies. [`Standing`] serializes to the REST contract's JSON
//! (`{"status":"WAITING","rank":3,"userId":...}`); the operator types keep the
//! commands' snake_case field names.

use crate::error::ClientError;
use crate::reply::{array, flag, from_fields, int, is_nil, text, Fields, FromField};
use queue_core::config::{Config, FIELDS};
use redis::Value;
use serde::{Deserialize, Serialize};

/// Where a user stands in a queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Status {
    /// In line, with a rank.
    Waiting,
    /// Holds a ticket that is not claimed yet.
    Promoted,
    /// Inside: holds a live session.
    Active,
    /// Not known to the queue (never entered, left, dropped, or the ticket lapsed).
    Unknown,
}

impl Status {
    /// The wire name: `WAITING`, `PROMOTED`, `ACTIVE` or `UNKNOWN`.
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Waiting => "WAITING",
            Status::Promoted => "PROMOTED",
            Status::Active => "ACTIVE",
            Status::Unknown => "UNKNOWN",
        }
    }

    fn parse(s: &str) -> Option<Status> {
        [Status::Waiting, Status::Promoted, Status::Active, Status::Unknown].into_iter().find(|st| st.as_str() == s)
    }
}

impl FromField for Status {
    fn from_field(f: &Fields, name: &str) -> Result<Status, ClientError> {
        let status = f.string(name)?;
        Status::parse(&status).ok_or_else(|| ClientError::protocol(format!("{}: unknown status {status:?}", f.what())))
    }
}

/// A standing map: the reply of `QUEUE.ENTER`, `QUEUE.STATUS` and each element of
/// `QUEUE.RANKS`, with the REST contract's field names.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Standing {
    /// `WAITING`, `PROMOTED`, `ACTIVE` or `UNKNOWN`.
    pub status: Status,
    /// 1 = next in line; 0 when not waiting.
    pub rank: u64,
    /// The user asked about.
    pub user_id: String,
    /// The nickname given at entry; none for an unknown user.
    pub nickname: Option<String>,
    /// The ticket to claim, once promoted.
    pub ticket_id: Option<String>,
    /// Seconds until the user's turn, while waiting and when the rate is known.
    pub estimated_wait_seconds: Option<u64>,
    /// In a pre-queue: when the queue opens (ms since the epoch); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub opens_at: Option<i64>,
    /// In a queue with lanes: the lane a waiting user waits in; absent otherwise
    /// (a queue without lanes, or a user not waiting in line).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lane: Option<String>,
}

from_fields! { Standing("standing") {
    status, rank, user_id: "userId", nickname, ticket_id: "ticketId",
    estimated_wait_seconds: "estimatedWaitSeconds", opens_at: "opensAt",
} |f| {
    // Only a queue with lanes sends the field: absent reads as none, as nil does.
    lane = f.opt_string("lane").unwrap_or(None),
} }

impl Standing {
    pub(crate) fn list_from_value(v: Value, expected: usize) -> Result<Vec<Standing>, ClientError> {
        let items = array(v, "ranks")?;
        if items.len() != expected {
            return Err(ClientError::protocol(format!("ranks: {} standings for {expected} users", items.len())));
        }
        items.into_iter().map(Standing::from_value).collect()
    }
}

/// One page of `QUEUE.LINE`: waiting users in line order, `users[i]` at rank
/// `first_rank + i`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LinePage {
    /// The rank of `users[0]`.
    pub first_rank: u64,
    /// Where the next page starts; 0 when the line ended.
    pub cursor: u64,
    /// The admissions per minute estimates use now (0: unknown): measured from the
    /// line, the `rate` setting while nothing is measured, never above that setting.
    pub measured_per_min: i64,
    /// The `rate` setting.
    pub rate: i64,
    /// The waiting users listed, in line order.
    pub users: Vec<String>,
}

impl LinePage {
    pub(crate) fn from_value(v: Value) -> Result<LinePage, ClientError> {
        let mut items = array(v, "line")?;
        if items.len() != 5 {
            return Err(ClientError::protocol(format!("line: {} items, want 5", items.len())));
        }
        let users = crate::reply::strings(items.pop().unwrap_or(Value::Nil), "line users")?;
        let int = |i: usize| {
            crate::reply::int(&items[i]).ok_or_else(|| ClientError::protocol(format!("line: item {i} not an integer")))
        };
        let nonneg = |i: usize| int(i).map(|v| v.max(0) as u64);
        Ok(LinePage { first_rank: nonneg(0)?, cursor: nonneg(1)?, measured_per_min: int(2)?, rate: int(3)?, users })
    }

    /// The estimated wait of the user at `rank`, as QUEUE.STATUS computes it.
    pub fn estimated_wait_seconds(&self, rank: u64) -> Option<u64> {
        queue_core::admission::estimated_wait_seconds(rank as i64, self.measured_per_min).map(|s| s.max(0) as u64)
    }
}

/// What one `QUEUE.PROMOTE` did, and the queue's counts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct PromoteReport {
    /// Tickets issued.
    pub promoted: u64,
    /// Unclaimed tickets dropped because they expired.
    pub tickets_expired: u64,
    /// Sessions dropped because their lease ran out.
    pub leases_expired: u64,
    /// Waiters dropped because they went silent.
    pub dropped: u64,
    /// Users still waiting.
    pub waiting: u64,
    /// Tickets out.
    pub joining: u64,
    /// Live sessions.
    pub active: u64,
    /// Slots left under the soft cap.
    pub available_slots: u64,
}

from_fields! { PromoteReport("promote") {
    promoted, tickets_expired, leases_expired, dropped, waiting, joining, active, available_slots,
} }

/// A claimed ticket: the user now holds a session lease.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Claim {
    /// Whose ticket it was.
    pub user_id: String,
    /// The nickname given at entry.
    pub nickname: String,
    /// The ticket, now used.
    pub ticket_id: String,
    /// Milliseconds the session lives without a heartbeat.
    pub lease_ms: u64,
}

from_fields! { Claim("claim") { user_id: "userId", nickname, ticket_id: "ticketId", lease_ms: "leaseMs" } }

impl Claim {
    /// QUEUE.PASS's reply: a claim, or nil (RESP3 `false` from the Lua library) for no pass.
    pub(crate) fn from_pass(v: redis::Value) -> Result<Option<Claim>, crate::error::ClientError> {
        match v {
            redis::Value::Nil | redis::Value::Boolean(false) => Ok(None),
            v => Claim::from_value(v).map(Some),
        }
    }
}

/// A queue's effective settings (`QUEUE.CONFIG Q GET *`): what an operator set, else
/// the module-wide defaults. One value per field of the settings schema
/// (`queue_core::config::FIELDS`, whose help says what each means), read through
/// `Config`'s accessors (`soft_cap()`, `rate()`, ...); as JSON, an object with the
/// schema's field names, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueueConfig(pub Config);

impl std::ops::Deref for QueueConfig {
    type Target = Config;
    fn deref(&self) -> &Config {
        &self.0
    }
}

impl QueueConfig {
    fn from_fields(f: &Fields) -> Result<QueueConfig, ClientError> {
        let mut c = Config::default();
        for (v, field) in c.values.iter_mut().zip(FIELDS) {
            // A setting added later (closes_at) is its default from an older server.
            *v = match f.value(field.name) {
                None => field.default,
                Some(_) => f.u64(field.name)? as i64,
            };
        }
        Ok(QueueConfig(c))
    }

    pub(crate) fn from_value(v: Value) -> Result<QueueConfig, ClientError> {
        QueueConfig::from_fields(&Fields::new(v, "config")?)
    }
}

impl Serialize for QueueConfig {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        use serde::ser::SerializeMap;
        let mut m = s.serialize_map(Some(FIELDS.len()))?;
        for (field, v) in FIELDS.iter().zip(self.0.values) {
            m.serialize_entry(field.name, &v)?;
        }
        m.end()
    }
}

impl<'de> Deserialize<'de> for QueueConfig {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = QueueConfig;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("the queue's settings by name")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<QueueConfig, A::Error> {
                let mut values: [Option<i64>; FIELDS.len()] = [None; FIELDS.len()];
                while let Some(key) = map.next_key::<String>()? {
                    match FIELDS.iter().position(|f| f.name == key) {
                        Some(i) => values[i] = Some(map.next_value()?),
                        None => {
                            map.next_value::<serde::de::IgnoredAny>()?;
                        }
                    }
                }
                let mut c = Config::default();
                for ((v, got), field) in c.values.iter_mut().zip(values).zip(FIELDS) {
                    // `closes_at` came later: what was written before it has none.
                    let later = field.name == FIELDS[queue_core::config::CLOSES_AT].name;
                    *v = match got {
                        Some(got) => got,
                        None if later => field.default,
                        None => return Err(serde::de::Error::missing_field(field.name)),
                    };
                }
                Ok(QueueConfig(c))
            }
        }
        d.deserialize_map(Visit)
    }
}

/// One lane's counts in `QUEUE.INFO` (`lane_counts`): who waits in it now and who was
/// admitted from it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaneCounts {
    /// The lane's name.
    pub lane: String,
    /// People waiting in line in this lane now (the pre-queue not included).
    pub waiting: u64,
    /// People promoted from this lane (let in at once on entry too) since the queue was made.
    pub admitted: u64,
}

impl LaneCounts {
    /// `lane_counts`: an array of `[lane, waiting, admitted]`; absent (an engine older
    /// than the field) reads as none.
    fn list_from(f: &Fields) -> Result<Vec<LaneCounts>, ClientError> {
        let Some(v) = f.value("lane_counts") else {
            return Ok(Vec::new());
        };
        let bad =
            || ClientError::protocol(format!("info: lane_counts is not a list of [lane, waiting, admitted]: {v:?}"));
        array(v.clone(), "info lane_counts")?
            .into_iter()
            .map(|l| {
                let l = array(l, "info lane_counts").map_err(|_| bad())?;
                let count = |i: usize| l.get(i).and_then(int).and_then(|n| u64::try_from(n).ok()).ok_or_else(bad);
                match l.len() {
                    3 => Ok(LaneCounts { lane: text(&l[0]).ok_or_else(bad)?, waiting: count(1)?, admitted: count(2)? }),
                    _ => Err(bad()),
                }
            })
            .collect()
    }
}

/// Everything `QUEUE.INFO` reports about one queue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct QueueInfo {
    /// Users waiting in line.
    pub waiting: u64,
    /// Tickets out, including expired ones the next PROMOTE will drop.
    pub joining: u64,
    /// Live sessions.
    pub active: u64,
    /// Slots left under the soft cap.
    pub available_slots: u64,
    /// Whole tokens in the rate bucket; `None` without a rate limit (the wire's -1).
    pub tokens: Option<u64>,
    /// Measured admissions per minute.
    pub admission_rate_per_min: u64,
    /// The effective settings.
    #[serde(flatten)]
    pub config: QueueConfig,
    /// Tickets ever issued.
    pub promoted: u64,
    /// Tickets claimed.
    pub claimed: u64,
    /// Tickets that expired unclaimed.
    pub expired: u64,
    /// Waiters dropped for going silent.
    pub dropped: u64,
    /// Users who left the line or gave back their ticket.
    pub left: u64,
    /// Sessions ended by SESSION.END.
    pub ended: u64,
    /// Sessions whose lease ran out.
    pub lapsed: u64,
    /// Milliseconds the slots freed by an expiry stayed empty until a promotion filled
    /// them, summed (0 from a server older than the counter).
    #[serde(default)]
    pub slot_wait_ms: u64,
    /// Per lane of a queue with lanes, in admission order; empty without lanes (and
    /// from a server older than the field).
    #[serde(default)]
    pub lane_counts: Vec<LaneCounts>,
    /// The sale's state (docs/commands.md, "A sale's end"); each is its default
    /// from a server older than the field. `closes_at` has passed.
    #[serde(default)]
    pub closed: bool,
    /// Units left to sell; `None`: no limit.
    #[serde(default)]
    pub inventory: Option<u64>,
    /// Tickets out and live sessions not reported as having bought.
    #[serde(default)]
    pub outstanding: u64,
    /// The inventory is 0: every entry is refused.
    #[serde(default)]
    pub sold_out: bool,
    /// The operator's message to everyone waiting (empty: none).
    #[serde(default)]
    pub message: String,
}

from_fields! { QueueInfo("info") {
    waiting, joining, active, available_slots, admission_rate_per_min,
    promoted, claimed, expired, dropped, left, ended, lapsed,
} |f| {
    tokens = u64::try_from(f.i64("tokens")?).ok(),
    config = QueueConfig::from_fields(&f)?,
    slot_wait_ms = f.u64("slot_wait_ms").unwrap_or(0),
    lane_counts = LaneCounts::list_from(&f)?,
    closed = f.opt_i64_absent("closed")? == Some(1),
    inventory = f.opt_i64_absent("inventory")?.and_then(|v| u64::try_from(v).ok()),
    outstanding = f.opt_i64_absent("outstanding")?.and_then(|v| u64::try_from(v).ok()).unwrap_or(0),
    sold_out = f.opt_i64_absent("sold_out")? == Some(1),
    message = match f.value("message") {
        Some(v) if !crate::reply::is_nil(v) => f.string("message")?,
        _ => String::new(),
    },
} }

/// An array of 0/1 replies, one per user asked about.
pub(crate) fn flags(v: Value, expected: usize, what: &str) -> Result<Vec<bool>, ClientError> {
    let items = array(v, what)?;
    if items.len() != expected {
        return Err(ClientError::protocol(format!("{what}: {} replies for {expected} users", items.len())));
    }
    items.iter().map(flag).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The back office's JSON: the schema's field names, flattened into QUEUE.INFO's
    /// object in the schema's order, and read back the same.
    #[test]
    fn settings_serialize_by_the_schema() {
        let mut config = QueueConfig::default();
        config.0.values[queue_core::config::SOFT_CAP] = 7;
        let json = serde_json::to_string(&config).unwrap();
        assert_eq!(
            json,
            r#"{"soft_cap":7,"hard_cap":0,"rate":0,"burst":0,"batch_max":1000,"ticket_ttl":60000,"session_lease":30000,"abandon_after":180000,"opens_at":0,"pow_difficulty":0,"max_waiting":0,"closes_at":0}"#
        );
        let back: QueueConfig = serde_json::from_str(&json).unwrap();
        assert_eq!(back, config);
        assert!(serde_json::from_str::<QueueConfig>(r#"{"soft_cap":7}"#).is_err(), "every setting is required");
        let before_closes_at = json.replace(r#","closes_at":0"#, "");
        assert_eq!(serde_json::from_str::<QueueConfig>(&before_closes_at).unwrap(), config, "but closes_at");
        let info = QueueInfo {
            waiting: 1,
            joining: 2,
            active: 3,
            available_slots: 4,
            tokens: None,
            admission_rate_per_min: 5,
            config,
            promoted: 6,
            claimed: 7,
            expired: 8,
            dropped: 9,
            left: 10,
            ended: 11,
            lapsed: 12,
            slot_wait_ms: 13,
            lane_counts: vec![LaneCounts { lane: "presale".into(), waiting: 2, admitted: 5 }],
            closed: true,
            inventory: Some(14),
            outstanding: 15,
            sold_out: false,
            message: "doors close at nine".into(),
        };
        let json = serde_json::to_value(&info).unwrap();
        assert_eq!(
            (json["soft_cap"].as_u64(), json["waiting"].as_u64(), json["lapsed"].as_u64()),
            (Some(7), Some(1), Some(12))
        );
        assert_eq!(json["lane_counts"], serde_json::json!([{"lane": "presale", "waiting": 2, "admitted": 5}]));
        assert_eq!(serde_json::from_value::<QueueInfo>(json).unwrap(), info);
    }

    /// `lane_counts` reads as [lane, waiting, admitted] per lane; absent as none; any
    /// other shape is a protocol error.
    #[test]
    fn info_reads_lane_counts() {
        let info = |lanes: Option<Value>| {
            let mut pairs: Vec<(Value, Value)> = [
                "waiting",
                "joining",
                "active",
                "available_slots",
                "tokens",
                "admission_rate_per_min",
                "promoted",
                "claimed",
                "expired",
                "dropped",
                "left",
                "ended",
                "lapsed",
                "slot_wait_ms",
            ]
            .into_iter()
            .chain(FIELDS.iter().map(|f| f.name))
            .map(|n| (bulk(n), Value::Int(0)))
            .collect();
            pairs.extend(lanes.map(|l| (bulk("lane_counts"), l)));
            QueueInfo::from_value(Value::Map(pairs))
        };
        assert_eq!(info(None).unwrap().lane_counts, vec![]);
        assert_eq!(info(Some(Value::Array(vec![]))).unwrap().lane_counts, vec![]);
        let two = Value::Array(vec![
            Value::Array(vec![bulk("presale"), Value::Int(3), Value::Int(1)]),
            Value::Array(vec![bulk("general"), Value::Int(0), Value::Int(4)]),
        ]);
        assert_eq!(
            info(Some(two)).unwrap().lane_counts,
            vec![
                LaneCounts { lane: "presale".into(), waiting: 3, admitted: 1 },
                LaneCounts { lane: "general".into(), waiting: 0, admitted: 4 },
            ]
        );
        for bad in [
            Value::Int(1),
            Value::Array(vec![Value::Array(vec![bulk("presale"), Value::Int(3)])]),
            Value::Array(vec![Value::Array(vec![bulk("presale"), Value::Int(-1), Value::Int(0)])]),
        ] {
            assert!(matches!(info(Some(bad)), Err(ClientError::Protocol(_))));
        }
    }

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    /// The sale's fields: their defaults from a server older than them; `inventory`
    /// nil (or Lua's false) as no limit.
    #[test]
    fn info_reads_the_sale() {
        let info = |extra: Vec<(&str, Value)>| {
            let mut pairs: Vec<(Value, Value)> = [
                "waiting",
                "joining",
                "active",
                "available_slots",
                "tokens",
                "admission_rate_per_min",
                "promoted",
                "claimed",
                "expired",
                "dropped",
                "left",
                "ended",
                "lapsed",
            ]
            .into_iter()
            .chain(FIELDS.iter().map(|f| f.name).filter(|n| *n != "closes_at"))
            .map(|n| (bulk(n), Value::Int(0)))
            .collect();
            pairs.extend(extra.into_iter().map(|(k, v)| (bulk(k), v)));
            QueueInfo::from_value(Value::Map(pairs)).unwrap()
        };
        let old = info(vec![]);
        assert_eq!(
            (old.closed, old.inventory, old.outstanding, old.sold_out, old.message.as_str(), old.config.closes_at()),
            (false, None, 0, false, "", 0)
        );
        let now = info(vec![
            ("closes_at", Value::Int(1_700_000_000_000)),
            ("closed", Value::Int(1)),
            ("inventory", Value::Int(0)),
            ("outstanding", Value::Int(3)),
            ("sold_out", Value::Int(1)),
            ("message", bulk("doors close at nine")),
        ]);
        assert_eq!(
            (now.closed, now.inventory, now.outstanding, now.sold_out, now.message.as_str(), now.config.closes_at()),
            (true, Some(0), 3, true, "doors close at nine", 1_700_000_000_000)
        );
        for nil in [Value::Nil, Value::Boolean(false)] {
            assert_eq!(info(vec![("inventory", nil)]).inventory, None);
        }
    }

    #[test]
    fn standing_serializes_as_the_rest_contract() {
        let s = Standing {
            status: Status::Waiting,
            rank: 3,
            user_id: "u-1".into(),
            nickname: Some("alice".into()),
            ticket_id: None,
            estimated_wait_seconds: Some(12),
            opens_at: None,
            lane: None,
        };
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"{"status":"WAITING","rank":3,"userId":"u-1","nickname":"alice","ticketId":null,"estimatedWaitSeconds":12}"#
        );
        assert_eq!(serde_json::from_str::<Standing>(&json).unwrap(), s);
        let pre = Standing { rank: 0, estimated_wait_seconds: None, opens_at: Some(1_700_000_060_000), ..s };
        let json = serde_json::to_string(&pre).unwrap();
        assert!(json.ends_with(r#""estimatedWaitSeconds":null,"opensAt":1700000060000}"#), "{json}");
        let in_lane =
            Standing { lane: Some("presale".into()), opens_at: None, estimated_wait_seconds: Some(12), ..pre.clone() };
        let json = serde_json::to_string(&in_lane).unwrap();
        assert!(json.ends_with(r#""estimatedWaitSeconds":12,"lane":"presale"}"#), "{json}");
        assert_eq!(serde_json::from_str::<Standing>(&json).unwrap(), in_lane);
    }

    /// The standing map names the lane in a queue with lanes (nil for a user not
    /// waiting); a queue without lanes sends no such field.
    #[test]
    fn standing_reads_its_lane() {
        let map = |lane: Option<Value>| {
            let mut fields = vec![
                (bulk("status"), bulk("WAITING")),
                (bulk("rank"), Value::Int(2)),
                (bulk("userId"), bulk("u")),
                (bulk("nickname"), bulk("n")),
                (bulk("ticketId"), Value::Nil),
                (bulk("estimatedWaitSeconds"), Value::Nil),
            ];
            fields.extend(lane.map(|l| (bulk("lane"), l)));
            Value::Map(fields)
        };
        assert_eq!(Standing::from_value(map(Some(bulk("presale")))).unwrap().lane.as_deref(), Some("presale"));
        assert_eq!(Standing::from_value(map(Some(Value::Nil))).unwrap().lane, None);
        assert_eq!(Standing::from_value(map(Some(Value::Boolean(false)))).unwrap().lane, None, "a Lua nil");
        assert_eq!(Standing::from_value(map(None)).unwrap().lane, None);
    }

    #[test]
    fn standing_reads_any_field_order() {
        let v = Value::Map(vec![
            (bulk("ticketId"), bulk("7.abc")),
            (bulk("estimatedWaitSeconds"), Value::Nil),
            (bulk("userId"), bulk("u")),
            (bulk("nickname"), bulk("n")),
            (bulk("rank"), Value::Int(0)),
            (bulk("status"), bulk("PROMOTED")),
        ]);
        let s = Standing::from_value(v).unwrap();
        assert_eq!(s.status, Status::Promoted);
        assert_eq!(s.ticket_id.as_deref(), Some("7.abc"));
        assert_eq!(s.estimated_wait_seconds, None);
    }

    #[test]
    fn unknown_status_is_a_protocol_error() {
        let v = Value::Array(vec![
            bulk("status"),
            bulk("LOST"),
            bulk("rank"),
            Value::Int(0),
            bulk("userId"),
            bulk("u"),
            bulk("nickname"),
            Value::Nil,
            bulk("ticketId"),
            Value::Nil,
            bulk("estimatedWaitSeconds"),
            Value::Nil,
        ]);
        assert!(matches!(Standing::from_value(v), Err(ClientError::Protocol(_))));
    }

    fn opening_fields(lanes: Option<Value>) -> Vec<(Value, Value)> {
        let mut f = vec![
            (bulk("opensAt"), Value::Int(5)),
            (bulk("commitment"), bulk("c")),
            (bulk("state"), bulk("open")),
            (bulk("seed"), bulk("s")),
            (bulk("openedAt"), Value::Int(6)),
            (bulk("entrants"), Value::Int(3)),
        ];
        if let Some(l) = lanes {
            f.push((bulk("lanes"), l));
        }
        f
    }

    fn both_protocols(fields: Vec<(Value, Value)>) -> [Value; 2] {
        let flat = fields.iter().flat_map(|(k, v)| [k.clone(), v.clone()]).collect();
        [Value::Map(fields), Value::Array(flat)]
    }

    #[test]
    fn opening_lanes_read_in_order_and_absent_is_empty() {
        let lanes = Value::Array(vec![
            Value::Array(vec![bulk("presale"), Value::Int(2)]),
            Value::Array(vec![bulk("general"), bulk("1")]),
        ]);
        for v in both_protocols(opening_fields(Some(lanes))) {
            let o = Opening::from_value(v).unwrap();
            assert_eq!(o.lanes, vec![("presale".to_string(), 2), ("general".to_string(), 1)]);
            assert_eq!((o.opens_at, o.entrants, o.opened_at, o.seed.as_deref()), (5, 3, Some(6), Some("s")));
        }
        for v in
            both_protocols(opening_fields(None)).into_iter().chain(both_protocols(opening_fields(Some(Value::Nil))))
        {
            assert!(Opening::from_value(v).unwrap().lanes.is_empty());
        }
        for bad in [
            bulk("presale"),
            Value::Array(vec![Value::Array(vec![bulk("presale")])]),
            Value::Array(vec![Value::Array(vec![bulk("presale"), Value::Int(-1)])]),
        ] {
            for v in both_protocols(opening_fields(Some(bad.clone()))) {
                assert!(matches!(Opening::from_value(v), Err(ClientError::Protocol(_))), "{bad:?}");
            }
        }
    }
}

/// `QUEUE.OPENING`: a queue's fair opening (docs/commands.md, "A verifiably fair opening").
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Opening {
    /// The `opens_at` setting, ms since the epoch (0: open).
    pub opens_at: i64,
    /// `none`, `scheduled` or `open`.
    pub state: String,
    /// Hex SHA-256 of the seed, published while scheduled.
    pub commitment: Option<String>,
    /// The seed (64 hex characters), revealed at the opening.
    pub seed: Option<String>,
    /// When the opening happened (ms).
    pub opened_at: Option<i64>,
    /// In the pre-queue while scheduled; placed at the opening once open.
    pub entrants: u64,
    /// In a queue with lanes: `(lane, entrants)` per lane in lane order, the lengths
    /// of the proof's consecutive runs (docs/commands.md, "With lanes"); empty
    /// without lanes (the reply has no `lanes` field then).
    #[serde(default)]
    pub lanes: Vec<(String, u64)>,
}

impl Opening {
    pub(crate) fn from_value(v: Value) -> Result<Opening, ClientError> {
        let lanes = opening_lanes(&v)?;
        let f = Fields::new(v, "opening")?;
        Ok(Opening {
            opens_at: f.i64("opensAt")?,
            state: f.string("state")?,
            commitment: f.opt_string("commitment")?,
            seed: f.opt_string("seed")?,
            opened_at: FromField::from_field(&f, "openedAt")?,
            entrants: f.u64("entrants")?,
            lanes,
        })
    }
}

/// The `lanes` field of a QUEUE.OPENING reply (a RESP3 map or a RESP2 flat
/// field/value array): an array of `[name, entrants]` pairs; absent, nil or empty
/// when the queue has no lanes.
fn opening_lanes(v: &Value) -> Result<Vec<(String, u64)>, ClientError> {
    let mut v = v;
    while let Value::Attribute { data, .. } = v {
        v = data;
    }
    let field = match v {
        Value::Map(pairs) => pairs.iter().find(|(k, _)| text(k).as_deref() == Some("lanes")).map(|(_, v)| v),
        Value::Array(flat) => flat.chunks_exact(2).find(|kv| text(&kv[0]).as_deref() == Some("lanes")).map(|kv| &kv[1]),
        _ => None,
    };
    let Some(field) = field else { return Ok(Vec::new()) };
    if is_nil(field) {
        return Ok(Vec::new());
    }
    let bad = || ClientError::protocol(format!("opening: field lanes is not [name, entrants] pairs: {field:?}"));
    let Value::Array(items) = field else { return Err(bad()) };
    items
        .iter()
        .map(|item| match item {
            Value::Array(pair) if pair.len() == 2 => {
                let name = text(&pair[0]).ok_or_else(bad)?;
                let n = int(&pair[1]).and_then(|n| u64::try_from(n).ok()).ok_or_else(bad)?;
                Ok((name, n))
            }
            _ => Err(bad()),
        })
        .collect()
}
