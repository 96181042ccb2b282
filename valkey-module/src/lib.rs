//! valkey-queue: a fair waiting room inside Valkey.
//!
//! This file is the manifest: every command with its flags, key positions, ACL
//! category and documentation, the module configs, and the INFO section. The
//! handlers live in one file per command family; pure logic lives in `queue-core`.

mod cache;
mod codes;
mod config;
mod counters;
mod defaults;
mod docs;
mod effects;
mod ids;
mod queue;
mod server;
mod session;
mod state;
mod ticket;
mod watchers;

use docs::{integer, key, opt_int, opt_string, string, strings, Arg, ArgType, Doc, KEY_RO, KEY_RW};
use redis_module::{raw, redis_module, AclCategory, Context, InfoContext, RedisResult, RedisString, Status};
use std::os::raw::c_int;

/// The ACL category every command belongs to: `ACL SETUSER svc +@queue`.
const ACL_CATEGORY: &str = "queue";

struct Command {
    name: &'static str,
    callback: server::Callback,
    flags: &'static str,
    doc: Doc,
}

macro_rules! command {
    ($name:literal, $handler:path, $flags:literal, $doc:expr) => {
        Command {
            name: $name,
            callback: {
                extern "C" fn callback(
                    ctx: *mut raw::RedisModuleCtx,
                    argv: *mut *mut raw::RedisModuleString,
                    argc: c_int,
                ) -> c_int {
                    server::run(ctx, argv, argc, $handler)
                }
                callback
            },
            flags: $flags,
            doc: $doc,
        }
    };
}

const Q: Arg = key("queue");

const COMMANDS: &[Command] = &[
    command!("queue.enter", queue::enter, "write deny-oom fast", Doc {
        summary: "Joins the queue at the back (re-entry moves to the back), of a lane in a queue with lanes (the code's, LANE, else the last); CODE consumes one use of an access code; lets the user in at once when nobody waits and there is room; refused with INVITE in a queue whose entry is invite unless LANE or CODE is given",
        complexity: "O(log N) with N the number of waiting users",
        arity: -4, key_flags: KEY_RW, args: &[
            Q,
            string("userId"),
            string("nickname"),
            opt_string("lane", "LANE"),
            opt_string("code", "CODE"),
        ],
    }),
    command!("queue.pass", queue::pass, "write deny-oom fast", Doc {
        summary: "Enters and claims in one command when QUEUE.ENTER would let the user in at once (nobody waits, a free slot, a rate token, a unit to sell; entry open, no opening scheduled, not closed) and the user neither waits, holds a ticket nor is inside: replies what TICKET.CLAIM replies; otherwise nil and nothing changes",
        complexity: "O(log N)",
        arity: -4, key_flags: KEY_RW, args: &[
            Q,
            string("userId"),
            string("nickname"),
            opt_string("holder", "HOLDER"),
        ],
    }),
    command!("queue.status", queue::status, "write fast", Doc {
        summary: "Where a user stands: WAITING with rank and estimated wait, PROMOTED with its ticket, ACTIVE, or UNKNOWN; notes that a waiting user is still there",
        complexity: "O(log N)",
        arity: 3, key_flags: KEY_RW, args: &[Q, string("userId")],
    }),
    command!("queue.ranks", queue::ranks, "write", Doc {
        summary: "QUEUE.STATUS for many users in one call (for push updates)",
        complexity: "O(M log N) with M the users asked about",
        arity: -3, key_flags: KEY_RW, args: &[Q, strings("userId")],
    }),
    command!("queue.line", queue::line, "write", Doc {
        summary: "A page of the waiting users in line order after a cursor, with the first one's rank (whole-line rank refresh for push updates; nobody counts as heard from)",
        complexity: "O(log N + M) with M the users listed",
        arity: 4, key_flags: KEY_RW, args: &[Q, integer("cursor"), integer("count")],
    }),
    command!("queue.watch", watchers::watch, "write deny-oom", Doc {
        summary: "Registers the waiting users a push instance streams to (its lease counts them as heard from) and extends the instance's lease; replies the change log's number, the number waiting and each user's number in line and standing",
        complexity: "O(M log N) with M the users registered",
        arity: -4, key_flags: KEY_RW, args: &[
            Q,
            string("instance"),
            integer("leaseMs"),
            Arg { name: "userId", kind: ArgType::Str, token: None, optional: true, multiple: true },
        ],
    }),
    command!("queue.unwatch", watchers::unwatch, "write fast", Doc {
        summary: "Removes a push instance's registrations of users (their streams closed); each waiting user removed counts as heard from now; replies how many were removed",
        complexity: "O(M log N) with M the users given",
        arity: -4, key_flags: KEY_RW, args: &[Q, string("instance"), strings("userId")],
    }),
    command!("queue.leave", queue::leave, "write fast", Doc {
        summary: "Takes a user out of the line, or withdraws its unclaimed ticket; replies 1 if it was there",
        complexity: "O(log N)",
        arity: 3, key_flags: KEY_RW, args: &[Q, string("userId")],
    }),
    command!("queue.promote", queue::promote, "write deny-oom", Doc {
        summary: "Drops expired tickets, expired leases and waiters who went silent, then issues tickets to the head of the line within the soft cap, the rate bucket, MAX and batch_max",
        complexity: "O((P + S) log N) with P promoted and S swept users",
        arity: -2, key_flags: KEY_RW, args: &[Q, opt_int("count", "MAX")],
    }),
    command!("ticket.claim", ticket::claim, "write deny-oom fast", Doc {
        summary: "Uses a ticket (once): opens a session lease for its user; errors NOTICKET, EXPIRED, INSIDE or FULL. With HOLDER, the same holder claiming the same ticket again while that session lives gets the same reply and changes nothing",
        complexity: "O(log N)",
        arity: -3, key_flags: KEY_RW, args: &[Q, string("ticketId"), opt_string("holder", "HOLDER")],
    }),
    command!("session.heartbeat", session::heartbeat, "write fast", Doc {
        summary: "Extends the session leases of users inside; replies 1 per extended lease, 0 where none is live",
        complexity: "O(M log S) with M users and S sessions",
        arity: -3, key_flags: KEY_RW, args: &[Q, strings("userId")],
    }),
    command!("session.end", session::end, "write fast", Doc {
        summary: "Ends a user's session, freeing its slot; replies 1 if it had one",
        complexity: "O(log S)",
        arity: 3, key_flags: KEY_RW, args: &[Q, string("userId")],
    }),
    command!("queue.info", queue::info, "readonly fast", Doc {
        summary: "Counts (waiting, joining, active, free slots), settings and counters of a queue",
        complexity: "O(log N)",
        arity: 2, key_flags: KEY_RO, args: &[Q],
    }),
    command!("queue.opening", queue::opening, "readonly fast", Doc {
        summary: "The queue's fair opening: opensAt, commitment (hex SHA-256 of the secret seed), state (none, scheduled, open), seed once open, openedAt, entrants, and in a queue with lanes lanes ([name, entrants] per lane: each lane's run of the proof); with PROOF start count, a page of the idHashes in placed order",
        complexity: "O(1); O(P) while scheduled in a queue with lanes (P: the pre-queue's entrants); O(M) with PROOF (M: the idHashes listed)",
        arity: -2, key_flags: KEY_RO, args: &[
            Q,
            opt_int("start", "PROOF"),
            Arg { name: "count", kind: ArgType::Int, token: None, optional: true, multiple: false },
        ],
    }),
    command!("queue.codes", codes::codes, "write deny-oom", Doc {
        summary: "A queue's access codes (hex SHA-256 of each code): ADD lane uses hash... (replies how many are new), REMOVE hash... (how many were there), COUNTS (per lane: name, codes, uses consumed, uses left)",
        complexity: "O(C) with C the codes given, or all codes for COUNTS",
        arity: -3, key_flags: KEY_RW, args: &[
            Q,
            Arg { name: "operation", kind: ArgType::Str, token: None, optional: false, multiple: false },
            Arg { name: "argument", kind: ArgType::Str, token: None, optional: true, multiple: true },
        ],
    }),
    command!("queue.sold", queue::sold, "write deny-oom fast", Doc {
        summary: "Reports n units sold: the inventory goes down by n (never below 0); with USER, that person (inside) no longer counts against it. Replies the units left, or nil without a limit",
        complexity: "O(1)",
        arity: -3, key_flags: KEY_RW, args: &[
            Q,
            integer("n"),
            Arg { name: "userId", kind: ArgType::Str, token: Some("USER"), optional: true, multiple: false },
        ],
    }),
    command!("queue.config", config::config, "write fast", Doc {
        summary: "Reads (GET field|*) or changes (SET field value ...) a queue's settings at runtime: the numeric ones, entry (open, identified or invite) and lanes (comma-separated lane names)",
        complexity: "O(F) with F fields",
        arity: -4, key_flags: KEY_RW, args: &[
            Q,
            Arg { name: "operation", kind: ArgType::Str, token: None, optional: false, multiple: false },
            strings("field-and-value"),
        ],
    }),
];

