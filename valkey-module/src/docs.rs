//! What `COMMAND DOCS` and `COMMAND INFO` say about each command: summary,
//! complexity, arity, key spec and arguments.

use redis_module::raw;
use std::ffi::CString;
use std::os::raw::c_int;

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

/// Attaches `doc` to the registered command `name`.
///
/// # Safety
/// Called from module load with a live context, after `name` was created.
pub unsafe fn attach(ctx: *mut raw::RedisModuleCtx, name: &str, doc: &Doc) -> Result<(), String> {
    let cname = CString::new(name).unwrap();
    let cmd = raw::RedisModule_GetCommand.unwrap()(ctx, cname.as_ptr());
    if cmd.is_null() {
        return Err(format!("command {name} not found"));
    }
    // The server copies everything, so these only need to outlive the call.
    let mut keep: Vec<CString> = Vec::new();
    let mut c = |s: &str| {
        let cs = CString::new(s).unwrap();
        let p = cs.as_ptr();
        keep.push(cs);
        p
    };
    let summary = c(doc.summary);
    let complexity = c(doc.complexity);
    let since = c("1.0.0");
    let mut args: Vec<raw::RedisModuleCommandArg> = doc
        .args
        .iter()
        .map(|a| {
            let mut arg: raw::RedisModuleCommandArg = std::mem::zeroed();
            arg.name = c(a.name);
            arg.type_ = match a.kind {
                ArgType::Key => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_KEY,
                ArgType::Str => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_STRING,
                ArgType::Int => raw::RedisModuleCommandArgType_REDISMODULE_ARG_TYPE_INTEGER,
            };
            arg.key_spec_index = if matches!(a.kind, ArgType::Key) { 0 } else { -1 };
            if let Some(t) = a.token {
                arg.token = c(t);
            }
            let mut flags = 0;
            if a.optional {
                flags |= raw::REDISMODULE_CMD_ARG_OPTIONAL;
            }
            if a.multiple {
                flags |= raw::REDISMODULE_CMD_ARG_MULTIPLE;
            }
            arg.flags = flags as c_int;
            arg
        })
        .collect();
    args.push(std::mem::zeroed());
    let mut specs: Vec<raw::RedisModuleCommandKeySpec> = vec![std::mem::zeroed(), std::mem::zeroed()];
    specs[0].notes = c("the queue; every key it uses carries the hash tag {queue}");
    specs[0].flags = doc.key_flags;
    specs[0].begin_search_type = raw::RedisModuleKeySpecBeginSearchType_REDISMODULE_KSPEC_BS_INDEX;
    specs[0].bs.index.pos = 1;
    specs[0].find_keys_type = raw::RedisModuleKeySpecFindKeysType_REDISMODULE_KSPEC_FK_RANGE;
    specs[0].fk.range.lastkey = 0;
    specs[0].fk.range.keystep = 1;
    specs[0].fk.range.limit = 0;
    let version = raw::RedisModuleCommandInfoVersion {
        version: 1,
        sizeof_historyentry: std::mem::size_of::<raw::RedisModuleCommandHistoryEntry>(),
        sizeof_keyspec: std::mem::size_of::<raw::RedisModuleCommandKeySpec>(),
        sizeof_arg: std::mem::size_of::<raw::RedisModuleCommandArg>(),
    };
    let info = raw::RedisModuleCommandInfo {
        version: &version,
        summary,
        complexity,
        since,
        history: std::ptr::null_mut(),
        tips: std::ptr::null(),
        arity: doc.arity as c_int,
        key_specs: specs.as_mut_ptr(),
        args: args.as_mut_ptr(),
    };
    if raw::RedisModule_SetCommandInfo.unwrap()(cmd, &info) != raw::REDISMODULE_OK as c_int {
        return Err(format!("setting the docs of {name} failed"));
    }
    Ok(())
}
