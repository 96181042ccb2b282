//! The gate's test bench: the example upstream app, the gate, and a real nginx or Caddy
//! in front, each a child process on a free loopback port with its configuration and
//! logs in a scratch directory (kept, and its path printed, when the test fails).

use e2e::stores::Services;
use e2e::{StackOptions, WAIT};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A scratch directory, removed when dropped unless the thread is panicking.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
        let dir = std::env::temp_dir().join(format!("gate-{tag}-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("scratch directory");
        Scratch(dir)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept the logs and configurations in {}", self.0.display());
        } else {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// A child process; killed when dropped.
pub struct Proc {
    pub port: u16,
    child: Child,
}

impl Proc {
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn running(&mut self) -> bool {
        self.child.try_wait().ok().flatten().is_none()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `program args` with its output in `dir/<name>.log`, then waits until `url`
/// answers 200 (or 3xx: some fronts redirect); retries on another port when the
/// chosen one was taken meanwhile. `args` gets the port.
pub async fn start(name: &str, dir: &Scratch, program: &Path, args: impl Fn(u16) -> Vec<String>, path: &str) -> Proc {
    let mut last = String::new();
    for _ in 0..5 {
        let port = testkit::free_port();
        let log = std::fs::File::create(dir.path(&format!("{name}.log"))).unwrap();
        let child = Command::new(program)
            .args(args(port))
            .env("RUST_LOG", "warn")
            // Caddy keeps its autosaved configuration and data under these.
            .env("XDG_CONFIG_HOME", &dir.0)
            .env("XDG_DATA_HOME", &dir.0)
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .unwrap_or_else(|e| panic!("start {} (scripts/install-deps.sh installs it): {e}", program.display()));
        let mut p = Proc { port, child };
        if wait_answers(&mut p, path).await {
            return p;
        }
        last = std::fs::read_to_string(dir.path(&format!("{name}.log"))).unwrap_or_default();
    }
    panic!("{name} did not come up; its log:\n{last}");
}

async fn wait_answers(p: &mut Proc, path: &str) -> bool {
    let http = queue_cli::gate::http_client();
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline && p.running() {
        if let Ok(r) = http.get(format!("{}{path}", p.url())).timeout(Duration::from_secs(2)).send().await {
            if r.status().is_success() {
                return true;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    false
}

/// The example upstream app (tests/gate/upstream.rs), logging to `dir/upstream.jsonl`.
pub async fn upstream(dir: &Scratch) -> Proc {
    let bin = testkit::release_binary("examples/gate-upstream");
    let log = dir.path("upstream.jsonl").display().to_string();
    start(
        "upstream",
        dir,
        &bin,
        |port| vec!["--listen".into(), format!("127.0.0.1:{port}"), "--log".into(), log.clone()],
        "/healthz",
    )
    .await
}

/// Where the gate sits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Front {
    /// The gate's own reverse proxy (--upstream).
    Proxy,
    /// nginx `auth_request` in front, the gate in forward-auth mode.
    Nginx,
    /// Caddy `forward_auth` in front, the gate in forward-auth mode.
    Caddy,
}

/// The gate's settings in a test.
#[derive(Debug, Clone)]
pub struct GateOptions {
    /// (path prefix, queue) routes.
    pub routes: Vec<(String, String)>,
    pub tick_ms: u64,
    pub idle_s: u64,
    pub token_ttl_s: u64,
    /// More flags for the gate (e.g. --bypass-network). Straight through is off
    /// (every test visitor goes through the room) unless these name
    /// `--straight-through`.
    pub extra: Vec<String>,
}

/// A written Ed25519 key (the gate's own `--write-key`).
pub fn write_key(dir: &Scratch) -> PathBuf {
    let key = dir.path("gate-key.pem");
    let out = Command::new(testkit::release_binary("queue-gate")).arg("--write-key").arg(&key).output().unwrap();
    assert!(out.status.success(), "queue-gate --write-key: {}", String::from_utf8_lossy(&out.stderr));
    key
}

/// The gate: proxy mode in front of `app` when `front` is [`Front::Proxy`], else
/// forward-auth mode (behind a proxy of ours, whose X-Forwarded-For it trusts).
pub async fn gate(dir: &Scratch, valkey: &[String], api: &str, app: &Proc, front: Front, o: &GateOptions) -> Proc {
    let key = write_key(dir);
    let mut args: Vec<String> = valkey.to_vec();
    args.extend(["--queue-api".into(), api.to_string(), "--key".into(), key.display().to_string()]);
    args.extend(["--tick".into(), format!("{}ms", o.tick_ms), "--idle".into(), format!("{}s", o.idle_s)]);
    args.extend(["--token-ttl".into(), format!("{}s", o.token_ttl_s)]);
    for (path, queue) in &o.routes {
        args.extend(["--route".into(), format!("{path}={queue}")]);
    }
    if !o.extra.iter().any(|a| a == "--straight-through") {
        args.extend(["--straight-through".into(), "false".into()]);
    }
    args.extend(o.extra.iter().cloned());
    match front {
        Front::Proxy => args.extend(["--upstream".into(), app.url()]),
        Front::Nginx | Front::Caddy => args.push("--trust-proxy".into()),
    }
    let bin = testkit::release_binary("queue-gate");
    start(
        "gate",
        dir,
        &bin,
        |port| [args.clone(), vec!["--listen".into(), format!("127.0.0.1:{port}")]].concat(),
        "/gate/healthz",
    )
    .await
}

/// A template of tests/gate with its {{NAME}} placeholders filled in.
fn render(template: &str, values: &[(&str, String)]) -> String {
    let path = testkit::workspace_root().join("tests/gate").join(template);
    let mut text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    for (k, v) in values {
        text = text.replace(&format!("{{{{{k}}}}}"), v);
    }
    assert!(!text.contains("{{"), "{template}: a placeholder was left unfilled");
    text
}

/// nginx (`auth_request`) or Caddy (`forward_auth`) in front of `app`, asking `gate`.
pub async fn front(dir: &Scratch, front: Front, gate: &Proc, app: &Proc) -> Proc {
    let d = dir.0.display().to_string();
    match front {
        Front::Proxy => panic!("the proxy mode has no front"),
        Front::Nginx => {
            start(
                "nginx",
                dir,
                Path::new(&which("nginx")),
                |port| {
                    let conf = render(
                        "nginx.conf",
                        &[
                            ("DIR", d.clone()),
                            ("LISTEN", format!("127.0.0.1:{port}")),
                            ("GATE", gate.addr()),
                            ("APP", app.addr()),
                        ],
                    );
                    let file = dir.path("nginx.conf");
                    std::fs::write(&file, conf).unwrap();
                    // -e: errors before the configuration's error_log is read go here too.
                    vec![
                        "-c".into(),
                        file.display().to_string(),
                        "-p".into(),
                        d.clone(),
                        "-e".into(),
                        format!("{d}/nginx-error.log"),
                    ]
                },
                "/.well-known/jwks.json",
            )
            .await
        }
        Front::Caddy => {
            start(
                "caddy",
                dir,
                Path::new(&which("caddy")),
                |port| {
                    let conf = render(
                        "Caddyfile",
                        &[("LISTEN", format!("127.0.0.1:{port}")), ("GATE", gate.addr()), ("APP", app.addr())],
                    );
                    let file = dir.path("Caddyfile");
                    std::fs::write(&file, conf).unwrap();
                    vec![
                        "run".into(),
                        "--config".into(),
                        file.display().to_string(),
                        "--adapter".into(),
                        "caddyfile".into(),
                    ]
                },
                "/.well-known/jwks.json",
            )
            .await
        }
    }
}

/// `name` on PATH or in /usr/sbin (nginx), else a clear failure.
pub fn which(name: &str) -> String {
    for dir in std::env::var("PATH").unwrap_or_default().split(':').chain(["/usr/sbin", "/usr/bin"]) {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p.display().to_string();
        }
    }
    panic!("{name} is not installed: run scripts/install-deps.sh");
}

/// Everything a gate test runs besides Valkey: queue-api, queue-manager (and
/// chat-server, which Services always starts), the upstream app, the gate and its front.
pub struct GateStack {
    pub front: Option<Proc>,
    pub gate: Proc,
    /// The app (kept running; its log is read from `dir`).
    _upstream: Proc,
    pub services: Services,
    pub dir: Scratch,
}

impl GateStack {
    /// `valkey`: the Valkey flags every service takes; `queues`: the manager's queues.
    pub async fn start(
        tag: &str,
        kind: Front,
        valkey: &[String],
        queues: &[String],
        opts: &StackOptions,
        gate_opts: &GateOptions,
    ) -> GateStack {
        let dir = Scratch::new(tag);
        // queue-api sees every user through the gate's room proxy: no per-address limit
        // in the way of the crowd.
        let api_flags =
            [valkey.to_vec(), ["--rate-limit", "100000", "--rate-burst", "100000"].map(String::from).to_vec()].concat();
        let services = Services::start_each([valkey.to_vec(), valkey.to_vec(), api_flags], queues, opts).await;
        let upstream = upstream(&dir).await;
        let gate = gate(&dir, valkey, &services.api.url(), &upstream, kind, gate_opts).await;
        let front = match kind {
            Front::Proxy => None,
            k => Some(front(&dir, k, &gate, &upstream).await),
        };
        GateStack { front, gate, _upstream: upstream, services, dir }
    }

    /// Where people go: the front proxy, or the gate itself in proxy mode.
    pub fn entrance(&self) -> String {
        self.front.as_ref().unwrap_or(&self.gate).url()
    }

    /// The upstream's log lines once it stopped growing (its writer flushes when idle).
    pub async fn upstream_log(&self) -> Vec<serde_json::Value> {
        let path = self.dir.path("upstream.jsonl");
        let mut last = 0;
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let len = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
            if len == last {
                break;
            }
            last = len;
        }
        let text = std::fs::read_to_string(&path).unwrap_or_default();
        text.lines()
            .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("upstream log line {l:?}: {e}")))
            .collect()
    }
}
