#!lua name=queue
--[[
The waiting room as a Valkey Functions library, for managed Valkey that cannot load
modules. Every module command has a twin here, named by lowercasing it and replacing
the dot with an underscore, called with the queue as its one key:

  QUEUE.ENTER Q u n   <=>   FCALL queue_enter 1 Q u n

Same keys, same replies (byte for byte), same error texts, same semantics as the
module (valkey-module/, logic in crates/queue-core/), so a queue can be served by
either, alternately, on the same data. Writes replicate as effects, like the module's.

Load it with the client crate (which does it by itself) or scripts/load-lua.sh: both
replace the entropy placeholder below with random bytes, which ticket secrets are
derived from.
]]

local VERSION = "2"
local ENTROPY = "__QUEUE_ENTROPY__"
-- Tests load the library with this set to true: a queue's commands then read the
-- time from the string key queue:{Q}:clock when it exists (as the module's
-- `test-clock yes` load argument does). Never set in production.
local TEST_CLOCK = false

local CHUNK = 32
local LAYOUT_FIELD, LAYOUT = "layout", 2
local MAX_NAME_LEN = 64
local MAX_NICKNAME_LEN = 32
local SECRET_LEN = 16
local MAX_PROMOTE = 100000
local SWEEP_BUDGET = 256
local RATE_WINDOW_MS = 10000
local MAX_REFILL_MS = 1000000000
local ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"

-- Settings, in the order QUEUE.CONFIG GET * and QUEUE.INFO list them.
local DAY_MS = 86400000
local FIELDS = {
  { name = "soft_cap", default = 1000, min = 0, max = 10000000 },
  { name = "hard_cap", default = 0, min = 0, max = 10000000 },
  { name = "rate", default = 0, min = 0, max = 1000000 },
  { name = "burst", default = 0, min = 0, max = 10000000 },
  { name = "batch_max", default = 1000, min = 1, max = 100000 },
  { name = "ticket_ttl", default = 60000, min = 100, max = DAY_MS },
  { name = "session_lease", default = 30000, min = 100, max = DAY_MS },
  { name = "abandon_after", default = 60000, min = 0, max = DAY_MS },
}
local SOFT_CAP, HARD_CAP, RATE, BURST, BATCH_MAX, TICKET_TTL, SESSION_LEASE, ABANDON_AFTER = 1, 2, 3, 4, 5, 6, 7, 8

-- Errors: the exact texts of queue-core's QueueError.
local function fail(msg)
  return redis.error_reply(msg)
end
local function arity(cmd)
  return fail("ERR wrong number of arguments for '" .. cmd .. "' command")
end
local E_SYNTAX = "ERR syntax error"
local E_NOT_INTEGER = "ERR value is not an integer or out of range"
local E_QUEUE = "ERR invalid queue name: 1 to 64 characters from A-Z a-z 0-9 . _ : -"
local E_USER = "ERR invalid userId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"
local E_NICK = "ERR invalid nickname: 1 to 32 bytes, no control characters"
local E_TICKET = "ERR invalid ticketId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"
local E_WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"
local E_NOTICKET = "NOTICKET unknown or already used ticket"
local E_EXPIRED = "EXPIRED ticket has expired"
local E_INSIDE = "INSIDE user is already inside"
local E_FULL = "FULL hard cap reached"
local function out_of_range(what, min, max)
  return string.format("ERR %s must be an integer from %d to %d", what, min, max)
end

local function fmt(n)
  return string.format("%d", n)
end

-- A decimal integer the way Valkey parses one (no '+', no leading zeros, no "-0"),
-- or nil. Values beyond 2^53 lose precision, but every range checked is far below.
local function parse_int(s)
  if s == "0" then
    return 0
  end
  if type(s) ~= "string" or not s:find("^%-?[1-9]%d*$") then
    return nil
  end
  local digits = s:sub(1, 1) == "-" and s:sub(2) or s
  if #digits > 19 then
    return nil
  end
  if #digits == 19 then
    local limit = s:sub(1, 1) == "-" and "9223372036854775808" or "9223372036854775807"
    if digits > limit then
      return nil
    end
  end
  return tonumber(s)
end

-- Names: queue names, userIds and ticketIds.
local function valid_name(s, allow_at)
  if #s < 1 or #s > MAX_NAME_LEN then
    return false
  end
  local pattern = allow_at and "^[%w%._:@%-]+$" or "^[%w%._:%-]+$"
  return s:find(pattern) ~= nil
