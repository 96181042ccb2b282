//! The whole system on loopback for end-to-end tests: a valkey-server child (module or
//! Lua library) and the real `chat-server`, `queue-manager` and `queue-api` binaries from
//! target/release, each on a free port and waited for until its /healthz says ready.

pub mod stores;

use serde_json::Value;
use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use testkit::{Backend, ValkeyServer};

/// How long a process may take to come up, or a condition to come true.
pub const WAIT: Duration = Duration::from_secs(30);

pub const ADMIN_TOKEN: &str = "e2e-admin";

/// A test swarm's crowd: short stays, a message each, a tenth abandoning, claim races
/// and replays, a fifth polling instead of streaming.
pub const CROWD: [&str; 16] = [
    "--stay-secs",
    "0.3",
    "--messages",
    "1",
    "--abandon",
    "0.1",
    "--abandon-within-secs",
    "1",
    "--race",
    "0.2",
    "--replay",
    "1",
    "--polling",
    "0.2",
    "--poll-secs",
    "0.3",
];

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

/// A running service binary; killed when dropped.
pub struct Service {
    child: Child,
    pub port: u16,
    name: String,
    args: Vec<String>,
    ready: fn(&Value) -> bool,
}

impl Service {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Kills the process (SIGKILL) and starts it again on the same port.
    pub async fn kill_and_restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = start(&self.name, &self.args, self.port);
        assert!(self.wait_ready().await, "{} did not come back on port {}", self.name, self.port);
    }

    /// Waits until /healthz satisfies `ready`; false if the process exits or WAIT passes.
    async fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline && self.child.try_wait().unwrap().is_none() {
            if healthz(self.port).await.is_some_and(|h| (self.ready)(&h)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }
}

fn start(name: &str, args: &[String], port: u16) -> Child {
    Command::new(testkit::release_binary(name))
        .args(args)
        .args(["--listen", &format!("127.0.0.1:{port}")])
        .env("RUST_LOG", "warn")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start {name}: {e}"))
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
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

async fn healthz(port: u16) -> Option<Value> {
    let resp = reqwest::get(format!("http://127.0.0.1:{port}/healthz")).await.ok()?;
    resp.json().await.ok()
}

/// Starts `name` with `args` plus `--listen`, retrying on another port if the chosen one
/// was taken meanwhile, until `ready` accepts its /healthz.
async fn spawn(name: &str, args: &[String], ready: fn(&Value) -> bool) -> Service {
    for _ in 0..5 {
        let port = testkit::free_port();
        let child = start(name, args, port);
        let mut s = Service { child, port, name: name.to_string(), args: args.to_vec(), ready };
        if s.wait_ready().await {
            return s;
        }
    }
    panic!("{name} did not come up");
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
        let stores::Services { api, chat, manager } =
            stores::Services::start(&flags, std::slice::from_ref(&queue), &opts).await;
        Stack { api, chat, manager, valkey, queue }
    }

    /// `QUEUE.INFO` of the stack's queue: its numeric fields by name.
    pub fn info(&self) -> HashMap<String, i64> {
        let v = self.valkey.client().call("QUEUE.INFO", &[&self.queue]).expect("QUEUE.INFO");
        testkit::fields(&v).iter().filter_map(|(k, v)| testkit::as_int(v).map(|n| (k.clone(), n))).collect()
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

/// The `queue-cli` binary.
pub fn client_binary() -> PathBuf {
    testkit::release_binary("queue-cli")
}

/// Defines each named `async fn name(backend: Backend)` once per backend, as
/// `module::name` and `lua::name`, on a two-thread runtime.
#[macro_export]
macro_rules! e2e_tests {
    ($($name:ident),* $(,)?) => {
        mod module {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(testkit::Backend::Module).await } )*
        }
        mod lua {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name(testkit::Backend::Lua).await } )*
        }
    };
}

/// The lines a child process prints, read on a thread so a test can wait for them with
/// a time limit.
pub struct Lines {
    rx: tokio::sync::mpsc::UnboundedReceiver<String>,
    pub seen: Vec<String>,
}

impl Lines {
    pub fn read(from: impl std::io::Read + Send + 'static) -> Lines {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        std::thread::spawn(move || {
            use std::io::BufRead;
            for line in std::io::BufReader::new(from).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Lines { rx, seen: Vec::new() }
    }

    /// The next line satisfying `f` (earlier ones are kept in `seen`); panics after [`WAIT`].
    pub async fn expect(&mut self, what: &str, f: impl Fn(&str) -> bool) -> String {
        let deadline = Instant::now() + WAIT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match tokio::time::timeout(left, self.rx.recv()).await {
                Ok(Some(line)) => {
                    self.seen.push(line.clone());
                    if f(&line) {
                        return line;
                    }
                }
                Ok(None) | Err(_) => panic!("no line {what}; saw {:#?}", self.seen),
            }
        }
    }
}

/// Starts `program` with stdin piped (for typing, see [`type_line`]) and stdout read as
/// [`Lines`]; the process is killed when the child is dropped.
pub fn start_piped(program: impl AsRef<std::ffi::OsStr>, args: &[String]) -> (tokio::process::Child, Lines) {
    let program = program.as_ref();
    let mut child = tokio::process::Command::new(program)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("start {program:?} (scripts/install-deps.sh installs what is missing): {e}"));
    let stdout = child.stdout.take().unwrap().into_owned_fd().expect("a pipe");
    (child, Lines::read(std::fs::File::from(stdout)))
}

/// Writes `line` and a newline to the child's stdin.
pub async fn type_line(child: &mut tokio::process::Child, line: &str) {
    use tokio::io::AsyncWriteExt;
    let stdin = child.stdin.as_mut().expect("stdin is piped");
    stdin.write_all(format!("{line}\n").as_bytes()).await.expect("the child reads its stdin");
}

/// Waits for the child to exit and checks it succeeded.
pub async fn exits_cleanly(child: &mut tokio::process::Child, out: &Lines) {
    let status = tokio::time::timeout(WAIT, child.wait()).await.expect("the process exits").unwrap();
    assert!(status.success(), "{status}; it printed {:#?}", out.seen);
}

impl Stack {
    /// `queue-cli join --nickname <nickname>` against this stack, plus `extra` options.
    pub fn join(&self, nickname: &str, extra: &[&str]) -> (tokio::process::Child, Lines) {
        let mut args: Vec<String> =
            ["join", "--api", &self.api.url(), "--chat", &self.chat.url(), "--nickname", nickname]
                .map(str::to_string)
                .into();
        args.extend(extra.iter().map(|s| s.to_string()));
        start_piped(client_binary(), &args)
    }
}
