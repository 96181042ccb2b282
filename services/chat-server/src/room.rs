//! This instance's share of each room: who is connected here, and the local feed
//! every frame heard on the room's channel is handed to.
//!
//! A frame is serialized once and shared: the feed is a broadcast ring per room, so
//! a fan-out to N local sockets is one send and N cheap clones. A socket that falls
//! more than [`FEED_CAPACITY`] frames behind misses the oldest and is told so.

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::{broadcast, mpsc};
use tokio_tungstenite::tungstenite::Utf8Bytes;

use crate::frames::Person;

/// Frames a local socket may fall behind its room before it misses some.
pub const FEED_CAPACITY: usize = 1024;

/// Why the server closes a session from outside its own loop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kick {
    /// SESSION.HEARTBEAT found no live lease: the slot is gone already.
    LeaseLost,
}

struct Member {
    user_id: String,
    kick: mpsc::Sender<Kick>,
}

pub struct Room {
    feed: broadcast::Sender<Utf8Bytes>,
    /// Joins (true) and leaves (false) on this instance not yet told to the room.
    pending: Mutex<Vec<(bool, Person)>>,
    members: Mutex<HashMap<u64, Member>>,
    /// The last room-wide count read from Valkey, plus one (0: none yet).
    last_count: AtomicU64,
}

/// Every room this instance has served.
#[derive(Default)]
pub struct Rooms {
    rooms: Mutex<HashMap<String, Arc<Room>>>,
    /// The room feed's channels (sharded on a cluster: each room subscribed by name).
    channels: Mutex<queue_client::feed::Channels>,
    next_id: AtomicU64,
    local: AtomicUsize,
}

/// One session's place in its room; leaving the room is dropping it.
pub struct Membership {
    rooms: Arc<Rooms>,
    room: Arc<Room>,
    id: u64,
    /// Frames for the room, from the moment of joining.
    pub feed: broadcast::Receiver<Utf8Bytes>,
    /// Closes from outside (lease lost).
    pub kicks: mpsc::Receiver<Kick>,
}

