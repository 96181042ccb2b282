//! Every `unsafe` of the module, behind small safe wrappers: the one place the module
//! reaches the server's C API. Command handlers get a [`Server`] from [`run`] and work
//! through it, [`Str`] and [`Key`]. Module load registers commands with their ACL
//! category and documentation ([`create_command`], [`set_command_docs`]), options and
//! module configs through the wrappers at the end of this file, which also holds the
//! keyspace and SWAPDB callbacks that keep the cache honest: they hand what the server
//! tells them to safe functions of `cache.rs`.
//!
//! # Safety
//!
//! Every command wrapper is only ever used from a command callback on the server's
//! main thread, through a [`Server`] created by [`run`] for that callback. [`run`] turns
//! on automatic memory management, so strings, keys and call replies created through
//! it are freed by the server when the callback returns; a [`Str`] must therefore not
//! outlive the callback, which the command files honour by never storing one.
//! The wrappers that take a raw context are only called from module load (`init` in
//! `lib.rs` and what it calls) with the live context the server gave it; the server
//! calls the callbacks registered here on its main thread with arguments that live for
//! the call. Function pointers are filled in by `RedisModule_Init` before any of this
//! runs.

use crate::docs::{ArgType, Doc};
use queue_core::QueueError;
use redis_module::raw;
use std::ffi::{CStr, CString};
use std::os::raw::{c_char, c_int};

/// A server string owned by the current callback (freed automatically at its end).
#[derive(Clone, Copy)]
#[repr(transparent)]
pub struct Str(*mut raw::RedisModuleString);

impl Str {
    pub fn bytes<'a>(self) -> &'a [u8] {
        let mut len = 0usize;
        // SAFETY: the pointer came from the server and lives until the callback ends.
        unsafe {
            let p = raw::RedisModule_StringPtrLen.unwrap()(self.0, &mut len);
            std::slice::from_raw_parts(p.cast::<u8>(), len)
        }
    }
    pub fn parse_i64(self) -> Option<i64> {
        queue_core::args::parse_i64(self.bytes())
    }
}

thread_local! {
    static STATIC_STRS: std::cell::RefCell<Vec<((usize, usize), Str)>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// The names of a queue's five fixed keys (`waiting`, `sessions`, `active`, `stats`,
/// `config`, in `engine::Part` order), then of its access codes, as strings no
/// callback owns.
#[derive(Clone, Copy)]
pub struct KeyNames(pub [Str; 5], pub Str);

/// A server string no callback owns (created with a NULL context): it lives until
/// freed with a NULL context, or for the life of the module.
fn unowned_str(b: &[u8]) -> Str {
    // SAFETY: a NULL context is allowed; the server copies the bytes.
    Str(unsafe { raw::RedisModule_CreateString.unwrap()(std::ptr::null_mut(), b.as_ptr().cast::<c_char>(), b.len()) })
}

impl KeyNames {
    /// Freed by `free` when the cache starts over.
    pub fn new(prefix: &[u8]) -> KeyNames {
        use queue_core::keys;
        let make = |suffix: &str| unowned_str(&[prefix, suffix.as_bytes()].concat());
        // The parts, and the access codes (an entry with a code opens them every time).
        let codes = make(queue_core::engine::Aux::Codes.suffix());
        KeyNames([keys::WAITING, keys::SESSIONS, keys::ACTIVE, keys::STATS, keys::CONFIG].map(make), codes)
    }

    pub fn free(self) {
        for s in self.0.into_iter().chain([self.1]) {
            // SAFETY: created with a NULL context by `new`; a replication or reply that
            // still uses one holds its own reference.
            unsafe { raw::RedisModule_FreeString.unwrap()(std::ptr::null_mut(), s.0) };
        }
    }
}

/// A reply of [`Server::call`].
pub enum Reply {
    Nil,
    Int(i64),
    Bulk(Vec<u8>),
    Array(Vec<Vec<u8>>),
}

/// A value in a map reply.
pub enum Val<'a> {
    Int(i64),
    Bulk(&'a [u8]),
    Null,
}

impl<'a> Val<'a> {
    pub fn opt_int(v: Option<i64>) -> Self {
        v.map_or(Val::Null, Val::Int)
    }
    pub fn opt_bulk(v: Option<&'a [u8]>) -> Self {
        v.map_or(Val::Null, Val::Bulk)
    }
}

/// Handle on the server for one command callback.
pub struct Server {
    ctx: *mut raw::RedisModuleCtx,
}

pub type Handler = fn(&Server, &[Str]) -> Result<(), QueueError>;

/// Runs a command handler: arguments as [`Str`]s (the command name first), errors
/// replied with their exact text, panics contained so that a bug never takes the
/// server down.
pub fn run(
    ctx: *mut raw::RedisModuleCtx,
    argv: *mut *mut raw::RedisModuleString,
    argc: c_int,
    handler: Handler,
) -> c_int {
    // SAFETY: called by the server with a live context and `argc` arguments; Str is
    // a transparent wrapper of the argument pointers.
    let args: &[Str] = unsafe {
        raw::RedisModule_AutoMemory.unwrap()(ctx);
        std::slice::from_raw_parts(argv.cast::<Str>(), argc as usize)
    };
    let srv = Server { ctx };
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| handler(&srv, args))) {
        Ok(Ok(())) => {}
        Ok(Err(e)) => srv.reply_error(&e.to_string()),
        Err(_) => srv.reply_error("ERR internal error in the queue module (see the server log)"),
    }
    raw::Status::Ok as c_int
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Empty,
    Zset,
    Hash,
    Other,
}

