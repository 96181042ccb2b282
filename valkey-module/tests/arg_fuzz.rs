//! Argument fuzzer: generated argument vectors for every command of the module and of
//! the Lua library (called through FCALL/FCALL_RO as the services call it), against a
//! server holding queues with people waiting, ticket holders, live sessions, a
//! scheduled opening, settings and keys of the wrong type.
//!
//! Each vector mixes valid and invalid arities and arguments: names from the queues and
//! users that exist, names that could exist, names outside the allowed sets (empty,
//! 65+ characters, braces, spaces, binary bytes, invalid UTF-8, a megabyte), numbers
//! (negative, i64 limits and past them, floats, `nan`, `inf`, blanks, signs, hex),
//! option words in any case and unknown ones (HOLDER among them), every setting's
//! field with good and bad values (the text setting `entry` too), and for the library also wrong key counts, `FCALL_RO` of writing functions
//! and unknown functions. Vectors go out pipelined, each followed by `DEBUG DIGEST`
//! (the whole dataset's digest), so every reply is judged by the state before and
//! after it:
//!
//! - a refusal (an error reply) must leave the digest unchanged, and its text must
//!   start with one of the documented codes (no Lua runtime error, no "internal");
//! - the server must stay up: every batch ends with a PING, and a fresh connection
//!   must answer at the end.
//!
//! `ARG_FUZZ_VECTORS` (default 20,000) vectors per backend, `ARG_FUZZ_SEED` replays a
//! run (the seed is printed); `bash bench/arg-fuzz.sh` sends 1,000,000 per backend.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};
use testkit::{Backend, Rng, ValkeyServer};

#[test]
fn module_survives_generated_argument_vectors() {
    run(Backend::Module);
}

#[test]
fn lua_library_survives_generated_argument_vectors() {
    run(Backend::Lua);
}

/// Vectors sent between two PINGs (and one read of the replies).
const BATCH: u64 = 500;
/// Vectors between two fresh datasets (a multiple of BATCH).
const RESET_EVERY: u64 = 20_000;
/// The test clock every pre-populated queue reads (frozen: no ticket or lease expires
/// by itself, so a refusal has no time-driven housekeeping to do).
const NOW_MS: i64 = 1_800_000_000_000;

/// Error codes docs/commands.md documents ("Errors"); any refusal must start with one of them.
const CODES: [&str; 9] =
    ["ERR ", "WRONGTYPE ", "NOTICKET ", "EXPIRED ", "INSIDE ", "FULL ", "INVITE ", "NOCODE ", "WRONGLANE "];

// ---------------------------------------------------------------- RESP over TCP

