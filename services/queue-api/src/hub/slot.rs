//! A person's standing as this instance knows it, and the streams that wait on it: a
//! value with a version, a lock and one wake-up list.
//!
//! It does what `tokio::sync::watch` does for the hub (the same method names and
//! meanings, for the part the hub uses), in less than half the memory: a watch
//! channel keeps eight wake-up lists (to spread many receivers of one value) and a
//! second for its senders, about 490 bytes with a standing; one person has one or a
//! few streams, and this keeps one list, about 220. There is one per person waiting
//! here, so at a million streams the difference is about 270 MB.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// The version's lowest bit: the sender is gone.
const CLOSED: u64 = 1;
/// What a change adds to the version.
const STEP: u64 = 2;

struct Shared<T> {
    value: Mutex<T>,
    /// Changed (by [`STEP`]) under the value's lock, with each change.
    version: AtomicU64,
    changed: Notify,
}

/// Receivers are told of a change; the value stays until the sender is dropped.
pub struct Sender<T> {
    shared: Arc<Shared<T>>,
}

/// Reads the latest value and waits for the next change.
pub struct Receiver<T> {
    shared: Arc<Shared<T>>,
    /// The version last seen (without its closed bit).
    seen: u64,
}

/// The sender was dropped (and every change was seen).
#[derive(Debug, PartialEq, Eq)]
pub struct Closed;

pub fn channel<T>(value: T) -> Sender<T> {
    Sender { shared: Arc::new(Shared { value: Mutex::new(value), version: AtomicU64::new(0), changed: Notify::new() }) }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while the lock was held leaves a whole value (each change is one
    // assignment), so the poison is not kept.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<T> Sender<T> {
    /// Changes the value in place; `modify` says whether it changed (only then are
    /// receivers told). Returns what `modify` said.
    pub fn send_if_modified(&self, modify: impl FnOnce(&mut T) -> bool) -> bool {
        let mut value = lock(&self.shared.value);
        if !modify(&mut value) {
            return false;
        }
        self.shared.version.fetch_add(STEP, Ordering::SeqCst);
        drop(value);
        self.shared.changed.notify_waiters();
        true
    }

    /// The value now (the lock is held while the guard lives).
    pub fn borrow(&self) -> MutexGuard<'_, T> {
        lock(&self.shared.value)
    }

    /// A receiver that has seen the value as it is now.
    pub fn subscribe(&self) -> Receiver<T> {
        let _value = lock(&self.shared.value);
        let seen = self.shared.version.load(Ordering::SeqCst) & !CLOSED;
        Receiver { shared: self.shared.clone(), seen }
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        self.shared.version.fetch_or(CLOSED, Ordering::SeqCst);
        self.shared.changed.notify_waiters();
    }
}