/// `VALKEYMODULE_OPTIONS_HANDLE_ATOMIC_SLOT_MIGRATION` (Valkey 9).
const HANDLE_ATOMIC_SLOT_MIGRATION: c_int = 1 << 5;

fn init(ctx: &Context, args: &[RedisString]) -> Status {
    if let Err(e) = defaults::register(ctx.ctx) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_slice()).collect();
    if let Err(e) = defaults::apply_load_args(&args) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    if let Err(e) = cache::subscribe(ctx.ctx) {
        ctx.log_warning(&e);
        return Status::Err;
    }
    // Valkey 9's atomic slot migration (CLUSTER MIGRATESLOTS) may move a queue's slot:
    // a queue's keys then arrive on the target as writes of the slot import client
    // (keyspace events, which drop what the cache keeps of the queue) before the slot
    // is the target's, and no command reaches them there until it is; on the source they
    // are deleted (keyspace events again). Older servers ignore the option.
    server::set_module_options(ctx.ctx, HANDLE_ATOMIC_SLOT_MIGRATION);
    for c in COMMANDS {
        let created = server::create_command(ctx.ctx, c.name, c.callback, c.flags, ACL_CATEGORY)
            .and_then(|()| server::set_command_docs(ctx.ctx, c.name, &c.doc));
        if let Err(e) = created {
            ctx.log_warning(&e);
            return Status::Err;
        }
    }
    Status::Ok
}

fn info(ctx: &InfoContext, _for_crash_report: bool) {
    let mut section = ctx.builder().add_section("counters");
    for (name, c) in counters::ALL {
        match section.field(name, c.load(std::sync::atomic::Ordering::Relaxed)) {
            Ok(s) => section = s,
            Err(_) => return,
        }
    }
    let _ = section.build_section().and_then(|b| b.build_info());
}

redis_module! {
    name: "queue",
    version: 10000,
    allocator: (redis_module::alloc::RedisAlloc, redis_module::alloc::RedisAlloc),
    data_types: [],
    acl_categories: [ACL_CATEGORY,],
    init: init,
    info: info,
}