impl Server {
    pub fn str(&self, b: &[u8]) -> Str {
        // SAFETY: see module docs; the server copies the bytes.
        Str(unsafe { raw::RedisModule_CreateString.unwrap()(self.ctx, b.as_ptr().cast::<c_char>(), b.len()) })
    }

    /// A server string for a fixed name (a stats or settings field), created once and
    /// kept for the life of the module instead of once per command.
    pub fn static_str(&self, s: &'static str) -> Str {
        STATIC_STRS.with(|cache| {
            let key = (s.as_ptr() as usize, s.len());
            if let Some(&(_, v)) = cache.borrow().iter().find(|(k, _)| *k == key) {
                return v;
            }
            // Never freed.
            let v = unowned_str(s.as_bytes());
            cache.borrow_mut().push((key, v));
            v
        })
    }

    /// The database the command runs in.
    pub fn db(&self) -> i32 {
        // SAFETY: valid ctx.
        unsafe { raw::RedisModule_GetSelectedDb.unwrap()(self.ctx) }
    }

    pub fn int_str(&self, v: i64) -> Str {
        self.str(itoa::Buffer::new().format(v).as_bytes())
    }

    /// Wall-clock milliseconds. Commands read it once, and replicate what they
    /// wrote with it rather than the command itself.
    pub fn now_ms(&self) -> i64 {
        // SAFETY: no arguments.
        unsafe { raw::RedisModule_Milliseconds.unwrap()() }
    }

    pub fn open(&self, name: Str, write: bool) -> Key {
        let mode = if write { raw::REDISMODULE_READ | raw::REDISMODULE_WRITE } else { raw::REDISMODULE_READ };
        // SAFETY: valid ctx and key name.
        let ptr = unsafe { raw::RedisModule_OpenKey.unwrap()(self.ctx, name.0, mode as c_int) };
        Key { ptr: ptr.cast() }
    }

    /// 0-based rank and integer score of `member` in the zset `key`, in one lookup
    /// (the key API has no rank lookup, so this goes through ZRANK ... WITHSCORE).
    pub fn zrank_with_score(&self, key: Str, member: Str) -> Option<(i64, i64)> {
        // SAFETY: valid ctx; "ssc" takes two server strings and a C string; the
        // reply and its elements live until the callback ends.
        unsafe {
            let call = raw::RedisModule_Call.unwrap();
            let reply = call(self.ctx, c"ZRANK".as_ptr(), c"ssc".as_ptr(), key.0, member.0, c"WITHSCORE".as_ptr());
            if reply.is_null()
                || raw::RedisModule_CallReplyType.unwrap()(reply) != raw::REDISMODULE_REPLY_ARRAY as c_int
            {
                return None;
            }
            let rank = raw::RedisModule_CallReplyArrayElement.unwrap()(reply, 0);
            let score = raw::RedisModule_CallReplyArrayElement.unwrap()(reply, 1);
            if rank.is_null() || score.is_null() {
                return None;
            }
            let mut len = 0usize;
            let p = raw::RedisModule_CallReplyStringPtr.unwrap()(score, &mut len);
            if p.is_null() {
                return None;
            }
            let score = std::slice::from_raw_parts(p.cast::<u8>(), len);
            Some((raw::RedisModule_CallReplyInteger.unwrap()(rank), queue_core::args::parse_i64(score)?))
        }
    }