impl<T> Receiver<T> {
    /// The value now, not marking it seen.
    pub fn borrow(&self) -> MutexGuard<'_, T> {
        lock(&self.shared.value)
    }

    /// The value now, marked seen.
    pub fn borrow_and_update(&mut self) -> MutexGuard<'_, T> {
        let value = lock(&self.shared.value);
        self.seen = self.shared.version.load(Ordering::SeqCst) & !CLOSED;
        value
    }

    /// Whether the value changed since last seen; Closed once the sender is gone.
    pub fn has_changed(&self) -> Result<bool, Closed> {
        let version = self.shared.version.load(Ordering::SeqCst);
        if version & CLOSED != 0 {
            return Err(Closed);
        }
        Ok(version != self.seen)
    }

    /// Waits for a change not seen yet (at once if there is one) and marks it seen;
    /// Closed once the sender is gone and every change was seen.
    pub async fn changed(&mut self) -> Result<(), Closed> {
        loop {
            // Listed before the version is read: a change made after the read
            // wakes this wait.
            let wake = self.shared.changed.notified();
            let mut wake = std::pin::pin!(wake);
            wake.as_mut().enable();
            let version = self.shared.version.load(Ordering::SeqCst);
            if version & !CLOSED != self.seen {
                self.seen = version & !CLOSED;
                return Ok(());
            }
            if version & CLOSED != 0 {
                return Err(Closed);
            }
            wake.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn within<F: std::future::Future>(f: F) -> Option<F::Output> {
        tokio::time::timeout(Duration::from_secs(5), f).await.ok()
    }

    #[tokio::test]
    async fn a_change_wakes_every_receiver_once() {
        let tx = channel(0u32);
        let (mut a, mut b) = (tx.subscribe(), tx.subscribe());
        assert_eq!(a.has_changed(), Ok(false));
        let waiting = tokio::spawn(async move {
            a.changed().await.unwrap();
            let v = *a.borrow_and_update();
            (v, a)
        });
        tokio::task::yield_now().await;
        assert!(tx.send_if_modified(|v| {
            *v = 7;
            true
        }));
        let (v, mut a) = within(waiting).await.expect("woken").unwrap();
        assert_eq!(v, 7);
        assert_eq!(a.has_changed(), Ok(false), "seen");
        assert_eq!(b.has_changed(), Ok(true));
        within(b.changed()).await.expect("at once").unwrap();
        assert_eq!(*b.borrow(), 7);
        // Not modified: nobody is told.
        assert!(!tx.send_if_modified(|_| false));
        assert_eq!(a.has_changed(), Ok(false));
        assert!(tokio::time::timeout(Duration::from_millis(50), a.changed()).await.is_err());
    }

    #[tokio::test]
    async fn a_new_receiver_has_seen_the_value() {
        let tx = channel("a");
        tx.send_if_modified(|v| {
            *v = "b";
            true
        });
        let rx = tx.subscribe();
        assert_eq!(rx.has_changed(), Ok(false));
        assert_eq!(*rx.borrow(), "b");
    }

    #[tokio::test]
    async fn closing_ends_waits_after_the_last_change_is_seen() {
        let tx = channel(1);
        let mut rx = tx.subscribe();
        let mut idle = tx.subscribe();
        let waiting = tokio::spawn(async move { idle.changed().await });
        tokio::task::yield_now().await;
        tx.send_if_modified(|v| {
            *v = 2;
            true
        });
        drop(tx);
        assert_eq!(within(waiting).await.expect("woken").unwrap(), Ok(()), "the change first");
        assert_eq!(rx.has_changed(), Err(Closed));
        assert_eq!(within(rx.changed()).await, Some(Ok(())), "the change not seen yet");
        assert_eq!(*rx.borrow(), 2);
        assert_eq!(within(rx.changed()).await, Some(Err(Closed)));
    }

    /// Each change waits for the receiver to have seen the one before: a lost
    /// wake-up is not covered by a later change.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn every_change_wakes_a_waiting_receiver() {
        let tx = channel(0u32);
        let mut rx = tx.subscribe();
        let (ack, mut acked) = tokio::sync::mpsc::channel::<u32>(1);
        let reader = tokio::spawn(async move {
            loop {
                if rx.changed().await.is_err() {
                    return;
                }
                let v = *rx.borrow_and_update();
                ack.send(v).await.unwrap();
            }
        });
        for i in 1..=2_000u32 {
            tx.send_if_modified(|v| {
                *v = i;
                true
            });
            let seen = within(acked.recv()).await.expect("the receiver woke").unwrap();
            assert_eq!(seen, i);
        }
        drop(tx);
        within(reader).await.expect("the reader ends once the sender is gone").unwrap();
    }

    /// A wait dropped before it ends (a select that took another branch) loses
    /// nothing: the change is seen by the next wait.
    #[tokio::test]
    async fn a_dropped_wait_loses_no_change() {
        let tx = channel(0u32);
        let mut rx = tx.subscribe();
        assert!(tokio::time::timeout(Duration::from_millis(20), rx.changed()).await.is_err());
        tx.send_if_modified(|v| {
            *v = 1;
            true
        });
        within(rx.changed()).await.expect("at once").unwrap();
        assert_eq!(*rx.borrow(), 1);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn no_change_is_missed_under_contention() {
        let tx = Arc::new(channel(0u64));
        let mut rx = tx.subscribe();
        let writer = {
            let tx = tx.clone();
            tokio::spawn(async move {
                for i in 1..=20_000u64 {
                    tx.send_if_modified(|v| {
                        *v = i;
                        true
                    });
                    if i % 64 == 0 {
                        tokio::task::yield_now().await;
                    }
                }
            })
        };
        let mut last = 0;
        while last < 20_000 {
            within(rx.changed()).await.expect("a change is never missed").unwrap();
            let v = *rx.borrow_and_update();
            assert!(v >= last, "values only go forward");
            last = v;
        }
        writer.await.unwrap();
    }
}
