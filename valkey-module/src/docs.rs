//! What `COMMAND DOCS` and `COMMAND INFO` say about each command: summary,
//! complexity, arity, key spec and arguments (attached at load by
//! `server::set_command_docs`).

use redis_module::raw;

pub enum ArgType {
    Key,
    Str,
    Int,
}

pub struct Arg {
    pub name: &'static str,
    pub kind: ArgType,
    /// A keyword that precedes the value, e.g. MAX.
    pub token: Option<&'static str>,
    pub optional: bool,
    pub multiple: bool,
}

pub const fn key(name: &'static str) -> Arg {
    Arg { name, kind: ArgType::Key, token: None, optional: false, multiple: false }
}
pub const fn string(name: &'static str) -> Arg {
    Arg { name, kind: ArgType::Str, token: None, optional: false, multiple: false }
}
pub const fn strings(name: &'static str) -> Arg {
    Arg { name, kind: ArgType::Str, token: None, optional: false, multiple: true }
}
pub const fn integer(name: &'static str) -> Arg {
    Arg { name, kind: ArgType::Int, token: None, optional: false, multiple: false }
}
pub const fn opt_int(name: &'static str, token: &'static str) -> Arg {
    Arg { name, kind: ArgType::Int, token: Some(token), optional: true, multiple: false }
}

pub const fn opt_string(name: &'static str, token: &'static str) -> Arg {
    Arg { name, kind: ArgType::Str, token: Some(token), optional: true, multiple: false }
}

pub struct Doc {
    pub summary: &'static str,
    pub complexity: &'static str,
    pub arity: i32,
    /// Key spec flags: "RW ACCESS UPDATE" and the like.
    pub key_flags: u64,
    pub args: &'static [Arg],
}

pub const KEY_RW: u64 =
    (raw::REDISMODULE_CMD_KEY_RW | raw::REDISMODULE_CMD_KEY_ACCESS | raw::REDISMODULE_CMD_KEY_UPDATE) as u64;
pub const KEY_RO: u64 = (raw::REDISMODULE_CMD_KEY_RO | raw::REDISMODULE_CMD_KEY_ACCESS) as u64;
