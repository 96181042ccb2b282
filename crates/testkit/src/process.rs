//! Programs as child processes, the one way every harness here runs them: a
//! restartable command line, its output appended to a log file, signals by the
//! shell's own `kill`, stopped on drop; and a service of the stack on a free
//! loopback port, waited for until its `/healthz` says ready, its log printed when
//! the test that ran it fails.

use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long a process may take to come up, or a condition to come true.
pub const WAIT: Duration = Duration::from_secs(30);

/// One child process, restartable with the same command line; stdout and stderr are
/// appended to its log. Killed on drop (resumed first, should it be stopped).
pub struct Proc {
    pub name: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    pub log: PathBuf,
    env: Vec<(String, String)>,
    child: Option<Child>,
}

/// Sends `sig` (`TERM`, `STOP`, `CONT`, ...) to process `pid`; whether it was delivered.
pub fn send_signal(pid: u32, sig: &str) -> bool {
    // The shell's own kill: no procps needed.
    Command::new("sh").arg("-c").arg(format!("kill -{sig} {pid}")).status().is_ok_and(|s| s.success())
}

impl Proc {
    /// `program` with `args`, logging to `<dir>/<name>.log`; not started yet.
    pub fn new(name: &str, program: impl Into<PathBuf>, args: Vec<String>, dir: &Path) -> Proc {
        Proc {
            name: name.into(),
            program: program.into(),
            args,
            log: dir.join(format!("{name}.log")),
            env: Vec::new(),
            child: None,
        }
    }

    /// An environment variable for every start.
    pub fn env(mut self, key: &str, value: &str) -> Proc {
        self.env.push((key.into(), value.into()));
        self
    }

    /// Starts the process (again, after [`Proc::kill9`]).
    pub fn spawn(&mut self) -> Result<(), String> {
        let open = || std::fs::OpenOptions::new().create(true).append(true).open(&self.log);
        let (out, err) = (open(), open());
        let (out, err) = (out.map_err(|e| e.to_string())?, err.map_err(|e| e.to_string())?);
        let child = Command::new(&self.program)
            .args(&self.args)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .spawn()
            .map_err(|e| format!("starting {} ({}): {e}", self.name, self.program.display()))?;
        self.child = Some(child);
        Ok(())
    }

    /// Kills the process abruptly (SIGKILL), as a crash would.
    pub fn kill9(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Sends `sig` (`TERM`, `STOP`, `CONT`, ...); whether it was delivered.
    pub fn signal(&self, sig: &str) -> bool {
        self.pid().is_some_and(|pid| send_signal(pid, sig))
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// Whether the process has exited by itself.
    pub fn exited(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_some())
    }

    /// Whether the process runs (started and not exited).
    pub fn alive(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.try_wait().ok().flatten().is_none())
    }

    /// Waits up to `deadline` for the process to exit; its status.
    pub fn wait_exit(&mut self, deadline: Duration) -> Option<ExitStatus> {
        let child = self.child.as_mut()?;
        crate::wait_for(deadline, || child.try_wait().ok().flatten())
    }

    /// What it has printed so far.
    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.signal("CONT");
        self.kill9();
    }
}

/// Whether a service's `/healthz` says it is ready.
pub type Ready = fn(&Value) -> bool;

/// A service of the stack as a child process on a loopback port. Its log lives in a
/// temporary directory, kept and printed when the thread that drops it is panicking
/// (a failing test).
pub struct Service {
    pub proc: Proc,
    pub port: u16,
    ready: Ready,
    dir: Option<tempfile::TempDir>,
}

impl Service {
    /// Starts the workspace binary `name` (target/release) with `args` plus `--listen`
    /// on a free port and `RUST_LOG=warn`, until `ready` accepts its `/healthz`.
    pub async fn start(name: &str, args: &[String], ready: Ready) -> Service {
        Service::start_with(name, args, &[("RUST_LOG", "warn")], ready).await
    }

