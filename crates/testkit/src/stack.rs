//! The whole system on loopback: a valkey-server child (module or Lua library) and
//! the real `chat-server`, `queue-manager` and `queue-api` binaries from
//! target/release ([`Service`]), each on a free port and waited for until its
//! `/healthz` says ready; or the three services over any store given as the common
//! Valkey flags every service takes (a cluster, a TLS-only server).

use crate::process::{Service, WAIT};
use crate::{Backend, ValkeyServer};
use std::collections::HashMap;
use std::time::{Duration, Instant};

/// The back office's token in every stack.
pub const ADMIN_TOKEN: &str = "e2e-admin";

/// Queue settings and service timings for a stack.
#[derive(Clone, Debug)]
pub struct StackOptions {
    pub soft_cap: u64,
    pub ticket_ttl_ms: u64,
    pub abandon_after_ms: u64,
    pub manager_tick_ms: u64,
    pub push_tick_ms: u64,
}

impl Default for StackOptions {
    fn default() -> Self {
        StackOptions {
            soft_cap: 3,
            ticket_ttl_ms: 10_000,
            abandon_after_ms: 10_000,
            manager_tick_ms: 100,
            push_tick_ms: 1000,
        }
    }
}

/// queue-api, queue-manager and chat-server started with the same Valkey flags.
pub struct Services {
    pub api: Service,
    pub chat: Service,
    pub manager: Service,
}

impl Services {
    /// Starts the three services with `valkey` (e.g. `--valkey-url a,b,c --cluster`),
    /// the manager serving `queues`, and waits until each is ready.
    pub async fn start(valkey: &[String], queues: &[String], opts: &StackOptions) -> Services {
        Services::start_each([valkey.to_vec(), valkey.to_vec(), valkey.to_vec()], queues, opts).await
    }

    /// Starts the services each with its own Valkey flags: chat-server's,
    /// queue-manager's and queue-api's, in that order.
    pub async fn start_each(valkey: [Vec<String>; 3], queues: &[String], opts: &StackOptions) -> Services {
        let [chat_flags, manager_flags, api_flags] = valkey;
        let s = |v: &str| v.to_string();
        let chat = Service::start("chat-server", &[chat_flags, vec![s("--queue"), queues[0].clone()]].concat(), |h| {
            h["valkey"] == "up" && h["room"] == "up"
        })
        .await;
        let manager_args =
            [manager_flags, vec![s("--queues"), queues.join(","), s("--tick"), format!("{}ms", opts.manager_tick_ms)]]
                .concat();
        let manager = Service::start("queue-manager", &manager_args, |h| h["leader"] == true).await;
        let api_args = [
            api_flags,
            vec![
                s("--chat-url"),
                chat.url(),
                s("--admin-token"),
                s(ADMIN_TOKEN),
                s("--trusted-proxies"),
                s("127.0.0.0/8"),
                s("--push-tick"),
                format!("{}ms", opts.push_tick_ms),
            ],
        ]
        .concat();
        let api = Service::start("queue-api", &api_args, |h| h["valkey"] == "up").await;
        Services { api, chat, manager }
    }

    /// Whether every service process is still running.
    pub fn all_running(&mut self) -> bool {
        [&mut self.api, &mut self.chat, &mut self.manager].iter_mut().all(|s| s.proc.alive())
    }
}

/// The whole system. Fields drop in order: services first, Valkey last.
pub struct Stack {
    pub api: Service,
    pub chat: Service,
    pub manager: Service,
    pub valkey: ValkeyServer,
    pub queue: String,
}

impl Stack {
    pub async fn start(backend: Backend, opts: StackOptions) -> Stack {
        let valkey = ValkeyServer::start(backend);
        let queue = "default".to_string();
        let values = [opts.soft_cap.to_string(), opts.ticket_ttl_ms.to_string(), opts.abandon_after_ms.to_string()];
        let mut c = valkey.client();
        let set = ["soft_cap", &values[0], "ticket_ttl", &values[1], "abandon_after", &values[2]];
        c.call("QUEUE.CONFIG", &[&[queue.as_str(), "SET"][..], &set[..]].concat()).expect("configure the queue");
        let flags = ["--valkey-url".to_string(), valkey.url()];
        let Services { api, chat, manager } = Services::start(&flags, std::slice::from_ref(&queue), &opts).await;
        Stack { api, chat, manager, valkey, queue }
    }

    /// `QUEUE.INFO` of the stack's queue: its numeric fields by name.
    pub fn info(&self) -> HashMap<String, i64> {
        let v = self.valkey.client().call("QUEUE.INFO", &[&self.queue]).expect("QUEUE.INFO");
        crate::fields(&v).iter().filter_map(|(k, v)| crate::as_int(v).map(|n| (k.clone(), n))).collect()
    }

    /// Runs a queue command (module name; the Lua twin on the Lua backend).
    pub fn call(&self, name: &str, args: &[&str]) -> redis::Value {
        self.valkey.client().call(name, args).unwrap_or_else(|e| panic!("{name} {args:?}: {e}"))
    }

    /// Polls `f` until true, or panics after [`WAIT`] naming `what`.
    pub async fn eventually(&self, what: &str, mut f: impl FnMut(&Stack) -> bool) {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline {
            if f(self) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        panic!("timed out waiting for {what}; queue info {:?}", self.info());
    }
}