    /// Runs `cmd args...` inside this command (not replicated: callers record the
    /// effects themselves); an error or a reply of another shape reads as Nil.
    pub fn call(&self, cmd: &CStr, args: &[Str]) -> Reply {
        let mut v: Vec<*mut raw::RedisModuleString> = args.iter().map(|s| s.0).collect();
        // SAFETY: valid ctx; "v" takes an array of server strings and its length; the
        // reply and its elements live until the callback ends (auto memory).
        unsafe {
            let reply = raw::RedisModule_Call.unwrap()(self.ctx, cmd.as_ptr(), c"v".as_ptr(), v.as_mut_ptr(), v.len());
            if reply.is_null() {
                return Reply::Nil;
            }
            let text = |r: *mut raw::RedisModuleCallReply| {
                let mut len = 0usize;
                let p = raw::RedisModule_CallReplyStringPtr.unwrap()(r, &mut len);
                if p.is_null() {
                    Vec::new()
                } else {
                    std::slice::from_raw_parts(p.cast::<u8>(), len).to_vec()
                }
            };
            match raw::RedisModule_CallReplyType.unwrap()(reply) as isize {
                raw::REDISMODULE_REPLY_STRING => Reply::Bulk(text(reply)),
                raw::REDISMODULE_REPLY_INTEGER => Reply::Int(raw::RedisModule_CallReplyInteger.unwrap()(reply)),
                raw::REDISMODULE_REPLY_ARRAY => {
                    let n = raw::RedisModule_CallReplyLength.unwrap()(reply);
                    Reply::Array(
                        (0..n).map(|i| text(raw::RedisModule_CallReplyArrayElement.unwrap()(reply, i))).collect(),
                    )
                }
                _ => Reply::Nil,
            }
        }
    }

    /// The integer held by the string `key` (GET), if any. Only the test clock uses it.
    pub fn get_i64(&self, key: Str) -> Option<i64> {
        // SAFETY: valid ctx; "s" takes one server string; the reply lives until the
        // callback ends.
        unsafe {
            let reply = raw::RedisModule_Call.unwrap()(self.ctx, c"GET".as_ptr(), c"s".as_ptr(), key.0);
            if reply.is_null()
                || raw::RedisModule_CallReplyType.unwrap()(reply) != raw::REDISMODULE_REPLY_STRING as c_int
            {
                return None;
            }
            let mut len = 0usize;
            let p = raw::RedisModule_CallReplyStringPtr.unwrap()(reply, &mut len);
            if p.is_null() {
                return None;
            }
            queue_core::args::parse_i64(std::slice::from_raw_parts(p.cast::<u8>(), len))
        }
    }

    /// Sends `cmd args...` to replicas and the AOF (wrapped in MULTI/EXEC with the
    /// other effects of this command by the server).
    pub fn replicate(&self, cmd: &CStr, args: &[Str]) {
        // SAFETY: "sss" takes three server strings; "v" an array of server strings and
        // its length. `Str` is a transparent wrapper of the string pointer, so the
        // slice is that array (the server only reads it: it takes its own references
        // to the strings).
        unsafe {
            let replicate = raw::RedisModule_Replicate.unwrap();
            if let [a, b, c] = args {
                // The common write (HSET key field value, ZADD key score member): the
                // server sizes its argument vector once for it.
                replicate(self.ctx, cmd.as_ptr(), c"sss".as_ptr(), a.0, b.0, c.0);
                return;
            }
            let v = args.as_ptr().cast::<*mut raw::RedisModuleString>().cast_mut();
            replicate(self.ctx, cmd.as_ptr(), c"v".as_ptr(), v, args.len());
        }
    }