    /// [`Service::start`] with these environment variables.
    pub async fn start_with(name: &str, args: &[String], env: &[(&str, &str)], ready: Ready) -> Service {
        let dir = tempfile::Builder::new().prefix(&format!("{name}-")).tempdir().expect("tempdir");
        let program = crate::release_binary(name);
        match Service::start_in(dir.path(), name, program, args, env, ready).await {
            Ok(mut s) => {
                s.dir = Some(dir);
                s
            }
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts `program` as `name`, logging in `dir`, with `args` plus `--listen` on a
    /// free port (another one if the chosen port was taken meanwhile), until `ready`
    /// accepts its `/healthz` ([`WAIT`] at most).
    pub async fn start_in(
        dir: &Path,
        name: &str,
        program: impl Into<PathBuf>,
        args: &[String],
        env: &[(&str, &str)],
        ready: Ready,
    ) -> Result<Service, String> {
        let program = program.into();
        let mut last = String::new();
        for _ in 0..5 {
            let port = crate::free_port();
            let mut all = args.to_vec();
            all.extend(["--listen".to_string(), format!("127.0.0.1:{port}")]);
            let mut proc_ = Proc::new(name, program.clone(), all, dir);
            for (k, v) in env {
                proc_ = proc_.env(k, v);
            }
            proc_.spawn()?;
            let mut s = Service { proc: proc_, port, ready, dir: None };
            if s.wait_ready().await {
                return Ok(s);
            }
            last = s.proc.output();
        }
        Err(format!("{name} did not come up; its log:\n{last}"))
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn ws(&self) -> String {
        format!("ws://127.0.0.1:{}", self.port)
    }

    /// Its `/healthz`, when it answers 200 with JSON.
    pub async fn healthz(&self) -> Option<Value> {
        let (code, body) = http_get(self.port, "/healthz").await?;
        if code != 200 {
            return None;
        }
        serde_json::from_str(&body).ok()
    }

    /// Waits until `/healthz` satisfies `ready`; false if the process exits or
    /// [`WAIT`] passes.
    pub async fn wait_ready(&mut self) -> bool {
        let deadline = Instant::now() + WAIT;
        while Instant::now() < deadline && self.proc.alive() {
            if self.healthz().await.is_some_and(|h| (self.ready)(&h)) {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        false
    }

    /// Kills the process (SIGKILL) and starts it again on the same port.
    pub async fn kill_and_restart(&mut self) {
        self.proc.kill9();
        self.proc.spawn().unwrap_or_else(|e| panic!("{e}"));
        assert!(self.wait_ready().await, "{} did not come back on port {}", self.proc.name, self.port);
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        self.proc.kill9();
        if std::thread::panicking() {
            if let Some(dir) = self.dir.take() {
                let kept = dir.keep();
                eprintln!("--- {} log (kept in {}):\n{}", self.proc.name, kept.display(), self.proc.output());
            }
        }
    }
}

/// GET `path` over a fresh loopback connection to `port`: the status code and body
/// (5 s at most).
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let exchange = async {
        let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port)).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        let text = String::from_utf8(raw).ok()?;
        let (head, body) = text.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        let chunked = head.lines().any(|l| l.to_ascii_lowercase().starts_with("transfer-encoding: chunked"));
        Some((code, if chunked { dechunk(body.as_bytes())? } else { body.to_string() }))
    };
    tokio::time::timeout(Duration::from_secs(5), exchange).await.ok().flatten()
}

/// A chunked body's data (each chunk's size line read by `httparse`); None if the
/// body is cut short or not chunked.
fn dechunk(mut body: &[u8]) -> Option<String> {
    let mut out = Vec::new();
    loop {
        let httparse::Status::Complete((size_line, n)) = httparse::parse_chunk_size(body).ok()? else {
            return None;
        };
        if n == 0 {
            return String::from_utf8(out).ok();
        }
        let data = &body[size_line..];
        let n = usize::try_from(n).ok()?;
        out.extend_from_slice(data.get(..n)?);
        body = data.get(n + 2..)?;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dechunk_joins_the_chunks() {
        assert_eq!(dechunk(b"5\r\nhello\r\n7;ext=1\r\n, world\r\n0\r\n\r\n").as_deref(), Some("hello, world"));
        assert_eq!(dechunk(b"A\r\n0123456789\r\n0\r\n\r\n").as_deref(), Some("0123456789"), "hex sizes");
        assert_eq!(dechunk(b"0\r\n\r\n").as_deref(), Some(""));
        assert_eq!(dechunk(b"5\r\nhel"), None, "cut short");
        assert_eq!(dechunk(b"5\r\nhello\r\n"), None, "no last chunk");
        assert_eq!(dechunk(b"zz\r\nhello\r\n0\r\n\r\n"), None, "not a size");
    }
}
