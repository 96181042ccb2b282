//! Typed request bodies. Every failure to read one is an [`ApiError`], so it answers
//! with the same JSON error replies as the handlers: 413 over the size limit, 400
//! when the body is not a JSON object; what a field's absence or wrong type means is
//! the handler's to say ([`Field`]).

use crate::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use serde_json::Value;

/// A JSON object body read into `T`, whatever the Content-Type says (seed 000's
/// clients send none).
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, ApiError> {
        let bytes = Bytes::from_request(req, state).await?;
        let not_an_object = |e: serde_json::Error| ApiError::BadRequest(format!("the body must be a JSON object: {e}"));
        let value: Value = serde_json::from_slice(&bytes).map_err(not_an_object)?;
        if !value.is_object() {
            return Err(ApiError::BadRequest("the body must be a JSON object".into()));
        }
        T::deserialize(value).map(JsonBody).map_err(not_an_object)
    }
}

/// A field of a body as sent; with `#[serde(default)]`, [`Field::Absent`] when missing.
#[derive(Debug, Default, PartialEq)]
pub enum Field<T> {
    #[default]
    Absent,
    Null,
    Given(T),
    /// Present, but not a `T`.
    WrongType,
}

impl<'de, T: DeserializeOwned> Deserialize<'de> for Field<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        Ok(match Value::deserialize(d)? {
            Value::Null => Field::Null,
            v => T::deserialize(v).map_or(Field::WrongType, Field::Given),
        })
    }
}

/// `POST /api/queue/entry`'s body.
#[derive(Debug, Deserialize)]
pub struct EntryRequest {
    #[serde(default)]
    pub nickname: Field<String>,
    #[serde(default)]
    pub queue: Field<String>,
    /// The userId this person was given before (a re-entry moves them to the back).
    #[serde(default, rename = "userId")]
    pub user_id: Field<String>,
    /// A solved proof-of-work challenge, when the queue asks one.
    #[serde(default)]
    pub pow: Field<crate::pow::Proof>,
    /// An access code: the person enters the code's lane (one use consumed). A lane
    /// itself is never read from the body: a field `lane` is ignored.
    #[serde(default)]
    pub code: Field<String>,
}

/// `PUT /api/admin/queues/{queue}`'s body: settings by name, in name order.
#[derive(Debug, Deserialize)]
#[serde(transparent)]
pub struct SettingsRequest(pub serde_json::Map<String, Value>);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fields_as_sent() {
        let parse = |s: &str| serde_json::from_str::<EntryRequest>(s).unwrap();
        let e = parse(r#"{"nickname": "ann"}"#);
        assert_eq!((e.nickname, e.queue), (Field::Given("ann".to_string()), Field::Absent));
        let e = parse(r#"{"nickname": 5, "queue": null, "other": 1}"#);
        assert_eq!((e.nickname, e.queue), (Field::WrongType, Field::Null));
    }
}