    /// Publishes `message` on `channel`: on one server PUBLISH (pattern subscribers);
    /// in a cluster SPUBLISH, to the subscribers of the channel's shard (the channel
    /// carries the queue's hash tag), instead of a broadcast to every node.
    pub fn publish(&self, channel: Str, message: Str) {
        // SAFETY: valid ctx and strings.
        unsafe {
            let flags = raw::RedisModule_GetContextFlags.unwrap()(self.ctx);
            if flags & raw::REDISMODULE_CTX_FLAGS_CLUSTER as c_int != 0 {
                raw::RedisModule_PublishMessageShard.unwrap()(self.ctx, channel.0, message.0);
            } else {
                raw::RedisModule_PublishMessage.unwrap()(self.ctx, channel.0, message.0);
            }
        }
    }

    pub fn notify(&self, event: &CStr, key: Str) {
        // SAFETY: valid ctx, event and key.
        unsafe {
            raw::RedisModule_NotifyKeyspaceEvent.unwrap()(
                self.ctx,
                raw::REDISMODULE_NOTIFY_GENERIC,
                event.as_ptr(),
                key.0,
            );
        }
    }

    // Replies. Maps become flat field/value arrays for RESP2 clients.
    pub fn reply_map(&self, pairs: usize) {
        unsafe { raw::RedisModule_ReplyWithMap.unwrap()(self.ctx, pairs as _) };
    }
    pub fn reply_array(&self, len: usize) {
        unsafe { raw::RedisModule_ReplyWithArray.unwrap()(self.ctx, len as _) };
    }
    pub fn reply_simple(&self, s: &CStr) {
        unsafe { raw::RedisModule_ReplyWithSimpleString.unwrap()(self.ctx, s.as_ptr()) };
    }
    pub fn reply_bulk(&self, b: &[u8]) {
        unsafe { raw::RedisModule_ReplyWithStringBuffer.unwrap()(self.ctx, b.as_ptr().cast::<c_char>(), b.len()) };
    }
    pub fn reply_int(&self, v: i64) {
        unsafe { raw::RedisModule_ReplyWithLongLong.unwrap()(self.ctx, v as _) };
    }
    pub fn reply_null(&self) {
        unsafe { raw::RedisModule_ReplyWithNull.unwrap()(self.ctx) };
    }
    pub fn reply_error(&self, msg: &str) {
        let c = std::ffi::CString::new(msg.replace(['\r', '\n', '\0'], " ")).expect("no NUL");
        unsafe { raw::RedisModule_ReplyWithError.unwrap()(self.ctx, c.as_ptr()) };
    }
    pub fn reply_val(&self, v: &Val) {
        match v {
            Val::Int(i) => self.reply_int(*i),
            Val::Bulk(b) => self.reply_bulk(b),
            Val::Null => self.reply_null(),
        }
    }

    /// A map reply with `fields` emitted in `order` (see `queue_core::replies`).
    pub fn reply_fields(&self, order: &[&str], fields: &[(&str, Val)]) {
        debug_assert_eq!(order.len(), fields.len());
        self.reply_map(order.len());
        for (i, name) in order.iter().enumerate() {
            // Callers mostly give the fields in order already.
            let v = match fields.get(i) {
                Some((f, v)) if f == name => v,
                _ => &fields.iter().find(|(f, _)| f == name).expect("every ordered field is given").1,
            };
            self.reply_bulk(name.as_bytes());
            self.reply_val(v);
        }
    }
}

/// An open key. Closed on drop; never keep two handles on one key, since a handle
/// whose key another handle deleted would point at freed memory.
pub struct Key {
    ptr: *mut raw::RedisModuleKey,
}

/// Marker value that deletes a hash field in `RedisModule_HashSet`.
const HASH_DELETE: *mut raw::RedisModuleString = std::ptr::without_provenance_mut(1);

