//! What the end-to-end tests add to testkit's stack (the system as child processes,
//! [`Stack`]): the `queue-cli` client as a child whose lines a test waits for, and
//! the swarm's audits ([`stores`]).

pub mod stores;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Instant;

pub use testkit::process::{Service, WAIT};
pub use testkit::stack::{Stack, StackOptions, ADMIN_TOKEN};

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

/// Runs the futures at once (on the calling task), their results in order: join_all
/// without an extra dependency.
pub async fn join_all<F: std::future::Future>(fs: impl Iterator<Item = F>) -> Vec<F::Output> {
    let mut pinned: Vec<std::pin::Pin<Box<F>>> = fs.map(Box::pin).collect();
    let mut results: Vec<Option<F::Output>> = pinned.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (i, f) in pinned.iter_mut().enumerate() {
            if results[i].is_none() {
                match f.as_mut().poll(cx) {
                    std::task::Poll::Ready(v) => results[i] = Some(v),
                    std::task::Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            std::task::Poll::Pending
        } else {
            std::task::Poll::Ready(())
        }
    })
    .await;
    results.into_iter().map(Option::unwrap).collect()
}

/// The `queue-cli` binary.
pub fn client_binary() -> PathBuf {
    testkit::release_binary("queue-cli")
}

/// Defines each named `async fn name(backend: Backend)` once per backend, as
/// `module::name` and `lua::name`, on a two-thread runtime (testkit's
/// `backend_tests!`).
#[macro_export]
macro_rules! e2e_tests {
    ($($name:ident),* $(,)?) => {
        testkit::backend_tests!(async $($name),*);
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

/// `queue-cli join --nickname <nickname>` against `stack`, plus `extra` options.
pub fn join(stack: &Stack, nickname: &str, extra: &[&str]) -> (tokio::process::Child, Lines) {
    let mut args: Vec<String> =
        ["join", "--api", &stack.api.url(), "--chat", &stack.chat.url(), "--nickname", nickname]
            .map(str::to_string)
            .into();
    args.extend(extra.iter().map(|s| s.to_string()));
    start_piped(client_binary(), &args)
}