impl Drop for Membership {
    fn drop(&mut self) {
        if self.room.members.lock().unwrap().remove(&self.id).is_some() {
            self.rooms.local.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

impl Rooms {
    fn room(&self, queue: &str) -> Arc<Room> {
        let mut rooms = self.rooms.lock().unwrap();
        rooms
            .entry(queue.to_string())
            .or_insert_with(|| {
                Arc::new(Room {
                    feed: broadcast::channel(FEED_CAPACITY).0,
                    pending: Mutex::new(Vec::new()),
                    members: Mutex::new(HashMap::new()),
                    last_count: AtomicU64::new(0),
                })
            })
            .clone()
    }

    /// The current room feed's channels.
    pub fn channels(&self) -> queue_client::feed::Channels {
        self.channels.lock().unwrap().clone()
    }

    /// A new room feed's channels.
    pub fn set_channels(&self, channels: queue_client::feed::Channels) {
        *self.channels.lock().unwrap() = channels;
    }

    /// Adds a session to its room; it hears every frame delivered from now on.
    pub fn join(self: &Arc<Self>, queue: &str, user_id: &str) -> Membership {
        let room = self.room(queue);
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (kick, kicks) = mpsc::channel(1);
        let feed = room.feed.subscribe();
        room.members.lock().unwrap().insert(id, Member { user_id: user_id.to_string(), kick });
        self.local.fetch_add(1, Ordering::Relaxed);
        Membership { rooms: self.clone(), room, id, feed, kicks }
    }

    /// Hands a frame to every local socket of the room; how many got it.
    pub fn deliver(&self, queue: &str, frame: Utf8Bytes) -> usize {
        let room = self.rooms.lock().unwrap().get(queue).cloned();
        room.map_or(0, |r| r.feed.send(frame).unwrap_or(0))
    }

    /// The count a `SERVERSTATUS_RESPONSE` gives: `fresh` (read from Valkey just
    /// now) when there is one, else the last one read, else this instance's own
    /// sessions in the room.
    pub fn client_count(&self, queue: &str, fresh: Option<u64>) -> u64 {
        let room = self.room(queue);
        match fresh {
            Some(n) => {
                room.last_count.store(n.saturating_add(1), Ordering::Relaxed);
                n
            }
            None => match room.last_count.load(Ordering::Relaxed) {
                0 => room.members.lock().unwrap().len() as u64,
                n => n - 1,
            },
        }
    }

    /// Notes that someone joined (`true`) or left this instance's share of the room;
    /// told to the room at the next presence tick ([`Rooms::take_changes`]).
    pub fn note(&self, queue: &str, joined: bool, person: Person) {
        self.room(queue).pending.lock().unwrap().push((joined, person));
    }

    /// Per room, the changes noted since the last call: who joined and who left, each
    /// person once, by their last change (a join then a leave in one tick is a leave).
    pub fn take_changes(&self) -> Vec<(String, Vec<Person>, Vec<Person>)> {
        let rooms: Vec<(String, Arc<Room>)> =
            self.rooms.lock().unwrap().iter().map(|(q, r)| (q.clone(), r.clone())).collect();
        let mut out = Vec::new();
        for (queue, room) in rooms {
            let changes = std::mem::take(&mut *room.pending.lock().unwrap());
            if changes.is_empty() {
                continue;
            }
            let mut last: HashMap<&str, usize> = HashMap::new();
            for (i, (_, p)) in changes.iter().enumerate() {
                last.insert(p.user_id.as_str(), i);
            }
            let (mut joined, mut left) = (Vec::new(), Vec::new());
            for (i, (j, p)) in changes.iter().enumerate() {
                if last[p.user_id.as_str()] == i {
                    if *j {
                        joined.push(p.clone())
                    } else {
                        left.push(p.clone())
                    }
                }
            }
            out.push((queue, joined, left));
        }
        out
    }

    /// Sessions open on this instance, every room together.
    pub fn local_sessions(&self) -> usize {
        self.local.load(Ordering::Relaxed)
    }

    /// Every room this instance has served.
    pub fn queues(&self) -> Vec<String> {
        self.rooms.lock().unwrap().keys().cloned().collect()
    }

    /// The local users of each room that has any (each user once).
    pub fn users(&self) -> Vec<(String, Vec<String>)> {
        let rooms: Vec<(String, Arc<Room>)> =
            self.rooms.lock().unwrap().iter().map(|(q, r)| (q.clone(), r.clone())).collect();
        rooms
            .into_iter()
            .filter_map(|(q, r)| {
                let users: BTreeSet<String> = r.members.lock().unwrap().values().map(|m| m.user_id.clone()).collect();
                (!users.is_empty()).then(|| (q, users.into_iter().collect()))
            })
            .collect()
    }

    /// Closes the user's local sessions in the room; how many.
    pub fn kick(&self, queue: &str, user_id: &str, why: Kick) -> usize {
        let Some(room) = self.rooms.lock().unwrap().get(queue).cloned() else { return 0 };
        let members = room.members.lock().unwrap();
        members.values().filter(|m| m.user_id == user_id).filter(|m| m.kick.try_send(why).is_ok()).count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn members_hear_their_room_only_and_leave_on_drop() {
        let rooms = Arc::new(Rooms::default());
        let mut a = rooms.join("q1", "u-1");
        let mut b = rooms.join("q2", "u-2");
        assert_eq!(rooms.local_sessions(), 2);
        assert_eq!(rooms.deliver("q1", Utf8Bytes::from("hello")), 1);
        assert_eq!(a.feed.recv().await.unwrap().as_str(), "hello");
        assert!(b.feed.try_recv().is_err());
        assert_eq!(rooms.deliver("nowhere", Utf8Bytes::from("x")), 0);
        let mut users = rooms.users();
        users.sort();
        assert_eq!(users, vec![("q1".into(), vec!["u-1".into()]), ("q2".into(), vec!["u-2".into()])]);
        assert_eq!(rooms.kick("q1", "u-1", Kick::LeaseLost), 1);
        assert_eq!(a.kicks.recv().await, Some(Kick::LeaseLost));
        drop(a);
        assert_eq!(rooms.local_sessions(), 1);
        assert_eq!(rooms.users(), vec![("q2".into(), vec!["u-2".into()])]);
        let mut queues = rooms.queues();
        queues.sort();
        assert_eq!(queues, vec!["q1".to_string(), "q2".to_string()]);
    }

    #[test]
    fn changes_are_taken_once_each_person_by_their_last_change() {
        let rooms = Rooms::default();
        let p = |id: &str| Person { user_id: id.into(), nickname: id.into() };
        rooms.note("q", true, p("a"));
        rooms.note("q", true, p("b"));
        rooms.note("q", false, p("b"));
        rooms.note("q", false, p("c"));
        rooms.note("q", true, p("c"));
        assert_eq!(rooms.take_changes(), vec![("q".into(), vec![p("a"), p("c")], vec![p("b")])]);
        assert_eq!(rooms.take_changes(), vec![], "taken once");
    }

    #[test]
    fn the_status_count_falls_back_to_the_last_known_then_the_local_one() {
        let rooms = Arc::new(Rooms::default());
        let _a = rooms.join("q", "u-1");
        let _b = rooms.join("q", "u-2");
        assert_eq!(rooms.client_count("q", None), 2);
        assert_eq!(rooms.client_count("q", Some(0)), 0);
        assert_eq!(rooms.client_count("q", None), 0);
        assert_eq!(rooms.client_count("q", Some(42)), 42);
        assert_eq!(rooms.client_count("q", None), 42);
    }
}