impl Drop for Key {
    fn drop(&mut self) {
        if !self.ptr.is_null() {
            unsafe { raw::RedisModule_CloseKey.unwrap()(self.ptr.cast()) };
        }
    }
}

impl Key {
    pub fn kind(&self) -> Kind {
        if self.ptr.is_null() {
            return Kind::Empty;
        }
        let t = unsafe { raw::RedisModule_KeyType.unwrap()(self.ptr.cast()) } as isize;
        match t {
            raw::REDISMODULE_KEYTYPE_EMPTY => Kind::Empty,
            raw::REDISMODULE_KEYTYPE_ZSET => Kind::Zset,
            raw::REDISMODULE_KEYTYPE_HASH => Kind::Hash,
            _ => Kind::Other,
        }
    }

    pub fn len(&self) -> i64 {
        if self.kind() == Kind::Empty {
            return 0;
        }
        unsafe { raw::RedisModule_ValueLength.unwrap()(self.ptr.cast()) as i64 }
    }

    pub fn zscore(&self, member: Str) -> Option<f64> {
        if self.kind() != Kind::Zset {
            return None;
        }
        let mut score = 0f64;
        let rc = unsafe { raw::RedisModule_ZsetScore.unwrap()(self.ptr.cast(), member.0, &mut score) };
        (rc == raw::REDISMODULE_OK as c_int).then_some(score)
    }

    pub fn zadd(&self, member: Str, score: f64) {
        let mut flags: c_int = 0;
        unsafe { raw::RedisModule_ZsetAdd.unwrap()(self.ptr.cast(), score, member.0, &mut flags) };
    }

    /// Adds `member` unless present (ZADD NX); whether it was added.
    pub fn zadd_nx(&self, member: Str, score: f64) -> bool {
        let mut flags: c_int = raw::REDISMODULE_ZADD_NX as c_int;
        let rc = unsafe { raw::RedisModule_ZsetAdd.unwrap()(self.ptr.cast(), score, member.0, &mut flags) };
        rc == raw::REDISMODULE_OK as c_int && flags & raw::REDISMODULE_ZADD_ADDED as c_int != 0
    }

    pub fn zrem(&self, member: Str) -> bool {
        if self.kind() != Kind::Zset {
            return false;
        }
        let mut deleted: c_int = 0;
        unsafe { raw::RedisModule_ZsetRem.unwrap()(self.ptr.cast(), member.0, &mut deleted) };
        deleted != 0
    }

    /// The highest score in the zset.
    pub fn zmax_score(&self) -> Option<f64> {
        self.zmax_in(f64::NEG_INFINITY, f64::INFINITY)
    }

    /// The highest score in `min..=max`.
    pub fn zmax_in(&self, min: f64, max: f64) -> Option<f64> {
        if self.kind() != Kind::Zset {
            return None;
        }
        unsafe {
            let k = self.ptr.cast();
            if raw::RedisModule_ZsetLastInScoreRange.unwrap()(k, min, max, 0, 0) != raw::REDISMODULE_OK as c_int {
                return None;
            }
            let mut score = 0f64;
            let ele = raw::RedisModule_ZsetRangeCurrentElement.unwrap()(k, &mut score);
            raw::RedisModule_ZsetRangeStop.unwrap()(k);
            (!ele.is_null()).then_some(score)
        }
    }

    /// Up to `limit` members with `min <= score <= max`, lowest score first.
    pub fn zrange(&self, min: f64, max: f64, limit: usize) -> Vec<(Str, f64)> {
        let mut out = Vec::new();
        self.zscan(min, max, |m, s| {
            out.push((m, s));
            out.len() < limit
        });
        out
    }

    /// Visits members with `min <= score <= max`, lowest score first, while `f`
    /// returns true. `f` must not write to this key.
    pub fn zscan(&self, min: f64, max: f64, mut f: impl FnMut(Str, f64) -> bool) {
        if self.kind() != Kind::Zset {
            return;
        }
        unsafe {
            let k = self.ptr.cast();
            if raw::RedisModule_ZsetFirstInScoreRange.unwrap()(k, min, max, 0, 0) != raw::REDISMODULE_OK as c_int {
                return;
            }
            while raw::RedisModule_ZsetRangeEndReached.unwrap()(k) == 0 {
                let mut score = 0f64;
                let ele = raw::RedisModule_ZsetRangeCurrentElement.unwrap()(k, &mut score);
                if !f(Str(ele), score) {
                    break;
                }
                raw::RedisModule_ZsetRangeNext.unwrap()(k);
            }
            raw::RedisModule_ZsetRangeStop.unwrap()(k);
        }
    }

