//! What a command changed, gathered per (native command, key) and replicated once at
//! its end as a few variadic native commands (ZADD, ZREM, HSET, HDEL). Replicas and
//! the AOF thus get exactly the primary's writes, whatever the clock or the random
//! ticket ids were, and need no module to replay them. A command that changed nothing
//! replicates nothing.
//!
//! Within one command no field or member is written by two different native
//! commands, so grouping by (command, key) never reorders dependent writes.

use crate::server::{Server, Str};
use std::collections::HashMap;
use std::ffi::CStr;

/// One native command: its key first, then its arguments (the argument vector it is
/// replicated with, as is).
struct Op {
    cmd: &'static CStr,
    argv: Vec<Str>,
}

impl Op {
    fn new(cmd: &'static CStr, key: Str, args: &[Str]) -> Op {
        let mut argv = Vec::with_capacity(1 + args.len().max(4));
        argv.push(key);
        argv.extend_from_slice(args);
        Op { cmd, argv }
    }
    fn key(&self) -> &[u8] {
        self.argv[0].bytes()
    }
}

#[derive(Default)]
pub struct Effects {
    ops: Vec<Op>,
    /// (command, key) -> index in `ops`, built once a command touches many keys (an
    /// opening writes thousands of record chunks), so that finding the op stays O(1).
    index: Option<OpIndex>,
}

/// (command name, key name) -> index of its op.
type OpIndex = HashMap<(&'static [u8], Vec<u8>), usize>;

/// Ops scanned linearly before `Effects` indexes them.
const SCAN_LIMIT: usize = 16;

impl Effects {
    fn push(&mut self, cmd: &'static CStr, key: Str, args: &[Str]) {
        let kb = key.bytes();
        if self.index.is_none() && self.ops.len() > SCAN_LIMIT {
            let index = self.ops.iter().enumerate().map(|(i, o)| ((o.cmd.to_bytes(), o.key().to_vec()), i));
            self.index = Some(index.collect());
        }
        if let Some(index) = &mut self.index {
            match index.get(&(cmd.to_bytes(), kb.to_vec())) {
                Some(&i) => self.ops[i].argv.extend_from_slice(args),
                None => {
                    index.insert((cmd.to_bytes(), kb.to_vec()), self.ops.len());
                    self.ops.push(Op::new(cmd, key, args));
                }
            }
            return;
        }
        // Newest first: a command mostly appends to the op it touched last.
        if let Some(op) = self.ops.iter_mut().rev().find(|o| o.cmd == cmd && o.key() == kb) {
            op.argv.extend_from_slice(args);
        } else {
            self.ops.push(Op::new(cmd, key, args));
        }
    }
    pub fn zadd(&mut self, key: Str, score: Str, member: Str) {
        self.push(c"ZADD", key, &[score, member]);
    }
    pub fn zrem(&mut self, key: Str, member: Str) {
        self.push(c"ZREM", key, &[member]);
    }
    pub fn hset(&mut self, key: Str, field: Str, value: Str) {
        self.push(c"HSET", key, &[field, value]);
    }
    pub fn hdel(&mut self, key: Str, field: Str) {
        self.push(c"HDEL", key, &[field]);
    }
    pub fn del(&mut self, key: Str) {
        self.push(c"DEL", key, &[]);
    }
    pub fn rpush(&mut self, key: Str, items: &[Str]) {
        self.push(c"RPUSH", key, items);
    }
    pub fn is_empty(&self) -> bool {
        self.ops.is_empty()
    }
    pub fn replicate(self, srv: &Server) {
        for op in &self.ops {
            srv.replicate(op.cmd, &op.argv);
        }
    }
}