end
local function valid_nickname(s)
  return #s >= 1 and #s <= MAX_NICKNAME_LEN and not s:find("[%z\1-\31\127]")
end

-- The state of one call on one queue: key names, settings and stats read once.
local Q = {}
Q.__index = Q

local function open(name)
  if not valid_name(name, false) then
    return nil
  end
  local prefix = "queue:{" .. name .. "}:"
  return setmetatable({
    name = name,
    prefix = prefix,
    waiting = prefix .. "waiting",
    sessions = prefix .. "sessions",
    active = prefix .. "active",
    stats_key = prefix .. "stats",
    config_key = prefix .. "config",
    settings = {},
    stats = {},
  }, Q)
end

local KIND = { waiting = "zset", sessions = "zset", active = "hash", stats_key = "hash", config_key = "hash" }
local ALL_PARTS = { "waiting", "sessions", "active", "stats_key" }

-- WRONGTYPE unless each part is missing or of its type (checked before any write).
function Q:check(parts)
  for _, p in ipairs(parts) do
    local t = redis.call("TYPE", self[p]).ok
    if t ~= "none" and t ~= KIND[p] then
      return false
    end
  end
  return true
end

-- A read that treats a key of another type as missing, as the module does; a nil
-- reply (false in Lua) comes back as nil.
local function read(...)
  local r = redis.pcall(...)
  if r == false or (type(r) == "table" and r.err) then
    return nil
  end
  return r
end

local function now_ms()
  local t = redis.call("TIME")
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

-- The time, read once per command (see TEST_CLOCK).
function Q:now()
  if TEST_CLOCK then
    local t = tonumber(read("GET", self.prefix .. "clock") or nil)
    if t then
      return t
    end
  end
  return now_ms()
end

local function check_value(field, raw)
  local v = parse_int(raw)
  if v == nil then
    return nil, E_NOT_INTEGER
  end
  if v < field.min or v > field.max then
    return nil, out_of_range(field.name, field.min, field.max)
  end
  return v
end

-- A name as it may appear in an error text: bytes outside printable ASCII become '?'.
local function printable(name)
  return (name:gsub("[^\32-\126]", "?"))
end

local function field_index(name)
  local lower = name:lower()
  for i, f in ipairs(FIELDS) do
    if f.name == lower then
      return i
    end
  end
  return nil
end

function Q:setting(i)
  local v = self.settings[i]
  if v == nil then
    local raw = read("HGET", self.config_key, FIELDS[i].name)
    v = raw and check_value(FIELDS[i], raw) or FIELDS[i].default
    self.settings[i] = v
  end
  return v
end

function Q:stat(field)
  local v = self.stats[field]
  if v == nil then
    v = parse_int(read("HGET", self.stats_key, field) or "") or 0
    self.stats[field] = v
  end
  return v
end

function Q:set_stat(field, v)
  self.stats[field] = v
  redis.call("HSET", self.stats_key, field, fmt(v))
end

function Q:add_stat(field, by)
  if by ~= 0 then
    self:set_stat(field, self:stat(field) + by)
  end
end

function Q:joining()
  return self:stat("joining")
end

function Q:p_max()
  if self:joining() > 0 then
    return self:stat("p_max")
  end
  return 0
end

function Q:is_promoted(seq)
  return seq <= self:p_max()
end

function Q:waiting_count()
  return (read("ZCARD", self.waiting) or 0) - self:joining()
end

-- Token bucket, in thousandths of a token.
local function bucket_size(q)
  local b = q:setting(BURST) > 0 and q:setting(BURST) or q:setting(RATE)
  return math.max(b, 1)
end

function Q:bucket(now)
  local size = bucket_size(self)
  local raw = read("HGET", self.stats_key, "tokens")
  local milli = raw and parse_int(raw)
  if milli == nil then
    return { milli = size * 1000, at = now }
  end
  local at = self:stat("tokens_at")
  local elapsed = math.min(math.max(now - at, 0), MAX_REFILL_MS)
  local cap = size * 1000
  local tokens
  if milli >= cap then
    tokens = cap
  else
    tokens = math.min(milli + elapsed * self:setting(RATE), cap)
  end
  return { milli = tokens, at = math.max(now, at) }
end

local function whole(b)
  return math.floor(b.milli / 1000)
end

function Q:save_bucket(b)
  self:set_stat("tokens", b.milli)
  self:set_stat("tokens_at", b.at)
end

function Q:rate_window()
  return { at = self:stat("rate_at"), count = self:stat("rate_count"), per_minute = self:stat("rate_per_min") }
