//! Reading replies the way both backends and both protocols send them: maps as RESP3
//! maps or RESP2 flat field/value arrays, in any order; nil as RESP nil (or `false`,
//! which a Lua function's nil could become); integers as integers (or digit strings).

use crate::error::ClientError;
use redis::Value;
use std::collections::HashMap;

/// Strips RESP3 attributes, which carry nothing the queue commands send.
fn plain(v: Value) -> Value {
    match v {
        Value::Attribute { data, .. } => plain(*data),
        other => other,
    }
}

/// Text of a string-like value.
pub(crate) fn text(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        Value::Attribute { data, .. } => text(data),
        _ => None,
    }
}

/// An integer value (digit strings and whole doubles accepted).
pub(crate) fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        Value::BulkString(_) | Value::SimpleString(_) => text(v)?.trim().parse().ok(),
        Value::Double(d) if d.fract() == 0.0 && d.abs() < 9.0e15 => Some(*d as i64),
        Value::Attribute { data, .. } => int(data),
        _ => None,
    }
}

/// Nil, or `false` (a Lua function that returned a boolean where nil was meant).
pub(crate) fn is_nil(v: &Value) -> bool {
    matches!(plain_ref(v), Value::Nil | Value::Boolean(false))
}

fn plain_ref(v: &Value) -> &Value {
    match v {
        Value::Attribute { data, .. } => plain_ref(data),
        other => other,
    }
}

/// A 0/1 (or boolean) reply.
pub(crate) fn flag(v: &Value) -> Result<bool, ClientError> {
    match plain_ref(v) {
        Value::Boolean(b) => Ok(*b),
        other => match int(other) {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            _ => Err(ClientError::protocol(format!("expected 0 or 1, got {v:?}"))),
        },
    }
}

/// The elements of an array reply.
pub(crate) fn array(v: Value, what: &str) -> Result<Vec<Value>, ClientError> {
    match plain(v) {
        Value::Array(a) | Value::Set(a) => Ok(a),
        other => Err(ClientError::protocol(format!("{what}: expected an array, got {other:?}"))),
    }
}

/// The strings of an array (or set) reply; elements that are not strings are skipped.
pub(crate) fn strings(v: Value, what: &str) -> Result<Vec<String>, ClientError> {
    Ok(array(v, what)?.iter().filter_map(text).collect())
}

/// A map reply, by field name.
pub(crate) struct Fields {
    what: &'static str,
    map: HashMap<String, Value>,
}

impl Fields {
    /// Reads a RESP3 map or a RESP2 flat field/value array.
    pub(crate) fn new(v: Value, what: &'static str) -> Result<Fields, ClientError> {
        let pairs: Vec<(Value, Value)> = match plain(v) {
            Value::Map(pairs) => pairs,
            Value::Array(flat) if flat.len() % 2 == 0 => {
                let mut it = flat.into_iter();
                let mut pairs = Vec::new();
                while let (Some(k), Some(v)) = (it.next(), it.next()) {
                    pairs.push((k, v));
                }
                pairs
            }
            other => return Err(ClientError::protocol(format!("{what}: expected a map, got {other:?}"))),
        };
        let mut map = HashMap::with_capacity(pairs.len());
        for (k, v) in pairs {
            let k = text(&k).ok_or_else(|| ClientError::protocol(format!("{what}: field name {k:?}")))?;
            map.insert(k, v);
        }
        Ok(Fields { what, map })
    }

    /// The fields whose values are strings, with those values (an HGETALL reply).
    pub(crate) fn into_strings(self) -> HashMap<String, String> {
        self.map.into_iter().filter_map(|(k, v)| Some((k, text(&v)?))).collect()
    }

    /// What the reply is, for error messages.
    pub(crate) fn what(&self) -> &'static str {
        self.what
    }

    /// A field's value as sent, if the reply has it.
    pub(crate) fn value(&self, name: &str) -> Option<&Value> {
        self.map.get(name)
    }

    fn get(&self, name: &str) -> Result<&Value, ClientError> {
        self.map.get(name).ok_or_else(|| ClientError::protocol(format!("{}: no field {name}", self.what)))
    }

    fn bad(&self, name: &str, want: &str) -> ClientError {
        ClientError::protocol(format!("{}: field {name} is not {want}: {:?}", self.what, self.map.get(name)))
    }

    pub(crate) fn i64(&self, name: &str) -> Result<i64, ClientError> {
        int(self.get(name)?).ok_or_else(|| self.bad(name, "an integer"))
    }

    pub(crate) fn u64(&self, name: &str) -> Result<u64, ClientError> {
        let v = self.i64(name)?;
        u64::try_from(v).map_err(|_| self.bad(name, "a count"))
    }

    pub(crate) fn opt_u64(&self, name: &str) -> Result<Option<u64>, ClientError> {
        let v = self.get(name)?;
        if is_nil(v) {
            return Ok(None);
        }
        self.u64(name).map(Some)
    }

    /// An integer or nil; also None when the field is absent (a field added later).
    pub(crate) fn opt_i64_absent(&self, name: &str) -> Result<Option<i64>, ClientError> {
        match self.map.get(name) {
            None => Ok(None),
            Some(v) if is_nil(v) => Ok(None),
            Some(_) => self.i64(name).map(Some),
        }
    }

    pub(crate) fn string(&self, name: &str) -> Result<String, ClientError> {
        text(self.get(name)?).ok_or_else(|| self.bad(name, "a string"))
    }

    pub(crate) fn opt_string(&self, name: &str) -> Result<Option<String>, ClientError> {
        let v = self.get(name)?;
        if is_nil(v) {
            return Ok(None);
        }
        self.string(name).map(Some)
    }
}

