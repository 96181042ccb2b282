//! The app reports sales through the gate (proxy mode): a `Queue-Sold: n` header on
//! the app's answer to an admitted request is taken off the answer (the client never
//! sees it) and becomes `QUEUE.SOLD queue n USER user` for that request's queue and
//! person. The answer never waits for Valkey: the sale goes on a bounded queue that
//! one task sends ([`sale_loop`]); a full queue, or Valkey away, loses the report
//! (logged and counted). A value that is not a positive integer up to the largest
//! inventory, or several values, is dropped and logged, never forwarded.

use crate::Gate;
use axum::http::HeaderMap;
use std::sync::Arc;
use tokio::sync::{mpsc, watch};

/// The response header by which the app reports units sold.
pub const QUEUE_SOLD: &str = "queue-sold";

/// Sales waiting to be sent; past it a report is dropped (logged and counted).
pub const SALES_PENDING: usize = 4096;

/// One report: `n` units of `queue` sold to `user`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Sale {
    pub queue: String,
    pub user: String,
    pub n: u64,
}

/// The units a `Queue-Sold` header says: one value, ASCII digits only, 1 to
/// `queue_core::config::MAX_INVENTORY`.
pub fn parse_sold(values: &[&[u8]]) -> Result<u64, &'static str> {
    let [v] = values else { return Err("more than one value") };
    let v = v.trim_ascii();
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err("not a positive integer");
    }
    let n: u64 = std::str::from_utf8(v).ok().and_then(|s| s.parse().ok()).ok_or("not a positive integer")?;
    if n == 0 {
        return Err("not a positive integer");
    }
    if n > queue_core::config::MAX_INVENTORY as u64 {
        return Err("too large");
    }
    Ok(n)
}

impl Gate {
    /// Takes `Queue-Sold` off the app's answer `headers`; for an admitted person's
    /// answer (`who`: queue and user) a valid value is reported (in the background).
    pub fn take_sold(&self, headers: &mut HeaderMap, who: Option<(&str, &str)>) {
        if !headers.contains_key(QUEUE_SOLD) {
            return;
        }
        let values: Vec<Vec<u8>> = headers.get_all(QUEUE_SOLD).iter().map(|v| v.as_bytes().to_vec()).collect();
        headers.remove(QUEUE_SOLD);
        let Some((queue, user)) = who else {
            self.metrics.sale("not_admitted");
            tracing::warn!("Queue-Sold on the answer to a request of nobody admitted; dropped");
            return;
        };
        let refs: Vec<&[u8]> = values.iter().map(Vec::as_slice).collect();
        match parse_sold(&refs) {
            Ok(n) => {
                let sale = Sale { queue: queue.to_string(), user: user.to_string(), n };
                if self.sales.try_send(sale).is_err() {
                    self.metrics.sale("dropped");
                    tracing::warn!(queue, user, n, "too many sales waiting for Valkey; this report is lost");
                }
            }
            Err(why) => {
                self.metrics.sale("bad_value");
                let shown = String::from_utf8_lossy(&values.concat()).chars().take(40).collect::<String>();
                tracing::warn!(queue, user, value = %shown, why, "Queue-Sold not a positive integer within the inventory's range; dropped");
            }
        }
    }
}

/// Sends the sales the answers reported, one QUEUE.SOLD each, until `stop`.
pub async fn sale_loop(gate: Arc<Gate>, mut sales: mpsc::Receiver<Sale>, mut stop: watch::Receiver<bool>) {
    loop {
        let sale = tokio::select! {
            s = sales.recv() => match s { Some(s) => s, None => return },
            _ = stop.changed() => return,
        };
        let Some(client) = gate.store.client().await else {
            gate.metrics.sale("unavailable");
            tracing::warn!(queue = %sale.queue, user = %sale.user, n = sale.n, "Valkey not connected; sale report lost");
            continue;
        };
        match client.sold(&sale.queue, sale.n, Some(&sale.user)).await {
            Ok(left) => {
                gate.metrics.sale("reported");
                tracing::info!(queue = %sale.queue, user = %sale.user, n = sale.n, left = ?left, "sale reported");
            }
            Err(e) => {
                gate.metrics.sale(if e.is_unavailable() { "unavailable" } else { "refused" });
                tracing::warn!(queue = %sale.queue, user = %sale.user, n = sale.n, error = %e, "sale report failed");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sold_values() {
        let one = |s: &[u8]| parse_sold(&[s]);
        assert_eq!(one(b"3"), Ok(3));
        assert_eq!(one(b" 12 "), Ok(12));
        for bad in [&b"0"[..], b"-1", b"+1", b"1.5", b"", b"1e3", b"x", b"99999999999999999999999", b"\xff"] {
            assert!(one(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_sold(&[b"1".as_slice(), b"2".as_slice()]), Err("more than one value"));
        let too_large = (queue_core::config::MAX_INVENTORY as u64 + 1).to_string();
        assert_eq!(one(too_large.as_bytes()), Err("too large"));
    }
}