end

local function record_window(w, now, admitted)
  local n = { at = w.at, count = w.count, per_minute = w.per_minute }
  if n.at == 0 then
    n.at = now
  end
  n.count = n.count + admitted
  local span = now - n.at
  if span >= RATE_WINDOW_MS then
    n.per_minute = math.floor(n.count * 60000 / span)
    n.at = now
    n.count = 0
  end
  return n
end

function Q:save_rate_window(old, new)
  if new.at ~= old.at then
    self:set_stat("rate_at", new.at)
  end
  if new.count ~= old.count then
    self:set_stat("rate_count", new.count)
  end
  if new.per_minute ~= old.per_minute then
    self:set_stat("rate_per_min", new.per_minute)
  end
end

local function free_slots(soft_cap, active, joining)
  return math.max(soft_cap - active - joining, 0)
end

local function estimated_wait_seconds(rank, measured_per_minute, rate_per_second)
  local per_minute = measured_per_minute > 0 and measured_per_minute or rate_per_second * 60
  if per_minute <= 0 or rank <= 0 then
    return nil
  end
  return math.floor((rank * 60 + per_minute - 1) / per_minute)
end

local function seen_refresh_ms(abandon_after)
  if abandon_after <= 0 then
    return nil
  end
  return math.min(math.max(math.floor(abandon_after / 8), 250), 30000)
end

local function is_abandoned(seen, now, abandon_after)
  return abandon_after > 0 and now - seen > abandon_after
end

-- Records: "<lastSeenMs>:<nickname>" while waiting, "P<expiryMs>|<secret>|<nickname>"
-- once promoted, in the hash of the chunk holding the sequence number.
function Q:chunk_key(seq)
  return self.prefix .. "w:" .. fmt(math.floor(seq / CHUNK))
end

local function decode(v)
  if not v then
    return nil
  end
  if v:sub(1, 1) == "P" then
    local a = v:find("|", 2, true)
    if not a then
      return nil
    end
    local b = v:find("|", a + 1, true)
    if not b then
      return nil
    end
    local expiry = parse_int(v:sub(2, a - 1))
    if expiry == nil then
      return nil
    end
    return { promoted = true, expiry = expiry, secret = v:sub(a + 1, b - 1), nickname = v:sub(b + 1) }
  end
  local colon = v:find(":", 1, true)
  if not colon then
    return nil
  end
  local seen = parse_int(v:sub(1, colon - 1))
  if seen == nil then
    return nil
  end
  return { promoted = false, seen = seen, nickname = v:sub(colon + 1) }
end

function Q:record(seq)
  return decode(read("HGET", self:chunk_key(seq), fmt(seq)))
end

function Q:touch(seq, now, nickname)
  redis.call("HSET", self:chunk_key(seq), fmt(seq), fmt(now) .. ":" .. nickname)
end

function Q:add_waiter(user, seq, now, nickname)
  if self:stat(LAYOUT_FIELD) ~= LAYOUT then
    self:set_stat(LAYOUT_FIELD, LAYOUT)
  end
  redis.call("ZADD", self.waiting, fmt(seq), user)
  self:touch(seq, now, nickname)
end