    pub fn hget(&self, field: Str) -> Option<Str> {
        if self.kind() != Kind::Hash {
            return None;
        }
        let mut v: *mut raw::RedisModuleString = std::ptr::null_mut();
        unsafe {
            raw::RedisModule_HashGet.unwrap()(
                self.ptr.cast(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                &mut v as *mut *mut raw::RedisModuleString,
                std::ptr::null_mut::<c_char>(),
            )
        };
        (!v.is_null()).then_some(Str(v))
    }

    pub fn hset(&self, field: Str, value: Str) {
        unsafe {
            raw::RedisModule_HashSet.unwrap()(
                self.ptr.cast(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                value.0,
                std::ptr::null_mut::<c_char>(),
            )
        };
    }

    pub fn hdel(&self, field: Str) {
        if self.kind() != Kind::Hash {
            return;
        }
        unsafe {
            raw::RedisModule_HashSet.unwrap()(
                self.ptr.cast(),
                raw::REDISMODULE_HASH_NONE as c_int,
                field.0,
                HASH_DELETE,
                std::ptr::null_mut::<c_char>(),
            )
        };
    }
}

extern "C" fn config_get(_name: *const c_char, privdata: *mut std::ffi::c_void) -> std::os::raw::c_longlong {
    // SAFETY: privdata is the &'static AtomicI64 given at registration.
    let a = unsafe { &*(privdata as *const std::sync::atomic::AtomicI64) };
    a.load(std::sync::atomic::Ordering::Relaxed)
}

extern "C" fn config_set(
    _name: *const c_char,
    val: std::os::raw::c_longlong,
    privdata: *mut std::ffi::c_void,
    _err: *mut *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: as in config_get; the server checked the range.
    let a = unsafe { &*(privdata as *const std::sync::atomic::AtomicI64) };
    a.store(val, std::sync::atomic::Ordering::Relaxed);
    raw::REDISMODULE_OK as c_int
}

/// Registers `queue.<name>` as a numeric module config backed by `cell`.
pub fn register_numeric_config(
    ctx: *mut raw::RedisModuleCtx,
    name: &str,
    cell: &'static std::sync::atomic::AtomicI64,
    default: i64,
    min: i64,
    max: i64,
) -> Result<(), String> {
    let cname = std::ffi::CString::new(name).expect("no NUL");
    // SAFETY: module load, live context; privdata outlives the module.
    let rc = unsafe {
        raw::RedisModule_RegisterNumericConfig.unwrap()(
            ctx,
            cname.as_ptr(),
            default,
            raw::REDISMODULE_CONFIG_DEFAULT,
            min,
            max,
            Some(config_get),
            Some(config_set),
            None,
            cell as *const _ as *mut std::ffi::c_void,
        )
    };
    if rc == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err(format!("cannot register module config queue.{name}"))
    }
}

/// Applies values given for the module's configs in the server's config.
pub fn load_configs(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // SAFETY: module load, live context, after all configs were registered.
    if unsafe { raw::RedisModule_LoadConfigs.unwrap()(ctx) } == raw::REDISMODULE_OK as c_int {
        Ok(())
    } else {
        Err("cannot load the queue module's configs".into())
    }
}

// Module load and server events.

/// What the server calls for a command (see `command!` in `lib.rs`).
pub type Callback = extern "C" fn(*mut raw::RedisModuleCtx, *mut *mut raw::RedisModuleString, c_int) -> c_int;

/// Sets module options (`RedisModule_SetModuleOptions`); a server without the call
/// is left as it is.
pub fn set_module_options(ctx: *mut raw::RedisModuleCtx, options: c_int) {
    // SAFETY: module load, live context.
    unsafe {
        if let Some(set) = raw::RedisModule_SetModuleOptions {
            set(ctx, options);
        }
    }
}

/// Creates the command `name` (its key at position 1) with `flags` and `callback`,
/// and puts it in the ACL category `category`.
pub fn create_command(
    ctx: *mut raw::RedisModuleCtx,
    name: &str,
    callback: Callback,
    flags: &str,
    category: &str,
) -> Result<(), String> {
    let (cname, cflags) = (CString::new(name).unwrap(), CString::new(flags).unwrap());
    let category = CString::new(category).unwrap();
    // SAFETY: module load, live context; the server copies name, flags and category.
    unsafe {
        if raw::RedisModule_CreateCommand.unwrap()(ctx, cname.as_ptr(), Some(callback), cflags.as_ptr(), 1, 1, 1)
            != raw::REDISMODULE_OK as c_int
        {
            return Err(format!("cannot create command {name}"));
        }
        let cmd = raw::RedisModule_GetCommand.unwrap()(ctx, cname.as_ptr());
        if raw::RedisModule_SetCommandACLCategories.unwrap()(cmd, category.as_ptr()) != raw::REDISMODULE_OK as c_int {
            return Err(format!("cannot set the ACL category of {name}"));
        }
    }
    Ok(())
}

/// Attaches `doc` (`COMMAND DOCS`, `COMMAND INFO`) to the command `name`, created
/// before by [`create_command`].
pub fn set_command_docs(ctx: *mut raw::RedisModuleCtx, name: &str, doc: &Doc) -> Result<(), String> {
    let cname = CString::new(name).unwrap();
    // SAFETY: module load, live context. The structs are plain C data, for which all
    // zeroes is the "not set" value the server expects (a zeroed argument ends the
    // list); every pointer in them points into `keep`, `version`, `specs` or `args`,
    // which outlive the call, and the server copies everything.
    unsafe {
        let cmd = raw::RedisModule_GetCommand.unwrap()(ctx, cname.as_ptr());
        if cmd.is_null() {
            return Err(format!("command {name} not found"));
        }
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
    }
    Ok(())
}

/// Keyspace events (any key, any event): hand the key and its database to
/// `cache::key_changed`.
extern "C" fn on_keyspace_event(
    ctx: *mut raw::RedisModuleCtx,
    _type: c_int,
    _event: *const c_char,
    key: *mut raw::RedisModuleString,
) -> c_int {
    // SAFETY: the server passes a live context and key string for the call.
    let (key, db) = unsafe {
        let mut len = 0usize;
        let p = raw::RedisModule_StringPtrLen.unwrap()(key, &mut len);
        (std::slice::from_raw_parts(p.cast::<u8>(), len), raw::RedisModule_GetSelectedDb.unwrap()(ctx))
    };
    crate::cache::key_changed(db, key);
    0
}

/// SWAPDB: everything the cache keeps is stale.
extern "C" fn on_swapdb(
    _ctx: *mut raw::RedisModuleCtx,
    _eid: raw::RedisModuleEvent,
    _subevent: u64,
    _data: *mut std::ffi::c_void,
) {
    crate::cache::forget_all();
}

/// Subscribes the cache to keyspace events and SWAPDB (see `cache::subscribe`).
pub fn subscribe_cache(ctx: *mut raw::RedisModuleCtx) -> Result<(), String> {
    // SAFETY: module load, live context; the callbacks live as long as the module.
    let ok = unsafe {
        raw::RedisModule_SubscribeToKeyspaceEvents.unwrap()(
            ctx,
            raw::REDISMODULE_NOTIFY_ALL as c_int,
            Some(on_keyspace_event),
        ) == raw::REDISMODULE_OK as c_int
            && raw::RedisModule_SubscribeToServerEvent.unwrap()(
                ctx,
                raw::RedisModuleEvent { id: raw::REDISMODULE_EVENT_SWAPDB, dataver: 1 },
                Some(on_swapdb),
            ) == raw::REDISMODULE_OK as c_int
    };
    if ok {
        Ok(())
    } else {
        Err("cannot subscribe to keyspace and SWAPDB events".into())
    }
}