#[derive(Debug)]
enum Reply {
    Status(String),
    Error(String),
    Int(#[allow(dead_code)] i64),
    Bulk(#[allow(dead_code)] Option<Vec<u8>>),
    Array(#[allow(dead_code)] Option<Vec<Reply>>),
}

struct Resp {
    r: BufReader<TcpStream>,
    w: BufWriter<TcpStream>,
}

impl Resp {
    fn connect(port: u16) -> Resp {
        let s = TcpStream::connect(("127.0.0.1", port)).expect("connect to valkey-server");
        s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
        s.set_nodelay(true).unwrap();
        Resp { r: BufReader::with_capacity(1 << 16, s.try_clone().unwrap()), w: BufWriter::with_capacity(1 << 16, s) }
    }

    fn send(&mut self, args: &[Vec<u8>]) -> std::io::Result<()> {
        write!(self.w, "*{}\r\n", args.len())?;
        for a in args {
            write!(self.w, "${}\r\n", a.len())?;
            self.w.write_all(a)?;
            self.w.write_all(b"\r\n")?;
        }
        Ok(())
    }

    fn line(&mut self) -> std::io::Result<Vec<u8>> {
        let mut l = Vec::new();
        self.r.read_until(b'\n', &mut l)?;
        if !l.ends_with(b"\r\n") {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        l.truncate(l.len() - 2);
        Ok(l)
    }

    fn read(&mut self) -> std::io::Result<Reply> {
        let l = self.line()?;
        let bad = || std::io::Error::new(std::io::ErrorKind::InvalidData, "bad RESP");
        let (kind, rest) = l.split_first().ok_or_else(bad)?;
        let text = String::from_utf8_lossy(rest).into_owned();
        let n = || text.parse::<i64>().map_err(|_| bad());
        Ok(match kind {
            b'+' => Reply::Status(text),
            b'-' => Reply::Error(text),
            b':' => Reply::Int(n()?),
            b'$' if n()? < 0 => Reply::Bulk(None),
            b'$' => {
                let mut b = vec![0; n()? as usize + 2];
                self.r.read_exact(&mut b)?;
                b.truncate(b.len() - 2);
                Reply::Bulk(Some(b))
            }
            b'*' if n()? < 0 => Reply::Array(None),
            b'*' => Reply::Array(Some((0..n()?).map(|_| self.read()).collect::<Result<_, _>>()?)),
            _ => return Err(bad()),
        })
    }

    /// One command, its reply (for the set-up).
    fn call(&mut self, args: &[&[u8]]) -> Reply {
        self.send(&args.iter().map(|a| a.to_vec()).collect::<Vec<_>>()).unwrap();
        self.w.flush().unwrap();
        self.read().unwrap()
    }
}

fn b(s: &str) -> Vec<u8> {
    s.as_bytes().to_vec()
}

// ---------------------------------------------------------------- the generator

/// Queues the set-up fills; `wt`, `wt2` and `wt3` (its watchers and change log) hold
/// keys of the wrong type.
const QUEUES: [&str; 8] = ["fz", "fz2", "open", "wt", "wt2", "wt3", "empty", "lanes"];
/// Valid names nobody set up: an accepted write makes them a queue (few, so that the
/// dataset, and the digest's cost, stay small).
const OTHER_QUEUES: [&str; 3] = ["n", "a.b:c-d_E9", "qqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqqq"];
const USERS: u64 = 10;
/// Valid userIds outside the u0.. pool.
const OTHER_USERS: [&str; 4] =
    ["z", "user@example.org", "a.b:c-d_e", "uuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuuu"];
const FIELDS: [&str; 12] = [
    "entry",
    "lanes",
    "soft_cap",
    "hard_cap",
    "rate",
    "burst",
    "batch_max",
    "ticket_ttl",
    "session_lease",
    "abandon_after",
    "pow_difficulty",
    "opens_at",
];

/// A command line, and the queue it names when that is valid and in the key position.
type Vector = (Vec<Vec<u8>>, Option<Vec<u8>>);

struct Gen {
    rng: Rng,
    tickets: Vec<String>,
}

impl Gen {
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.rng.below(items.len() as u64) as usize]
    }

    fn bytes(&mut self, n: usize, from: &[u8]) -> Vec<u8> {
        (0..n).map(|_| from[self.rng.below(from.len() as u64) as usize]).collect()
    }

    /// Something that is no valid name, number or word, or is one by chance.
    fn nasty(&mut self) -> Vec<u8> {
        match self.rng.below(20) {
            0 => Vec::new(),
            1 => b(self.pick(&[" ", "a b", "{fz}", "fz}", "{", "q\n", "\r\n", "\0", "*", "?", "é", "ü-user", "$"])),
            2 => {
                let n = self.rng.range(0, 80) as usize;
                (0..n).map(|_| self.rng.below(256) as u8).collect()
            }
            3 => vec![b'x'; self.pick(&["65", "100", "4096", "65"]).parse().unwrap()],
            // Rare: a megabyte (about one vector in 2,000).
            4 if self.rng.chance(1) => vec![b'u'; 1 << 20],
            4 => vec![0xff, 0xfe, b'a'],
            5 => b(self.pick(&[
                "\u{1F600}\u{1F600}\u{1F600}\u{1F600}\u{1F600}\u{1F600}\u{1F600}\u{1F600}x",
                "\u{7f}",
                "a\u{85}b",
                "\u{202e}rtl",
                "n\u{0}n",
            ])),
            6..=10 => self.number(),
            11 => b(self.pick(&[
                "MAX", "max", "Max", "SET", "set", "GET", "get", "PROOF", "proof", "LIMIT", "COUNT", "FROB", "NX",
                "--", "-", "HOLDER", "holder",
            ])),
            12 => b(self.pick(&FIELDS)),
            13 => b(self.pick(&["colour", "SOFT_CAP", "soft-cap", "soft_cap ", "layout", "*", ""])),
            14 => self.ticket(),
            15 => self.queue(),
            _ => self.user(),
        }
    }

    fn number(&mut self) -> Vec<u8> {
        match self.rng.below(6) {
            0 => b(self.pick(&[
                "nan", "NaN", "inf", "-inf", "+inf", "1e3", "1.5", "-0", "+5", " 5", "5 ", "0x10", "00", "007", "",
                "1_000", "١", "5\0", "--1", "0.0",
            ])),
            1 => b(self.pick(&[
                "9223372036854775807",
                "9223372036854775808",
                "-9223372036854775808",
                "-9223372036854775809",
                "99999999999999999999",
                "18446744073709551616",
                "100000",
                "100001",
                "10000000",
                "10000001",
                "86400000",
                "4294967296",
            ])),
            2 => (-self.rng.range(1, 1_000_000)).to_string().into_bytes(),
            3 => ((self.rng.next_u64() >> self.rng.below(64)) as i64).to_string().into_bytes(),
            4 => format!("{}.{}", self.rng.range(0, 99), self.rng.range(0, 9)).into_bytes(),
            _ => self.rng.range(0, 200).to_string().into_bytes(),
        }
    }

    /// A queue name: mostly the populated ones, sometimes any valid or invalid name.
    fn queue(&mut self) -> Vec<u8> {
        match self.rng.below(100) {
            0..=84 => b(self.pick(&QUEUES)),
            85..=87 => b(self.pick(&OTHER_QUEUES)),
            _ => self.pick_invalid_name(),
        }
    }

    /// A name no rule allows (random bytes that happen to form a valid name get a brace).
    fn pick_invalid_name(&mut self) -> Vec<u8> {
        let mut v = self.invalid_name_or_chance();
        if valid_queue(&v) || v.iter().all(|c| c.is_ascii_alphanumeric() || b"._:-@".contains(c)) && !v.is_empty() {
            v.push(b'{');
        }
        v
    }

    fn invalid_name_or_chance(&mut self) -> Vec<u8> {
        match self.rng.below(5) {
            0 => Vec::new(),
            1 => vec![b'q'; 65],
            2 => b(self.pick(&["a{b}", "fz ", "fz\0", "f@z", "fz/", "{fz}", "é"])),
            3 => {
                let n = self.rng.range(1, 70) as usize;
                (0..n).map(|_| self.rng.below(256) as u8).collect()
            }
            _ => self.nasty_small(),
        }
    }

    fn nasty_small(&mut self) -> Vec<u8> {
        let n = self.rng.range(0, 12) as usize;
        self.bytes(n, b"ab{}@ \t\r\n\0:._-\xc3\xa9\xff")
    }

    fn user(&mut self) -> Vec<u8> {
        match self.rng.below(100) {
            0..=79 => format!("u{}", self.rng.below(USERS)).into_bytes(),
            80..=85 => b(self.pick(&OTHER_USERS)),
            _ => self.pick_invalid_name(),
        }
    }

    fn nickname(&mut self) -> Vec<u8> {
        match self.rng.below(10) {
            0..=5 => b(self.pick(&["alice", "bob", "Zoë", "名前", "x", "a b c", "émile"])),
            6 => "é".repeat(16).into_bytes(), // 32 bytes: the longest allowed
            7 => "é".repeat(17).into_bytes(), // 34 bytes
            8 => b(self.pick(&["", "a\tb", "a\nb", "\u{1b}[31m", "\u{7f}", "bad\u{0}", "\u{85}"])),
            _ => vec![0xc3, 0x28, b'a'], // invalid UTF-8
        }
    }

    fn ticket(&mut self) -> Vec<u8> {
        if !self.tickets.is_empty() && self.rng.chance(60) {
            let t = self.tickets[self.rng.below(self.tickets.len() as u64) as usize].clone().into_bytes();
            return match self.rng.below(6) {
                0 => t[..t.len() - 1].to_vec(),
                1 => [t.as_slice(), b"x"].concat(),
                _ => t,
            };
        }
        match self.rng.below(4) {
            0 => b("nope"),
            1 => b("00000000-0000-4000-8000-000000000000"),
            2 => vec![b't'; 64],
            _ => self.pick_invalid_name(),
        }
    }

    /// An access code's hash: one of the set-up's, another well-formed one, or not one.
    fn code(&mut self) -> Vec<u8> {
        match self.rng.below(4) {
            0 | 1 => "a".repeat(64).into_bytes(),
            2 => "b".repeat(64).into_bytes(),
            _ => self.nasty(),
        }
    }

    fn setting_value(&mut self) -> Vec<u8> {
        match self.rng.below(4) {
            3 => b(self.pick(&["open", "identified", "invite", "Invite", "closed", "presale,general", "a,a", ""])),
            0 => self.rng.range(0, 100).to_string().into_bytes(),
            1 => b(self.pick(&["0", "1", "1000", "60000", "100000", "10000000", "1800000003600000", "1800000000000"])),
            _ => self.nasty(),
        }
    }

    /// A vector for `cmd` (module name), queue first: shaped like a valid call most of
    /// the time, with any argument replaced by a nasty one now and then.
    fn args(&mut self, cmd: &str) -> Vec<Vec<u8>> {
        let mut a = vec![self.queue()];
        match cmd {
            "QUEUE.ENTER" => {
                a.push(self.user());
                a.push(self.nickname());
                // Now and then LANE and CODE (queue `lanes` has lanes and codes).
                for _ in 0..self.rng.below(3) {
                    if self.rng.chance(50) {
                        a.push(b(self.pick(&["LANE", "lane", "LANE", "FLOOR"])));
                        let l = if self.rng.chance(80) {
                            b(self.pick(&["presale", "general", "vip"]))
                        } else {
                            self.nasty()
                        };
                        a.push(l);
                    } else {
                        a.push(b(self.pick(&["CODE", "code", "CODE"])));
                        a.push(self.code());
                    }
                }
            }
            "QUEUE.CODES" => match self.rng.below(3) {
                0 => {
                    a.push(b(self.pick(&["ADD", "add", "ADD"])));
                    let l =
                        if self.rng.chance(80) { b(self.pick(&["presale", "general", "vip"])) } else { self.nasty() };
                    a.push(l);
                    let uses =
                        if self.rng.chance(70) { self.rng.range(1, 4).to_string().into_bytes() } else { self.number() };
                    a.push(uses);
                    for _ in 0..self.rng.range(1, 3) {
                        let h = self.code();
                        a.push(h);
                    }
                }
                1 => {
                    a.push(b(self.pick(&["REMOVE", "remove", "CLEAR"])));
                    let h = self.code();
                    a.push(h);
                }
                _ => a.push(b(self.pick(&["COUNTS", "counts"]))),
            },
            "QUEUE.STATUS" | "QUEUE.LEAVE" | "SESSION.END" => a.push(self.user()),
            "QUEUE.RANKS" | "SESSION.HEARTBEAT" => {
                let n = if self.rng.chance(2) { 200 } else { self.rng.range(1, 6) };
                for _ in 0..n {
                    a.push(self.user());
                }
            }
            "QUEUE.LINE" => {
                for _ in 0..2 {
                    let v = if self.rng.chance(60) {
                        self.rng.range(0, 30).to_string().into_bytes()
                    } else {
                        self.number()
                    };
                    a.push(v);
                }
            }
            "QUEUE.PROMOTE" => {
                if self.rng.chance(60) {
                    a.push(b(self.pick(&["MAX", "max", "MAX", "Max"])));
                    let v =
                        if self.rng.chance(50) { self.rng.range(0, 5).to_string().into_bytes() } else { self.number() };
                    a.push(v);
                }
            }
            "QUEUE.PASS" => {
                a.push(self.user());
                a.push(self.nickname());
                if self.rng.chance(50) {
                    a.push(b(self.pick(&["HOLDER", "holder", "HOLDER", "OWNER"])));
                    let h = if self.rng.chance(80) { b(self.pick(&["tab-1", "tab-2"])) } else { self.nasty() };
                    a.push(h);
                }
            }
            "TICKET.CLAIM" => {
                a.push(self.ticket());
                if self.rng.chance(50) {
                    a.push(b(self.pick(&["HOLDER", "holder", "HOLDER", "OWNER"])));
                    let h = if self.rng.chance(80) { b(self.pick(&["tab-1", "tab-2"])) } else { self.nasty() };
                    a.push(h);
                }
            }
            "QUEUE.WATCH" | "QUEUE.UNWATCH" => {
                // The instance is named like a userId; WATCH's lease is 1-600000 ms.
                let instance = if self.rng.chance(80) { b(self.pick(&["pod-1", "pod-2"])) } else { self.user() };
                a.push(instance);
                if cmd == "QUEUE.WATCH" {
                    let lease = match self.rng.below(4) {
                        0 | 1 => self.rng.range(1, 600_000).to_string().into_bytes(),
                        2 => b(self.pick(&["0", "1", "600000", "600001", "-1"])),
                        _ => self.number(),
                    };
                    a.push(lease);
                }
                let n = if self.rng.chance(2) { 200 } else { self.rng.range(0, 5) };
                for _ in 0..n {
                    a.push(self.user());
                }
            }
            "QUEUE.INFO" => {}
            "QUEUE.OPENING" => {
                if self.rng.chance(50) {
                    a.push(b(self.pick(&["PROOF", "proof", "PROOF"])));
                    a.push(self.number());
                    a.push(self.number());
                }
            }
            "QUEUE.CONFIG" => {
                if self.rng.chance(40) {
                    a.push(b(self.pick(&["GET", "get"])));
                    let f = if self.rng.chance(70) { b(self.pick(&FIELDS)) } else { b("*") };
                    a.push(f);
                } else {
                    a.push(b(self.pick(&["SET", "set", "SET"])));
                    for _ in 0..self.rng.range(1, 3) {
                        let f = if self.rng.chance(90) { b(self.pick(&FIELDS)) } else { self.nasty() };
                        a.push(f);
                        let v = self.setting_value();
                        a.push(v);
                    }
                }
            }
            _ => unreachable!("{cmd}"),
        }
        // Now and then an argument swapped for a nasty one, or the arity broken.
        // (The queue only for an invalid name: a number or a userId there would be a
        // valid name, and every accepted write would make a new queue.)
        for (i, x) in a.iter_mut().enumerate() {
            if self.rng.chance(6) {
                *x = if i == 0 { self.pick_invalid_name() } else { self.nasty() };
            }
        }
        match self.rng.below(100) {
            0..=5 => {
                a.pop();
            }
            6..=9 => {
                for _ in 0..self.rng.range(1, 3) {
                    let x = self.nasty();
                    a.push(x);
                }
            }
            10 => a.clear(),
            _ => {}
        }
        a
    }

    /// The full command line for the backend, and the queue it names (when that is a
    /// valid name in the key position).
    fn vector(&mut self, backend: Backend) -> Vector {
        let cmd = if self.rng.chance(7) { "QUEUE.CODES" } else { self.pick(&testkit::COMMANDS) };
        let args = self.args(cmd);
        let mut v = Vec::with_capacity(args.len() + 3);
        if backend == Backend::Module {
            let name = match self.rng.below(100) {
                0 => cmd.to_ascii_lowercase(),
                1 => format!("{cmd}X"),
                _ => cmd.to_string(),
            };
            v.push(name.into_bytes());
            let queue = args.first().filter(|q| valid_queue(q)).cloned();
            v.extend(args);
            return (v, queue);
        }
        let function = match self.rng.below(100) {
            0 => "queue_version".to_string(),
            1 => "queue_nope".to_string(),
            2 => testkit::function_name(cmd).to_ascii_uppercase(),
            _ => testkit::function_name(cmd),
        };
        let ro = matches!(cmd, "QUEUE.INFO" | "QUEUE.OPENING") && self.rng.chance(50) || self.rng.chance(3);
        v.push(b(if ro { "FCALL_RO" } else { "FCALL" }));
        v.push(function.into_bytes());
        let keys = match self.rng.below(100) {
            0 => b("0"),
            1 => b("2"),
            2 => b("-1"),
            3 => b("x"),
            4 => b("99999999999"),
            5 => Vec::new(),
            _ => b("1"),
        };
        let queue = args.first().filter(|q| keys == b"1" && valid_queue(q)).cloned();
        v.push(keys);
        v.extend(args);
        (v, queue)
    }
}

fn valid_queue(q: &[u8]) -> bool {
    (1..=64).contains(&q.len()) && q.iter().all(|c| c.is_ascii_alphanumeric() || b"._:-".contains(c))
}

/// `HGET queue:{Q}:opening opened_at`: set once the queue's opening happened.
fn opened_at(q: &[u8]) -> Vec<Vec<u8>> {
    vec![b("HGET"), [b"queue:{", q, b"}:opening"].concat(), b("opened_at")]
}

// ---------------------------------------------------------------- the run

/// Fills the queues: people waiting, ticket holders, live sessions, a scheduled
/// opening with entrants, settings, keys of the wrong type. Returns the tickets issued.
fn populate(c: &mut Resp, backend: Backend) -> Vec<String> {
    let call = |c: &mut Resp, cmd: &str, args: &[&str]| -> Reply {
        let mut v: Vec<&[u8]> = Vec::new();
        let f = testkit::function_name(cmd);
        if backend == Backend::Lua {
            v.extend([b"FCALL".as_slice(), f.as_bytes(), b"1"]);
        } else {
            v.push(cmd.as_bytes());
        }
        v.extend(args.iter().map(|a| a.as_bytes()));
        c.call(&v)
    };
    for q in QUEUES {
        let clock = testkit::clock_key(q);
        c.call(&[b"SET", clock.as_bytes(), NOW_MS.to_string().as_bytes()]);
    }
    call(c, "QUEUE.CONFIG", &["fz", "SET", "soft_cap", "4", "hard_cap", "3"]);
    call(c, "QUEUE.CONFIG", &["fz2", "SET", "soft_cap", "2", "rate", "1", "burst", "2"]);
    call(c, "QUEUE.CONFIG", &["open", "SET", "opens_at", &(NOW_MS + 3_600_000).to_string()]);
    let mut tickets = Vec::new();
    for q in ["fz", "fz2", "open"] {
        for u in 0..USERS - 2 {
            let r = call(c, "QUEUE.ENTER", &[q, &format!("u{u}"), "nick"]);
            let Reply::Array(Some(fields)) = r else { panic!("ENTER {q} u{u}: {r:?}") };
            for pair in fields.chunks(2) {
                if let (Reply::Bulk(Some(k)), Reply::Bulk(Some(t))) = (&pair[0], &pair[1]) {
                    if k == b"ticketId" {
                        tickets.push(String::from_utf8(t.clone()).unwrap());
                    }
                }
            }
        }
    }
    // Watchers: registrations and instance leases.
    call(c, "QUEUE.WATCH", &["fz", "pod-1", "60000", "u5", "u6", "u7"]);
    call(c, "QUEUE.WATCH", &["open", "pod-2", "60000", "u1", "u2"]);
    call(c, "QUEUE.ENTER", &["wt3", "u1", "nick"]);
    call(c, "QUEUE.ENTER", &["wt3", "u2", "nick"]);
    // Half the tickets claimed: live sessions (leases of 30 s on a frozen clock), half
    // of those with a holder (whose repeats answer again).
    for (i, t) in tickets.iter().step_by(2).enumerate() {
        let claim: Vec<&str> = if i % 2 == 0 { vec![t, "HOLDER", "tab-1"] } else { vec![t] };
        let q = if call(c, "TICKET.CLAIM", &[&["fz"], &claim[..]].concat()).is_error() { "fz2" } else { continue };
        call(c, "TICKET.CLAIM", &[&[q], &claim[..]].concat());
    }
    assert!(!tickets.is_empty(), "the set-up issued no ticket");
    for (k, kind) in [("queue:{wt}:stats", "string"), ("queue:{wt}:config", "list"), ("queue:{wt2}:sessions", "string")]
    {
        match kind {
            "string" => c.call(&[b"SET", k.as_bytes(), b"x"]),
            _ => c.call(&[b"RPUSH", k.as_bytes(), b"x"]),
        };
    }
    c.call(&[b"SET", b"queue:{wt2}:active", b"not a hash"]);
    c.call(&[b"SET", b"queue:{wt3}:watched", b"not a hash"]);
    c.call(&[b"SET", b"queue:{wt3}:instances", b"not a zset"]);
    c.call(&[b"SET", b"queue:{wt3}:log", b"not a stream"]);
    c.call(&[b"SET", b"queue:{wt3}:claimed", b"not a hash"]);
    c.call(&[b"SET", b"queue:{wt3}:codes", b"not a hash"]);
    // A queue with lanes, a code of presale with uses left, and people in both lanes.
    call(c, "QUEUE.CONFIG", &["lanes", "SET", "lanes", "presale,general", "soft_cap", "1"]);
    call(c, "QUEUE.CODES", &["lanes", "ADD", "presale", "1000", &"a".repeat(64)]);
    for (u, lane) in [("u1", "general"), ("u2", "presale"), ("u3", "general")] {
        call(c, "QUEUE.ENTER", &["lanes", u, "nick", "LANE", lane]);
    }
    tickets
}

impl Reply {
    fn is_error(&self) -> bool {
        matches!(self, Reply::Error(_))
    }
}

/// The error text with digits and long runs cut, to count distinct kinds.
fn error_kind(e: &str) -> String {
    let mut s: String = e.chars().take(70).map(|c| if c.is_ascii_digit() { '#' } else { c }).collect();
    if let Some(i) = s.find('\'') {
        s.truncate(i + 1);
    }
    s
}

fn show(v: &[Vec<u8>]) -> String {
    v.iter()
        .map(|a| {
            let t = String::from_utf8_lossy(&a[..a.len().min(40)]).into_owned();
            if a.len() > 40 {
                format!("{t:?}..({} bytes)", a.len())
            } else {
                format!("{t:?}")
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn run(backend: Backend) {
    let vectors: u64 = std::env::var("ARG_FUZZ_VECTORS").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("ARG_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(|| {
        std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_nanos() as u64 | 1
    });
    let name = if backend == Backend::Module { "module" } else { "lua" };
    println!("arg-fuzz {name}: seed {seed} (ARG_FUZZ_SEED={seed} replays it)");
    let server = ValkeyServer::builder(backend).test_clock().start();
    let mut c = Resp::connect(server.port);
    let tickets = populate(&mut c, backend);
    let mut g = Gen { rng: Rng(seed), tickets };

    let (mut refused, mut accepted, mut changed, mut unclear) = (0u64, 0u64, 0u64, 0u64);
    let (mut expired, mut opened_by_refusal) = (0u64, 0u64);
    let mut kinds: BTreeMap<String, u64> = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    let digest = |r: std::io::Result<Reply>| match r {
        Ok(Reply::Status(d)) => Ok(d),
        Ok(other) => panic!("DEBUG DIGEST answered {other:?}"),
        Err(e) => Err(e),
    };
    let started = Instant::now();
    let mut sent = 0u64;
    let mut crashed = None;
    'batches: while sent < vectors {
        // A fresh dataset now and then: valid names made up by the generator (numbers,
        // users) pile up, and the digest's cost grows with the data.
        if sent > 0 && sent.is_multiple_of(RESET_EVERY) {
            c.call(&[b"FLUSHALL"]);
            g.tickets = populate(&mut c, backend);
        }
        let n = BATCH.min(vectors - sent);
        let batch: Vec<Vector> = (0..n).map(|_| g.vector(backend)).collect();
        let io = (|| -> std::io::Result<()> {
            c.send(&[b("DEBUG"), b("DIGEST")])?;
            for (v, q) in &batch {
                if let Some(q) = q {
                    c.send(&opened_at(q))?;
                }
                c.send(v)?;
                if let Some(q) = q {
                    c.send(&opened_at(q))?;
                }
                c.send(&[b("DEBUG"), b("DIGEST")])?;
            }
            c.send(&[b("PING")])?;
            c.w.flush()
        })();
        if let Err(e) = io {
            crashed = Some(format!("writing batch at vector {sent}: {e}"));
            break;
        }
        let mut before = match digest(c.read()) {
            Ok(d) => d,
            Err(e) => {
                crashed = Some(format!("reading at vector {sent}: {e}"));
                break;
            }
        };
        for (v, q) in &batch {
            let step = (|| -> std::io::Result<_> {
                let opened_before = if q.is_some() { Some(c.read()?) } else { None };
                let reply = c.read()?;
                let opened_after = if q.is_some() { Some(c.read()?) } else { None };
                let opened =
                    matches!((opened_before, opened_after), (Some(Reply::Bulk(None)), Some(Reply::Bulk(Some(_)))));
                Ok((reply, opened, digest(c.read())?))
            })();
            let (reply, opened, after) = match step {
                Ok(x) => x,
                Err(e) => {
                    crashed = Some(format!("reading at vector {sent}, after {}: {e}", show(v)));
                    break 'batches;
                }
            };
            sent += 1;
            match reply {
                Reply::Error(e) => {
                    refused += 1;
                    *kinds.entry(error_kind(&e)).or_default() += 1;
                    if e.starts_with("EXPIRED ") {
                        // Documented: an expired claim drops what has expired (never on a
                        // frozen clock, counted in case).
                        expired += 1;
                    } else if opened {
                        // Documented: the first command at or after `opens_at` opens the
                        // queue inside it, before its own checks (the fuzzer's CONFIG SET
                        // opens_at of a past time schedules that).
                        opened_by_refusal += 1;
                    } else if after != before {
                        changed += 1;
                        if failures.len() < 20 {
                            failures.push(format!("refused with {e:?} but changed the data: {}", show(v)));
                        }
                    }
                    if !CODES.iter().any(|p| e.starts_with(p)) || e.contains("internal") || e.contains("user_script") {
                        unclear += 1;
                        if failures.len() < 20 {
                            failures.push(format!("unclear error {e:?}: {}", show(v)));
                        }
                    }
                }
                _ => accepted += 1,
            }
            before = after;
        }
        if sent.is_multiple_of(100_000) {
            println!("arg-fuzz {name}: {sent} vectors, {:.0} s", started.elapsed().as_secs_f64());
        }
        match c.read() {
            Ok(Reply::Status(p)) if p == "PONG" => {}
            other => {
                crashed = Some(format!("PING after vector {sent}: {other:?}"));
                break;
            }
        }
    }
    let secs = started.elapsed().as_secs_f64();
    // A fresh connection must be answered too: the process is alive and serving.
    let alive =
        crashed.is_none() && matches!(Resp::connect(server.port).call(&[b"PING"]), Reply::Status(p) if p == "PONG");
    let crashes = u64::from(!alive);
    println!(
        "arg-fuzz {name}: {sent} vectors sent, {refused} refused, {accepted} accepted, {crashes} crashes, \
         {changed} state changes on refusal, {unclear} unclear errors; {secs:.1} s ({:.0} vectors/s, each \
         with a digest before and after); refusals with documented effects: {expired} EXPIRED, \
         {opened_by_refusal} opened a queue whose opens_at had passed",
        sent as f64 / secs
    );
    println!("arg-fuzz {name}: {} distinct refusals; most frequent:", kinds.len());
    let mut top: Vec<_> = kinds.iter().collect();
    top.sort_by(|a, b| b.1.cmp(a.1));
    for (k, n) in top.iter().take(12) {
        println!("  {n:>8}  {k}");
    }
    if let Some(c) = &crashed {
        println!("server log:\n{}", server.log());
        panic!("arg-fuzz {name} (seed {seed}): the server stopped answering: {c}");
    }
    assert!(alive, "arg-fuzz {name} (seed {seed}): no answer on a fresh connection");
    assert!(failures.is_empty(), "arg-fuzz {name} (seed {seed}):\n{}", failures.join("\n"));
    assert!(refused > sent / 10 && accepted > sent / 10, "a generator that only hits one side tests little");
}