-- The number for a newcomer: after everyone in line and after every number that
-- holds a ticket (see the module's Queue::next_seq).
function Q:next_seq()
  local last = redis.call("ZRANGE", self.waiting, -1, -1, "WITHSCORES")
  return math.max(last[2] and tonumber(last[2]) or 0, self:p_max()) + 1
end

-- Repairs, once, data written by releases that numbered newcomers after the last one
-- in line, which could put a waiting user among the ticket holders (see the module's
-- Queue::ensure_layout). Returns false on a key of the wrong type.
function Q:ensure_layout()
  if self:stat(LAYOUT_FIELD) == LAYOUT then
    return true
  end
  if (read("ZCARD", self.waiting) or 0) == 0 and self:stat("joining") == 0 and self:stat("p_max") == 0 then
    return true
  end
  if not self:check({ "waiting", "stats_key" }) then
    return false
  end
  self:repair()
  self:set_stat(LAYOUT_FIELD, LAYOUT)
  return true
end

-- Recounts joining and p_max from the records at the head of the line and renumbers
-- waiting users found among the ticket holders, in their order, after the last
-- holder; later waiting users move up only as far as needed to keep the order.
function Q:repair()
  local stored_p_max = self:stat("p_max")
  local head = {}
  self:scan_waiting("-inf", "+inf", math.huge, function(user, seq)
    local value = read("HGET", self:chunk_key(seq), fmt(seq))
    local rec = decode(value)
    local holds = rec ~= nil and rec.promoted
    if seq > stored_p_max and not holds then
      return false
    end
    head[#head + 1] = { user = user, seq = seq, value = value, holds = holds }
    return true
  end)
  local holders, last_holder = 0, 0
  for _, m in ipairs(head) do
    if m.holds then
      holders = holders + 1
      last_holder = math.max(last_holder, m.seq)
    end
  end
  local moves, nxt, all_moved = {}, last_holder + 1, true
  for _, m in ipairs(head) do
    if not m.holds then
      local new = math.max(m.seq, nxt)
      if new == m.seq then
        all_moved = false
        break
      end
      moves[#moves + 1] = { user = m.user, seq = m.seq, value = m.value, new = new }
      nxt = new + 1
    end
  end
  if #moves > 0 and all_moved then
    local start = #head > 0 and head[#head].seq or nil
    self:scan_waiting(start and ("(" .. fmt(start)) or "-inf", "+inf", math.huge, function(user, seq)
      local new = math.max(seq, nxt)
      if new == seq then
        return false
      end
      moves[#moves + 1] = { user = user, seq = seq, value = read("HGET", self:chunk_key(seq), fmt(seq)), new = new }
      nxt = new + 1
      return true
    end)
  end
  local taken = {}
  for _, m in ipairs(moves) do
    taken[m.new] = true
  end
  for _, m in ipairs(moves) do
    if m.value and not taken[m.seq] then
      redis.call("HDEL", self:chunk_key(m.seq), fmt(m.seq))
    end
  end
  for _, m in ipairs(moves) do
    redis.call("ZADD", self.waiting, fmt(m.new), m.user)
    if m.value then
      redis.call("HSET", self:chunk_key(m.new), fmt(m.new), m.value)
    end
  end
  self:set_stat("joining", holders)
  self:set_stat("p_max", last_holder)
end

function Q:remove(user, seq, was_promoted)
  redis.call("ZREM", self.waiting, user)
  redis.call("HDEL", self:chunk_key(seq), fmt(seq))
  if was_promoted then
    local left = self:joining() - 1
    self:set_stat("joining", left)
    if left == 0 then
      self:set_stat("p_max", 0)
    end
  end
end

-- Ticket secrets: 96 bits drawn from the library's entropy, the clock, a per-call
-- counter and Lua's generator, through SHA1, as 16 base64url characters.
local secret_counter = 0
local function next_secret(now, seq)
  secret_counter = secret_counter + 1
  local h = redis.sha1hex(table.concat({ ENTROPY, fmt(now), fmt(seq), fmt(secret_counter), fmt(math.random(0, 2147483646)) }, ":"))
  local out = {}
  for i = 0, 7 do
    local v = tonumber(h:sub(3 * i + 1, 3 * i + 3), 16)
    local hi, lo = math.floor(v / 64), v % 64
    out[#out + 1] = ALPHABET:sub(hi + 1, hi + 1)
    out[#out + 1] = ALPHABET:sub(lo + 1, lo + 1)
  end
  return table.concat(out)
end

local function ticket_id(seq, secret)
  return fmt(seq) .. "." .. secret
end

local function parse_ticket(t)
  local dot = t:find(".", 1, true)
  if not dot then
    return nil
  end
  local seq = parse_int(t:sub(1, dot - 1))
  if seq == nil or seq <= 0 then
    return nil
  end
  local secret = t:sub(dot + 1)
  if #secret ~= SECRET_LEN or not secret:find("^[%w_%-]+$") then
    return nil
  end
  return seq, secret
end

function Q:promote_user(seq, nickname, now)
  local secret = next_secret(now, seq)
  local expiry = now + self:setting(TICKET_TTL)
  redis.call("HSET", self:chunk_key(seq), fmt(seq), "P" .. fmt(expiry) .. "|" .. secret .. "|" .. nickname)
  return ticket_id(seq, secret)
end

function Q:note_promoted(n, p_max)
  if n > 0 then
    self:set_stat("joining", self:joining() + n)
    self:set_stat("p_max", p_max)
  end
end

function Q:user_at(seq)
  local r = redis.call("ZRANGE", self.waiting, fmt(seq), fmt(seq), "BYSCORE", "LIMIT", 0, 1)
  return r[1]
end

function Q:open_session(user, nickname, untl)
  redis.call("ZADD", self.sessions, fmt(untl), user)
  redis.call("HSET", self.active, user, nickname)
end

function Q:close_session(user)
  redis.call("ZREM", self.sessions, user)
  redis.call("HDEL", self.active, user)
end

-- Members of `waiting` with min <= score <= max, in order, as {user, seq} pairs,
-- fetched page by page while `visit` returns true.
function Q:scan_waiting(min, max, limit, visit)
  local offset, page = 0, 64
  while limit > 0 do
    local n = math.min(page, limit)
    local r = redis.call("ZRANGE", self.waiting, min, max, "BYSCORE", "LIMIT", offset, n, "WITHSCORES")
    for i = 1, #r, 2 do
      if not visit(r[i], tonumber(r[i + 1])) then
        return
      end
    end
    if #r < 2 * n then
      return
    end
    offset, limit = offset + n, limit - n
  end
end

-- Drops expired tickets (in issue order, up to the first still good) and leases.
function Q:reap(now)
  local gone = {}
  local p_max = self:p_max()
  if p_max > 0 then
    self:scan_waiting("-inf", fmt(p_max), math.huge, function(user, seq)
      local rec = self:record(seq)
      if rec and rec.promoted and rec.expiry <= now then
        gone[#gone + 1] = { user, seq }
        return true
      end
      return false
    end)
  end
  for _, g in ipairs(gone) do
    self:remove(g[1], g[2], true)
  end
  local lapsed = read("ZRANGE", self.sessions, "-inf", fmt(now), "BYSCORE") or {}
  for _, u in ipairs(lapsed) do
    self:close_session(u)
  end
  self:add_stat("expired", #gone)
  self:add_stat("lapsed", #lapsed)
  return #gone, #lapsed
end

function Q:live_sessions(now)
  return (read("ZCARD", self.sessions) or 0) - (read("ZCOUNT", self.sessions, "-inf", fmt(now)) or 0)
end

-- Where a user stands as of now.
function Q:standing(user, now)
  local r = read("ZRANK", self.waiting, user, "WITHSCORE")
  if r then
    local rank, seq = r[1], tonumber(r[2])
    local rec = self:record(seq)
    if rec and not rec.promoted then
      return { status = "WAITING", seq = seq, rank = rank + 1 - self:joining(), seen = rec.seen, nickname = rec.nickname }
    end
    if rec and rec.promoted and rec.expiry > now then
      return { status = "PROMOTED", ticket = ticket_id(seq, rec.secret), nickname = rec.nickname }
    end
    return { status = "UNKNOWN" }
  end
  local exp = read("ZSCORE", self.sessions, user)
  if exp and tonumber(exp) > now then
    return { status = "ACTIVE", nickname = read("HGET", self.active, user) }
  end
  return { status = "UNKNOWN" }
end

function Q:eta(st)
  if st.status ~= "WAITING" then
    return nil
  end
  local measured = self:stat("rate_per_min")
  return estimated_wait_seconds(st.rank, measured, measured > 0 and 0 or self:setting(RATE))
end

local function or_false(v)
  if v == nil then
    return false
  end
  return v
end

local function standing_reply(user, st, eta)
  return {
    map = {
      status = st.status,
      rank = st.status == "WAITING" and st.rank or 0,
      userId = user,
      nickname = or_false(st.nickname),
      ticketId = or_false(st.ticket),
      estimatedWaitSeconds = or_false(eta),
    },
  }
end

-- Looks up one user for STATUS/RANKS, noting that a waiting user was heard from.
function Q:observe(user, now)
  local st = self:standing(user, now)
  if st.status == "WAITING" then
    local every = seen_refresh_ms(self:setting(ABANDON_AFTER))
    if every and now - st.seen >= every then
      self:touch(st.seq, now, st.nickname)
    end
  end
  return st
end

-- Commands.

-- The checks every command starts with, in the module's order: arity, then each
-- {ok, error} argument check, then the queue name, then the types of the keys it may
-- write. Returns the queue, or nil and the error reply.
local function begin(cmd, keys, arity_ok, checks, parts)
  if #keys ~= 1 or not arity_ok then
    return nil, arity(cmd)
  end
  for _, c in ipairs(checks) do
    if not c[1] then
      return nil, fail(c[2])
    end
  end
  local q = open(keys[1])
  if not q then
    return nil, fail(E_QUEUE)
  end
  if not q:check(parts) then
    return nil, fail(E_WRONGTYPE)
  end
  return q
end

-- One {ok, error} check per userId.
local function user_checks(users)
  local checks = {}
  for _, u in ipairs(users) do
    checks[#checks + 1] = { valid_name(u, true), E_USER }
  end
  return checks
end

local function queue_enter(keys, args)
  local user, nickname = args[1] or "", args[2] or ""
  local checks = { { valid_name(user, true), E_USER }, { valid_nickname(nickname), E_NICK } }
  local q, e = begin("queue.enter", keys, #args == 2, checks, { "waiting", "stats_key" })
  if not q then
    return e
  end
  if not q:ensure_layout() then
    return fail(E_WRONGTYPE)
  end
  local now = q:now()

  local old = tonumber(redis.call("ZSCORE", q.waiting, user) or nil)
  local old_waits = (old ~= nil and not q:is_promoted(old)) and 1 or 0
  local may_admit_now = q:waiting_count() == old_waits and q:setting(SOFT_CAP) > 0
  if may_admit_now and not q:check(ALL_PARTS) then
    return fail(E_WRONGTYPE)
  end
  if old ~= nil then
    q:remove(user, old, q:is_promoted(old))
  end
  -- After everyone in line and every ticket holder.
  local seq = q:next_seq()

  if may_admit_now then
    q:reap(now)
    local free = free_slots(q:setting(SOFT_CAP), redis.call("ZCARD", q.sessions), q:joining())
    local bucket = q:setting(RATE) > 0 and q:bucket(now) or nil
    if free > 0 and (bucket == nil or whole(bucket) >= 1) then
      q:add_waiter(user, seq, now, nickname)
      local ticket = q:promote_user(seq, nickname, now)
      q:note_promoted(1, seq)
      if bucket then
        q:save_bucket({ milli = bucket.milli - 1000, at = bucket.at })
      end
      local w = q:rate_window()
      q:save_rate_window(w, record_window(w, now, 1))
      q:add_stat("promoted", 1)
      return standing_reply(user, { status = "PROMOTED", ticket = ticket, nickname = nickname }, nil)
    end
  end
  q:add_waiter(user, seq, now, nickname)
  local st = { status = "WAITING", seq = seq, rank = q:waiting_count(), seen = now, nickname = nickname }
  return standing_reply(user, st, q:eta(st))
end

local function queue_status(keys, args)
  local user = args[1] or ""
  local q, e = begin("queue.status", keys, #args == 1, user_checks({ user }), { "waiting" })
  if not q then
    return e
  end
  if not q:ensure_layout() then
    return fail(E_WRONGTYPE)
  end
  local now = q:now()
  local st = q:observe(user, now)
  return standing_reply(user, st, q:eta(st))
end

local function queue_ranks(keys, args)
  local q, e = begin("queue.ranks", keys, #args >= 1, user_checks(args), { "waiting" })
  if not q then
    return e
  end
  if not q:ensure_layout() then
    return fail(E_WRONGTYPE)
  end
  local now = q:now()
  local out = {}
  for _, user in ipairs(args) do
    local st = q:observe(user, now)
    out[#out + 1] = standing_reply(user, st, q:eta(st))
  end
  return out
end

local function queue_leave(keys, args)
  local user = args[1] or ""
  local q, e = begin("queue.leave", keys, #args == 1, user_checks({ user }), { "waiting", "stats_key" })
  if not q then
    return e
  end
  if not q:ensure_layout() then
    return fail(E_WRONGTYPE)
  end
  local seq = tonumber(redis.call("ZSCORE", q.waiting, user) or nil)
  if seq ~= nil then
    q:remove(user, seq, q:is_promoted(seq))
    q:add_stat("left", 1)
    return 1
  end
  return 0
end

-- Examines up to SWEEP_BUDGET waiters after the sweep cursor and drops those not
-- heard from within abandon_after; wraps at the end.
function Q:sweep(abandon_after, now, p_max)
  if abandon_after <= 0 or self:waiting_count() == 0 then
    return 0
  end
  local cursor = math.max(self:stat("sweep"), p_max)
  local batch = {}
  self:scan_waiting(fmt(cursor + 1), "+inf", SWEEP_BUDGET, function(user, seq)
    batch[#batch + 1] = { user, seq }
    return true
  end)
  local nxt = 0
  if #batch >= SWEEP_BUDGET then
    nxt = batch[#batch][2]
  end
  local dropped = 0
  for _, b in ipairs(batch) do
    local rec = self:record(b[2])
    local abandoned
    if rec == nil then
      abandoned = true
    elseif rec.promoted then
      abandoned = false
    else
      abandoned = is_abandoned(rec.seen, now, abandon_after)
    end
    if abandoned then
      self:remove(b[1], b[2], false)
      dropped = dropped + 1
    end
  end
  if nxt ~= cursor then
    self:set_stat("sweep", nxt)
  end
  return dropped
end

local function queue_promote(keys, args)
  local max = args[2] and parse_int(args[2])
  local checks = {}
  if #args == 2 then
    checks = {
      { args[1]:upper() == "MAX", E_SYNTAX },
      { max ~= nil, E_NOT_INTEGER },
      { max ~= nil and max >= 0 and max <= MAX_PROMOTE, out_of_range("MAX", 0, MAX_PROMOTE) },
    }
  end
  local q, e = begin("queue.promote", keys, #args == 0 or #args == 2, checks, ALL_PARTS)
  if not q then
    return e
  end
  if not q:ensure_layout() then
    return fail(E_WRONGTYPE)
  end
  local soft_cap, abandon_after = q:setting(SOFT_CAP), q:setting(ABANDON_AFTER)
  local now = q:now()

  local tickets_expired, leases_expired = q:reap(now)
  local free = free_slots(soft_cap, redis.call("ZCARD", q.sessions), q:joining())
  local bucket = q:setting(RATE) > 0 and q:bucket(now) or nil
  local n = math.min(free, q:setting(BATCH_MAX))
  if bucket then
    n = math.min(n, whole(bucket))
  end
  if max then
    n = math.min(n, max)
  end
  n = math.max(n, 0)

  local promoted, dropped = 0, 0
  local p_max = q:p_max()
  if n > 0 then
    local head = {}
    q:scan_waiting(fmt(p_max + 1), "+inf", n + SWEEP_BUDGET, function(user, seq)
      head[#head + 1] = { user, seq }
      return true
    end)
    for _, h in ipairs(head) do
      if promoted == n then
        break
      end
      local user, seq = h[1], h[2]
      local rec = q:record(seq)
      if rec and not rec.promoted and not is_abandoned(rec.seen, now, abandon_after) then
        q:promote_user(seq, rec.nickname, now)
        promoted = promoted + 1
        p_max = seq
      else
        q:remove(user, seq, false)
        dropped = dropped + 1
      end
    end
  end
  q:note_promoted(promoted, p_max)
  dropped = dropped + q:sweep(abandon_after, now, p_max)

  if bucket then
    q:save_bucket({ milli = bucket.milli - promoted * 1000, at = bucket.at })
  end
  local w = q:rate_window()
  q:save_rate_window(w, record_window(w, now, promoted))
  q:add_stat("promoted", promoted)
  q:add_stat("dropped", dropped)

  local active, joining = redis.call("ZCARD", q.sessions), q:joining()
  return {
    map = {
      promoted = promoted,
      tickets_expired = tickets_expired,
      leases_expired = leases_expired,
      dropped = dropped,
      waiting = q:waiting_count(),
      joining = joining,
      active = active,
      available_slots = free_slots(soft_cap, active, joining),
    },
  }
end

local function ticket_claim(keys, args)
  local ticket = args[1] or ""
  local q, e = begin("ticket.claim", keys, #args == 1, { { valid_name(ticket, true), E_TICKET } }, ALL_PARTS)
  if not q then
    return e
  end
  if not q:ensure_layout() then
    return fail(E_WRONGTYPE)
  end
  local now = q:now()

  local seq, secret = parse_ticket(ticket)
  if not seq then
    return fail(E_NOTICKET)
  end
  local rec = q:record(seq)
  if not rec or not rec.promoted or rec.secret ~= secret then
    return fail(E_NOTICKET)
  end
  if rec.expiry <= now then
    return fail(E_EXPIRED)
  end
  local user = q:user_at(seq)
  if not user then
    return fail(E_NOTICKET)
  end
  local exp = redis.call("ZSCORE", q.sessions, user)
  if exp and tonumber(exp) > now then
    return fail(E_INSIDE)
  end
  local hard_cap = q:setting(HARD_CAP)
  if hard_cap > 0 and q:live_sessions(now) >= hard_cap then
    return fail(E_FULL)
  end

  q:remove(user, seq, true)
  local lease = q:setting(SESSION_LEASE)
  q:open_session(user, rec.nickname, now + lease)
  q:add_stat("claimed", 1)
  return { map = { userId = user, nickname = rec.nickname, ticketId = ticket, leaseMs = lease } }
end

local function session_heartbeat(keys, args)
  local q, e = begin("session.heartbeat", keys, #args >= 1, user_checks(args), { "sessions" })
  if not q then
    return e
  end
  local now = q:now()
  local untl = now + q:setting(SESSION_LEASE)
  local out = {}
  for _, user in ipairs(args) do
    local exp = redis.call("ZSCORE", q.sessions, user)
    if exp and tonumber(exp) > now then
      redis.call("ZADD", q.sessions, fmt(untl), user)
      out[#out + 1] = 1
    else
      out[#out + 1] = 0
    end
  end
  return out
end

local function session_end(keys, args)
  local user = args[1] or ""
  local q, e = begin("session.end", keys, #args == 1, user_checks({ user }), { "sessions", "active", "stats_key" })
  if not q then
    return e
  end
  if redis.call("ZSCORE", q.sessions, user) then
    q:close_session(user)
    q:add_stat("ended", 1)
    return 1
  end
  return 0
end

local COUNTERS = { "promoted", "claimed", "expired", "dropped", "left", "ended", "lapsed" }

local function queue_info(keys, args)
  local q, e = begin("queue.info", keys, #args == 0, {}, { "waiting", "sessions", "stats_key", "config_key" })
  if not q then
    return e
  end
  local now = q:now()
  local active, joining = q:live_sessions(now), q:joining()
  local soft_cap = q:setting(SOFT_CAP)
  local tokens = q:setting(RATE) > 0 and whole(q:bucket(now)) or -1
  local m = {
    waiting = q:waiting_count(),
    joining = joining,
    active = active,
    available_slots = free_slots(soft_cap, active, joining),
    tokens = tokens,
    admission_rate_per_min = q:stat("rate_per_min"),
  }
  for i, f in ipairs(FIELDS) do
    m[f.name] = q:setting(i)
  end
  for _, c in ipairs(COUNTERS) do
    m[c] = q:stat(c)
  end
  return { map = m }
end

local function queue_config(keys, args)
  if #keys ~= 1 or #args < 2 then
    return arity("queue.config")
  end
  local sub = args[1]:upper()
  if sub == "GET" then
    local q, e = begin("queue.config", keys, #args == 2, {}, { "config_key" })
    if not q then
      return e
    end
    if args[2] == "*" then
      local m = {}
      for i, f in ipairs(FIELDS) do
        m[f.name] = q:setting(i)
      end
      return { map = m }
    end
    local i = field_index(args[2])
    if not i then
      return fail("ERR unknown config field '" .. printable(args[2]) .. "'")
    end
    return q:setting(i)
  elseif sub == "SET" then
    if #args % 2 ~= 1 then
      return arity("queue.config")
    end
    local pairs_ = {}
    for j = 2, #args, 2 do
      local i = field_index(args[j])
      if not i then
        return fail("ERR unknown config field '" .. printable(args[j]) .. "'")
      end
      local v, e = check_value(FIELDS[i], args[j + 1])
      if v == nil then
        return fail(e)
      end
      pairs_[#pairs_ + 1] = FIELDS[i].name
      pairs_[#pairs_ + 1] = fmt(v)
    end
    local q, e = begin("queue.config", keys, true, {}, { "config_key" })
    if not q then
      return e
    end
    redis.call("HSET", q.config_key, unpack(pairs_))
    return redis.status_reply("OK")
  end
  return fail(E_SYNTAX)
end

local function queue_version(keys, args)
  return VERSION
end

redis.register_function({ function_name = "queue_enter", callback = queue_enter })
redis.register_function({ function_name = "queue_status", callback = queue_status, flags = { "allow-oom" } })
redis.register_function({ function_name = "queue_ranks", callback = queue_ranks, flags = { "allow-oom" } })
redis.register_function({ function_name = "queue_leave", callback = queue_leave, flags = { "allow-oom" } })
redis.register_function({ function_name = "queue_promote", callback = queue_promote })
redis.register_function({ function_name = "ticket_claim", callback = ticket_claim })
redis.register_function({ function_name = "session_heartbeat", callback = session_heartbeat, flags = { "allow-oom" } })
redis.register_function({ function_name = "session_end", callback = session_end, flags = { "allow-oom" } })
redis.register_function({ function_name = "queue_info", callback = queue_info, flags = { "no-writes" } })
redis.register_function({ function_name = "queue_config", callback = queue_config, flags = { "allow-oom" } })
redis.register_function({ function_name = "queue_version", callback = queue_version, flags = { "no-writes" } })