/// What one field of a map reply reads as, by the type it goes into (see
/// [`from_fields!`]).
pub(crate) trait FromField: Sized {
    fn from_field(f: &Fields, name: &str) -> Result<Self, ClientError>;
}

impl FromField for u64 {
    fn from_field(f: &Fields, name: &str) -> Result<u64, ClientError> {
        f.u64(name)
    }
}

impl FromField for i64 {
    fn from_field(f: &Fields, name: &str) -> Result<i64, ClientError> {
        f.i64(name)
    }
}

impl FromField for String {
    fn from_field(f: &Fields, name: &str) -> Result<String, ClientError> {
        f.string(name)
    }
}

impl FromField for Option<String> {
    fn from_field(f: &Fields, name: &str) -> Result<Option<String>, ClientError> {
        f.opt_string(name)
    }
}

impl FromField for Option<u64> {
    fn from_field(f: &Fields, name: &str) -> Result<Option<u64>, ClientError> {
        f.opt_u64(name)
    }
}

/// Optional integers are the fields added later: absent reads as none too.
impl FromField for Option<i64> {
    fn from_field(f: &Fields, name: &str) -> Result<Option<i64>, ClientError> {
        f.opt_i64_absent(name)
    }
}

/// `from_value` for a struct read from a map reply (`what` names the reply in
/// errors): each listed field from the reply's field of the name after it (its own
/// name when none), read as its type reads ([`FromField`]); then the fields computed
/// from the reply, `|f| { field = expression, ... }`.
macro_rules! from_fields {
    ($ty:ident($what:literal) { $($field:ident $(: $name:literal)?),* $(,)? }) => {
        $crate::reply::from_fields!($ty($what) { $($field $(: $name)?),* } |f| {});
    };
    ($ty:ident($what:literal) { $($field:ident $(: $name:literal)?),* $(,)? }
     |$f:ident| { $($computed:ident = $value:expr),* $(,)? }) => {
        impl $ty {
            pub(crate) fn from_value(v: redis::Value) -> Result<$ty, $crate::error::ClientError> {
                let $f = $crate::reply::Fields::new(v, $what)?;
                Ok($ty {
                    $($field: $crate::reply::FromField::from_field(&$f, $crate::reply::from_fields!(@name $field $($name)?))?,)*
                    $($computed: $value,)*
                })
            }
        }
    };
    (@name $field:ident) => { stringify!($field) };
    (@name $field:ident $name:literal) => { $name };
}
pub(crate) use from_fields;

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> Value {
        Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn flat_arrays_and_maps_read_alike() {
        let flat = Value::Array(vec![bulk("b"), Value::Int(2), bulk("a"), Value::Nil]);
        let map = Value::Map(vec![(bulk("a"), Value::Boolean(false)), (bulk("b"), bulk("2"))]);
        for v in [flat, map] {
            let f = Fields::new(v, "test").unwrap();
            assert_eq!(f.u64("b").unwrap(), 2);
            assert_eq!(f.opt_string("a").unwrap(), None);
            assert!(matches!(f.u64("c"), Err(ClientError::Protocol(_))));
        }
    }

    #[test]
    fn hgetall_of_both_protocols() {
        let resp2 = Value::Array(vec![bulk("u-1"), bulk("alice"), bulk("u-2"), bulk("bob")]);
        let resp3 = Value::Map(vec![(bulk("u-1"), bulk("alice")), (bulk("u-2"), bulk("bob"))]);
        for v in [resp2, resp3] {
            let want = HashMap::from([("u-1".into(), "alice".into()), ("u-2".into(), "bob".into())]);
            assert_eq!(Fields::new(v, "t").unwrap().into_strings(), want);
        }
        assert!(Fields::new(Value::Array(vec![]), "t").unwrap().into_strings().is_empty());
    }

    #[test]
    fn reply_strings() {
        assert_eq!(strings(Value::Array(vec![bulk("a"), Value::Nil, bulk("c")]), "t").unwrap(), vec!["a", "c"]);
        assert_eq!(strings(Value::Set(vec![bulk("a"), bulk("b")]), "t").unwrap(), vec!["a", "b"]);
        assert!(strings(Value::Nil, "t").is_err());
    }

    #[test]
    fn odd_arrays_and_scalars_are_not_maps() {
        assert!(Fields::new(Value::Array(vec![bulk("a")]), "t").is_err());
        assert!(Fields::new(Value::Int(1), "t").is_err());
    }

    #[test]
    fn flags() {
        assert!(flag(&Value::Int(1)).unwrap());
        assert!(!flag(&Value::Int(0)).unwrap());
        assert!(flag(&Value::Boolean(true)).unwrap());
        assert!(flag(&Value::Int(2)).is_err());
        assert!(flag(&Value::Nil).is_err());
    }

    #[test]
    fn negative_counts_are_refused() {
        let f = Fields::new(Value::Array(vec![bulk("n"), Value::Int(-1)]), "t").unwrap();
        assert_eq!(f.i64("n").unwrap(), -1);
        assert!(f.u64("n").is_err());
    }
}
