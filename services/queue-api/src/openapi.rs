//! The OpenAPI 3.1 description of the HTTP API, served at /api/openapi.json.

use serde_json::{json, Value};

pub fn document() -> Value {
    let error = json!({ "$ref": "#/components/schemas/Error" });
    let err = |d: &str| json!({ "description": d, "content": { "application/json": { "schema": error } } });
    let standing = json!({ "$ref": "#/components/schemas/Standing" });
    let ok_standing =
        json!({ "description": "where the user stands", "content": { "application/json": { "schema": standing } } });
    let challenge = json!({ "$ref": "#/components/schemas/Challenge" });
    // A queue nobody declared (error `unknown_queue`): only `default`, queues with a
    // setting written, and those in the registry exist.
    let unknown_queue = "no such queue (error unknown_queue): queues exist once an operator makes them (the back office, QUEUE.CONFIG, a gate route); default always exists";
    // Names as queue-core checks them.
    let queue_name = json!({ "type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$", "default": "default" });
    let user_id = json!({ "type": "string", "pattern": "^[A-Za-z0-9._:@-]{1,64}$" });
    let queue_query = json!({ "name": "queue", "in": "query", "required": false, "schema": queue_name });
    let who = json!([{ "name": "userId", "in": "query", "required": false, "schema": user_id,
                        "description": "the person's userId; may be left out with an identity token (the token's person is meant), required without one" },
                      queue_query]);
    // The app login's token (docs/http-api.md, "Identity"): optional, as Authorization
    // or the cookie the operator names.
    let identity = json!([{}, { "identity": [] }]);
    let unauthorized = "identity needed (error identity_required: the queue's entry is identified or invite, or the userId is one derived from an identity) or the identity token refused (error identity_invalid, with reason: expired, not_yet_valid, wrong_issuer, wrong_audience, bad_signature, unknown_key, alg_refused, malformed, too_large, no_subject)";
    let queue_param = json!([{ "name": "queue", "in": "path", "required": true,
                               "schema": { "type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$" } }]);
    // Every setting of the schema with its range; at least one, no others.
    let settings: serde_json::Map<String, Value> = queue_core::config::FIELDS
        .iter()
        .map(|f| {
            (
                f.name.to_string(),
                json!({ "type": "integer", "minimum": f.min, "maximum": f.max, "description": f.help }),
            )
        })
        .collect();
    let mut settings = settings;
    settings.insert(
        "entry".into(),
        json!({ "type": "string", "enum": ["open", "identified", "invite"],
                "description": "who may enter: anyone (open), only with the app's login (identified), by invitation (invite)" }),
    );
    settings.insert(
        "lanes".into(),
        json!({ "type": ["string", "array", "null"], "items": { "type": "string" },
                "description": "the queue's lanes in admission order: names (1-32 of A-Z a-z 0-9 _ -), comma-separated or a list, 2 to 8; empty or null: none. Changes only while nobody waits" }),
    );
    // A sale's end: closes_at null never closes; inventory lives apart from the schema.
    if let Some(c) = settings.get_mut("closes_at") {
        c["type"] = json!(["integer", "null"]);
        c["description"] = json!(
            "ms since the epoch the queue closes at: from then on entries are refused (410 closed); 0 or null: never"
        );
    }
    settings.insert(
        "inventory".into(),
        json!({ "type": ["integer", "null"], "minimum": -1, "maximum": queue_core::config::MAX_INVENTORY,
                "description": "units left to sell; at 0 the queue is sold out (entries refused 409 sold_out, nobody promoted); null or -1: no limit" }),
    );
    let settings =
        json!({ "type": "object", "properties": settings, "additionalProperties": false, "minProperties": 1 });
    let info = json!({ "description": "{queue, info: the queue's counts, settings and counters, brand, counts: its live counts}", "content": { "application/json": { "schema": { "type": "object" } } } });
    let field_error = json!({ "allOf": [error, { "type": "object", "properties": { "field": { "type": "string", "description": "the field the error is about" } } }] });
    let field_err = |d: &str| json!({ "description": d, "content": { "application/json": { "schema": field_error } } });
    let brand: serde_json::Map<String, Value> = crate::brand::FIELDS
        .iter()
        .map(|(name, max, help)| {
            let mut field = json!({ "type": ["string", "null"], "maxLength": max, "description": help });
            if *name == "nickname" {
                field["enum"] = json!(["ask", "none", "", null]);
            }
            (name.to_string(), field)
        })
        .collect();
    let brand = json!({ "type": "object", "properties": brand, "additionalProperties": false, "minProperties": 1 });
    json!({
        "openapi": "3.1.0",
        "info": { "title": "valkey-queue waiting room", "version": env!("CARGO_PKG_VERSION") },
        "paths": {
            "/api/queue/entry": { "post": {
                "security": identity,
                "summary": "Join the line (a new userId is issued; with an identity token, the token's person's id, and an entry of someone still waiting, holding a ticket or inside gets that standing back unless the body names their userId: an explicit re-entry, to the back, or the one given again: a re-entry moves that person to the back); promoted at once when nobody waits and there is room. An entry carrying the place cookie (queue_place_<queue>) whose person still waits, holds a ticket or is inside gets that person's standing back unchanged, whatever the body names",
                "requestBody": { "required": true, "content": { "application/json": { "schema": {
                    "type": "object",
                    "properties": { "nickname": { "type": "string", "minLength": 1, "maxLength": 32, "pattern": "^[^\\u0000-\\u001f\\u007f]*[^\\s\\u0000-\\u001f\\u007f][^\\u0000-\\u001f\\u007f]*$",
                                                  "description": "1-32 bytes of UTF-8 text without control characters (trimmed; 422 past 32 bytes). Required unless the queue's nickname setting is none: left out there, the person is entered as guest with a userId bound to the place cookie (status, stream and leave naming it need that cookie)" },
                                    "queue": { "type": ["string", "null"], "pattern": "^[A-Za-z0-9._:-]{1,64}$", "default": "default" },
                                    "userId": { "type": ["string", "null"], "format": "uuid",
                                                "pattern": "^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$" },
                                    "pow": { "type": ["object", "null"], "description": "a solved proof-of-work challenge, when the queue asks one (see /api/queue/challenge)",
                                             "required": ["challenge", "nonce"],
                                             "properties": { "challenge": { "type": "string", "pattern": format!("^[0-9a-f]{{{}}}$", queue_core::pow::CHALLENGE_LEN) },
                                                             "nonce": { "type": "string", "pattern": "^[0-9]{1,20}$" } } },
                                    "code": { "type": ["string", "null"], "maxLength": 128,
                                              "description": "an access code: the person enters the code's lane (one use consumed); empty means none. A lane is never read from the body" } } } } } },
                "responses": { "200": { "description": "where the user stands (the place cookie names them)",
                                        "headers": { "Set-Cookie": { "description": "queue_place_<queue>=<userId> (for a person entered without a nickname, a 32-hex-digit secret their userId is derived from instead); Max-Age=86400; HttpOnly; SameSite=Lax (no Path: the directory of the request's URL), `:` in the queue's name written %3A",
                                                                     "schema": { "type": "string" } } },
                                        "content": { "application/json": { "schema": standing } } },
                               "400": err("malformed JSON, bad queue name, a userId this service did not give (with an identity token: not the token's), a proof of work that does not check out, or an access code where the queue has no lanes (error no_lanes)"),
                               "401": err(unauthorized),
                               "403": err("the queue admits by invitation only (error invite_only), or the access code is unknown or used up (error code_invalid: one answer for both)"),
                               "404": err(unknown_queue),
                               "415": err("the identity token came from the login cookie and the request is not Content-Type: application/json (error json_required): what another site's page could send without a preflight is refused"),
                               "409": err("this proof of work was used already (error proof_used), or the queue is sold out (error sold_out: nothing is left, nobody new gets in)"),
                               "410": err("the sale has ended (error closed): the queue's closing time has passed, nobody new gets in"),
                               "422": err("missing (in a queue that asks one), empty or too long nickname"),
                               "428": { "description": "the queue asks a proof of work: solve the challenge given and send the entry again with `pow`",
                                        "content": { "application/json": { "schema": { "allOf": [error, { "type": "object", "properties": { "challenge": challenge } }] } } } },
                               "429": err("rate limited"), "503": err("queue store unreachable, or the line is full (the queue's max_waiting; error line_full): retry after Retry-After") } },
                "delete": {
                "summary": "Leave the line, or give back a ticket not yet used: the place goes to the next person at once",
                "parameters": who, "security": identity,
                "responses": { "200": { "description": "{userId, queue, left: true}" },
                               "400": err("missing or bad userId"), "401": err(unauthorized),
                               "404": err("neither waiting nor holding a ticket (inside users leave by closing the chat), or no such queue (error unknown_queue)"),
                               "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/challenge": { "get": {
                "summary": "A proof-of-work challenge for this client address and queue: find a decimal nonce such that SHA-256(challenge \":\" nonce) starts with `difficulty` zero bits; valid until expiresAt, once",
                "parameters": [queue_query],
                "responses": { "200": { "description": "the challenge (difficulty 0 and challenge null when the queue asks none)",
                                        "content": { "application/json": { "schema": challenge } } },
                               "400": err("bad queue name"), "404": err(unknown_queue), "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/status": { "get": {
                "summary": "Where a user stands", "parameters": who, "security": identity,
                "responses": { "200": ok_standing, "400": err("missing or bad userId"), "401": err(unauthorized), "404": err("unknown user (error not_found), or no such queue (error unknown_queue)"),
                               "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/stream": { "get": {
                "summary": "Server-sent events: `position` on a change (with `totalWaiting`, how many wait in all; a mere change of rank, estimate or total at most once per the server's push interval, 2 s by default, always the latest), then `promoted` (with ticketId), `active` or `unknown`, then the stream ends. Beside them, for everyone waiting: `closed` {queue, closed}, `soldOut` {queue, soldOut}, `message` {queue, text} when the sale's state changes (a stream opened later gets the current state first), and `brand` {queue, brand} when the branding changes",
                "parameters": who, "security": identity,
                "responses": { "200": { "description": "text/event-stream; each event's data is a Standing" },
                               "400": err("missing or bad userId or queue"), "401": err(unauthorized), "404": err("unknown user (error not_found), or no such queue (error unknown_queue)"), "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/opening": { "get": {
                "summary": "The proof of a fair opening: before it the commitment (hex SHA-256 of a secret seed); after it the seed, opening time and the placed order as idHashes (hex SHA-1 of each userId). Each idHash's place is its rank in the ascending order of hex SHA-1 of `seed:idHash`; in a queue with lanes the order is one run per lane, lanes in order, each run ascending alone, its length in `lanes`",
                "parameters": [queue_query],
                "responses": { "200": { "description": "{queue, opensAt, commitment, state (none, scheduled, open), entrants, lanes, and once open seed, openedAt, order}",
                                        "content": { "application/json": { "schema": {
                                            "type": "object",
                                            "required": ["queue", "opensAt", "commitment", "state", "entrants", "lanes"],
                                            "properties": {
                                                "queue": { "type": "string" },
                                                "opensAt": { "type": "integer", "description": "the opens_at setting, ms since the epoch (0: none)" },
                                                "commitment": { "type": ["string", "null"], "description": "hex SHA-256 of the seed" },
                                                "state": { "type": "string", "enum": ["none", "scheduled", "open"] },
                                                "entrants": { "type": "integer", "minimum": 0, "description": "in the pre-queue while scheduled; placed once open" },
                                                "lanes": { "type": "array", "description": "in a queue with lanes, one item per lane in lane order: its entrants, the length of its run of `order` (runs follow each other in this order); empty without lanes",
                                                           "items": { "type": "object", "required": ["lane", "entrants"],
                                                                      "properties": { "lane": { "type": "string" }, "entrants": { "type": "integer", "minimum": 0 } } } },
                                                "seed": { "type": ["string", "null"], "description": "once open: 64 hex characters" },
                                                "openedAt": { "type": ["integer", "null"], "description": "once open: ms since the epoch" },
                                                "order": { "type": "array", "items": { "type": "string" }, "description": "once open: every idHash in placed order" } } } } } },
                               "400": err("bad queue name"), "404": err(unknown_queue), "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}": {
                "get": { "summary": "QUEUE.INFO, the branding and the live counts", "parameters": queue_param, "security": [{ "bearer": [] }],
                         "responses": { "200": info, "400": err("bad queue name"), "401": err("bad or missing token"),
                                        "403": err("admin disabled"), "404": err(unknown_queue), "503": err("queue store unreachable") } },
                "delete": { "summary": "Delete a queue nobody waits in (or in its pre-queue), holds a ticket of or is inside: its settings, branding, counters and log, its access codes, and its name in the registry; other instances stop serving it within 5 s. default cannot be deleted",
                         "parameters": queue_param, "security": [{ "bearer": [] }],
                         "responses": { "200": { "description": "{queue, deleted: true}" }, "400": err("bad queue name"),
                                        "401": err("bad or missing token"), "403": err("admin disabled"), "404": err(unknown_queue),
                                        "409": err("the queue is in use (error queue_in_use: people wait, hold tickets or are inside), or it is default (error conflict)"),
                                        "503": err("queue store unreachable") } },
                "put": { "summary": "Change settings at runtime (soft_cap, hard_cap, rate, burst, batch_max, ticket_ttl, session_lease, abandon_after, opens_at, closes_at, pow_difficulty, max_waiting, entry, lanes, inventory); creates the queue when it does not exist",
                         "parameters": queue_param, "security": [{ "bearer": [] }],
                         "requestBody": { "required": true, "content": { "application/json": { "schema": settings } } },
                         "responses": { "200": info, "400": field_err("malformed JSON, bad queue name, unknown field or value out of range (field names it)"),
                                        "401": err("bad or missing token"), "403": err("admin disabled"),
                                        "422": field_err("no setting named, or a value that is not an integer (entry: not open, identified or invite; field names it)"),
                                        "503": err("queue store unreachable") } } },
            "/api/admin/gates": {
                "get": { "summary": "The gates running now, as each describes itself (at start and every 10 s; gone 30 s after its last description): instance, version, mode (proxy or forward-auth), listen, publicUrl (the origin the gate's own links use for routes without a host; null: its listen address), waitingRoom, servesRoom, routes [{host, prefix, queue, staticAssets}], unmatched (null: pass, else a queue), bypass {paths, networks, staticExtensions, secret: whether one is set}, sessions {idleMs, maxSessionMs, straightThrough}, queues (per-queue sessions), tokenTtlMs, tickMs, cookie {name, domain}, failOpenMs, durability {replicas, timeoutMs, aof}, startedAtMs, seenAtMs, expiresAtMs. No key or secret",
                         "security": [{ "bearer": [] }],
                         "responses": { "200": { "description": "{gates: [...], routes: every gate's routes by queue then prefix [{queue, host, prefix, gate, mode, listen, publicUrl, waitingRoom, servesRoom}], at}",
                                                 "content": { "application/json": { "schema": { "type": "object", "required": ["gates", "routes", "at"],
                                                     "properties": { "gates": { "type": "array", "items": { "type": "object" } },
                                                                     "routes": { "type": "array", "items": { "type": "object" } },
                                                                     "at": { "type": "integer", "description": "ms since the epoch" } } } } } },
                                        "401": err("bad or missing token"), "403": err("admin disabled"), "503": err("queue store unreachable") } } },
            "/api/admin/queues": {
                "get": { "summary": "The queues (declared: default, made or changed in the back office, a gate's routes, queues with settings, every queue an older queue-api served), in name order, paged and searched by name, each with its live counts: waiting, ticketsOut, inside, admittedPerMinute, lastInLineWaitSeconds, softCap, paused, pausedSoftCap, opensAt",
                         "security": [{ "bearer": [] }],
                         "parameters": [
                             { "name": "search", "in": "query", "required": false, "description": "only queues whose name holds this (any case)",
                               "schema": { "type": "string", "maxLength": 64 } },
                             { "name": "offset", "in": "query", "required": false, "description": "queues skipped (in name order)",
                               "schema": { "type": "integer", "minimum": 0, "maximum": crate::admin::MAX_OFFSET, "default": 0 } },
                             { "name": "limit", "in": "query", "required": false, "description": "queues on this page",
                               "schema": { "type": "integer", "minimum": 1, "maximum": crate::admin::MAX_LISTED, "default": crate::admin::DEFAULT_LISTED } } ],
                         "responses": { "200": { "description": "{queues: [...], total: how many match, known: how many queues there are, offset, limit, truncated: whether this page leaves any that match out, at}",
                                                 "content": { "application/json": { "schema": { "type": "object", "required": ["queues", "total", "known", "offset", "limit", "truncated", "at"],
                                                     "properties": { "queues": { "type": "array", "items": { "type": "object" } }, "total": { "type": "integer" },
                                                                     "known": { "type": "integer" }, "offset": { "type": "integer" }, "limit": { "type": "integer" },
                                                                     "truncated": { "type": "boolean" }, "at": { "type": "integer" } } } } } },
                                        "400": err("a bad offset, limit (1 to 500) or search (at most 64 characters)"),
                                        "401": err("bad or missing token"),
                                        "403": err("admin disabled"), "503": err("queue store unreachable") } },
                "post": { "summary": "Create a queue (it has the default settings until some are set); answers like GET /api/admin/queues/{queue}",
                          "security": [{ "bearer": [] }],
                          "requestBody": { "required": true, "content": { "application/json": { "schema": {
                              "type": "object", "required": ["queue"], "additionalProperties": false,
                              "properties": { "queue": { "type": "string", "pattern": "^[A-Za-z0-9._:-]{1,64}$" } } } } } },
                          "responses": { "201": info, "200": { "description": "the queue existed already; as GET /api/admin/queues/{queue}", "content": { "application/json": { "schema": { "type": "object" } } } },
                                         "400": err("malformed JSON, no queue, a bad name or another field"), "401": err("bad or missing token"),
                                         "403": err("admin disabled"), "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}/brand": {
                "put": { "summary": "Brand the queue's waiting-room page: title, message, logo_url (a path on this site), accent and background (#rgb or #rrggbb); an empty string or null removes one",
                         "parameters": queue_param, "security": [{ "bearer": [] }],
                         "requestBody": { "required": true, "content": { "application/json": { "schema": brand } } },
                         "responses": { "200": info, "400": err("malformed JSON (the body must be an object) or bad queue name"),
                                        "401": err("bad or missing token"), "403": err("admin disabled"),
                                        "404": err(unknown_queue),
                                        "422": field_err("an unknown setting or a bad value (field names it)"),
                                        "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}/codes": {
                "get": { "summary": "Access codes per lane, in the queue's order: {queue, laneNames, lanes: [{lane, codes, used, left}]}; the codes themselves are never given back (only their hashes are kept)",
                         "parameters": queue_param, "security": [{ "bearer": [] }],
                         "responses": { "200": { "description": "per lane counts", "content": { "application/json": { "schema": { "type": "object" } } } },
                                        "400": err("bad queue name"), "401": err("bad or missing token"), "403": err("admin disabled"),
                                        "404": err(unknown_queue), "503": err("queue store unreachable") } },
                "post": { "summary": "Add access codes, all or none: JSON {lane, uses, codes: [...]} or Content-Type text/csv, one code a line (code, code,lane or code,lane,uses; lane and uses for lines without them from ?lane= and ?uses=, uses 1 by default; blank lines and a first line code,lane,uses skipped). At most 10000 codes, 2 MiB; each code 1-128 bytes, no control characters or commas, spaces around it trimmed. Answers {queue, given, added: how many were new, lanes: the counts}",
                          "parameters": [queue_param[0].clone(),
                                         { "name": "lane", "in": "query", "required": false, "schema": { "type": "string" }, "description": "CSV only: the lane of lines that name none" },
                                         { "name": "uses", "in": "query", "required": false, "schema": { "type": "string" }, "description": "CSV only: the uses of lines that give none (1 to 1000000; 1 by default)" }],
                          "security": [{ "bearer": [] }],
                          "requestBody": { "required": true, "content": {
                              "application/json": { "schema": { "type": "object", "required": ["lane", "codes"], "properties": {
                                  "lane": { "type": "string" }, "uses": { "type": ["integer", "null"], "minimum": 1, "maximum": crate::codes::MAX_USES },
                                  "codes": { "type": "array", "maxItems": crate::codes::MAX_CODES, "items": { "type": "string", "maxLength": crate::codes::MAX_CODE_LEN } } } } },
                              "text/csv": { "schema": { "type": "string" } } } },
                          "responses": { "200": { "description": "{queue, given, added, lanes}", "content": { "application/json": { "schema": { "type": "object" } } } },
                                         "400": field_err("malformed JSON, a lane the queue does not have (field lane), a queue without lanes (error no_lanes), CSV lines that do not read (error bad_lines: lines [{line, message}], badLines: how many)"),
                                         "401": err("bad or missing token"), "403": err("admin disabled"), "404": err(unknown_queue),
                                         "413": err("more than 10000 codes, or a body over 2 MiB (error too_large)"),
                                         "422": field_err("no codes, a bad code, a code twice, uses out of range (field names it)"),
                                         "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}/inventory": {
                "post": { "summary": "The app reports units sold: the inventory goes down by `sold`, never below 0 (at 0 the queue is sold out and every open stream is told); with userId, that person inside has bought and no longer counts as outstanding",
                          "parameters": queue_param, "security": [{ "bearer": [] }],
                          "requestBody": { "required": true, "content": { "application/json": { "schema": {
                              "type": "object", "required": ["sold"], "additionalProperties": false,
                              "properties": { "sold": { "type": "integer", "minimum": 0, "maximum": crate::sale::MAX_SOLD },
                                              "userId": { "type": ["string", "null"], "pattern": "^[A-Za-z0-9._:@-]{1,64}$" } } } } } },
                          "responses": { "200": info, "400": field_err("malformed JSON, bad queue name, an unknown field or sold out of range (field names it)"),
                                         "401": err("bad or missing token"), "403": err("admin disabled"), "404": err(unknown_queue),
                                         "422": field_err("sold missing or not an integer, or a bad userId (field names it)"),
                                         "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}/message": {
                "put": { "summary": "The message to everyone waiting: one write, shown on every open page within a second; empty or null clears it",
                          "parameters": queue_param, "security": [{ "bearer": [] }],
                          "requestBody": { "required": true, "content": { "application/json": { "schema": {
                              "type": "object", "required": ["text"], "additionalProperties": false,
                              "properties": { "text": { "type": ["string", "null"], "maxLength": queue_core::config::MAX_MESSAGE_LEN,
                                                        "pattern": "^[^\\u0000-\\u001f\\u007f-\\u009f]*$",
                                                        "description": "at most 500 bytes of UTF-8, no control characters; trimmed" } } } } } },
                          "responses": { "200": info, "400": field_err("malformed JSON, bad queue name or an unknown field (field names it)"),
                                         "401": err("bad or missing token"), "403": err("admin disabled"), "404": err(unknown_queue),
                                         "422": field_err("text missing, not a string, over 500 bytes or holding a control character (field text)"),
                                         "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}/pause": {
                "post": { "summary": "Pause admission: the soft cap becomes 0, the one it had is remembered for resume",
                          "parameters": queue_param, "security": [{ "bearer": [] }],
                          "responses": { "200": info, "400": err("bad queue name"), "401": err("bad or missing token"), "403": err("admin disabled"),
                                         "404": err(unknown_queue), "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}/resume": {
                "post": { "summary": "Resume admission: restores the soft cap the pause replaced",
                          "parameters": queue_param, "security": [{ "bearer": [] }],
                          "responses": { "200": info, "400": err("bad queue name"), "401": err("bad or missing token"), "403": err("admin disabled"),
                                         "404": err(unknown_queue), "409": err("the queue is not paused"), "503": err("queue store unreachable") } } },
            "/metrics": { "get": { "summary": "Prometheus metrics", "responses": { "200": { "description": "text format" } } } },
            "/healthz": { "get": { "summary": "Liveness and the store's state", "responses": { "200": { "description": "{status, valkey}" } } } }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" },
                                 "identity": { "type": "http", "scheme": "bearer", "bearerFormat": "JWT",
                                               "description": "the app login's access token (or the cookie --identity-cookie names)" } },
            "schemas": {
                "Standing": { "type": "object", "properties": {
                    "status": { "type": "string", "enum": ["WAITING", "PROMOTED", "ACTIVE", "UNKNOWN"] },
                    "rank": { "type": "integer", "description": "1 = next in line; 0 when not waiting" },
                    "userId": { "type": "string" },
                    "nickname": { "type": ["string", "null"] },
                    "ticketId": { "type": ["string", "null"], "description": "null until promoted" },
                    "estimatedWaitSeconds": { "type": ["integer", "null"], "description": "from the admissions measured from the line (capped by the rate setting), in steps a person reads (at least 20); null while nobody is being let in, and under 15 s (the turn is near)" },
                    "estimatedWaitRange": { "type": "object", "description": "while waiting with an estimate: where about four in five waits end",
                        "properties": { "low": { "type": "integer" }, "high": { "type": "integer" } } },
                    "opensAt": { "type": "integer", "description": "only in a pre-queue: when the queue opens (ms since the epoch); the rank is 0 until then" },
                    "lane": { "type": ["string", "null"], "description": "only in a queue with lanes: the lane a waiting person waits in (people entering an earlier lane come before them, so the rank can grow)" },
                    "queue": { "type": "string" } } },
                "Challenge": { "type": "object", "properties": {
                    "queue": { "type": "string" },
                    "difficulty": { "type": "integer", "minimum": 0, "maximum": 32 },
                    "challenge": { "type": ["string", "null"] },
                    "expiresAt": { "type": ["integer", "null"], "description": "ms since the epoch" } } },
                "Error": { "type": "object", "properties": { "error": { "type": "string" }, "message": { "type": "string" },
                                                             "reason": { "type": "string", "description": "identity_invalid only: why the token was refused" },
                                                             "lines": { "type": "array", "description": "bad_lines only: the first bad lines, {line, message}" },
                                                             "badLines": { "type": "integer", "description": "bad_lines only: how many lines are bad" } } }
            }
        }
    })
}
