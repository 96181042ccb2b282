//! The OpenAPI 3.1 description of the HTTP API, served at /api/openapi.json.

use serde_json::{json, Value};

pub fn document() -> Value {
    let error = json!({ "$ref": "#/components/schemas/Error" });
    let err = |d: &str| json!({ "description": d, "content": { "application/json": { "schema": error } } });
    let standing = json!({ "$ref": "#/components/schemas/Standing" });
    let ok_standing =
        json!({ "description": "where the user stands", "content": { "application/json": { "schema": standing } } });
    let who = json!([
        { "name": "userId", "in": "query", "required": true, "schema": { "type": "string" } },
        { "name": "queue", "in": "query", "required": false, "schema": { "type": "string", "default": "default" } }
    ]);
    let queue_param = json!([{ "name": "queue", "in": "path", "required": true, "schema": { "type": "string" } }]);
    let info = json!({ "description": "the queue's counts, settings and counters", "content": { "application/json": { "schema": { "type": "object" } } } });
    json!({
        "openapi": "3.1.0",
        "info": { "title": "valkey-queue waiting room", "version": env!("CARGO_PKG_VERSION") },
        "paths": {
            "/api/queue/entry": { "post": {
                "summary": "Join the line (a new userId is issued, or the one given again: a re-entry moves that person to the back); promoted at once when nobody waits and there is room",
                "requestBody": { "required": true, "content": { "application/json": { "schema": {
                    "type": "object", "required": ["nickname"],
                    "properties": { "nickname": { "type": "string", "minLength": 1, "maxLength": 32 },
                                    "queue": { "type": "string", "default": "default" },
                                    "userId": { "type": "string", "format": "uuid" } } } } } },
                "responses": { "200": ok_standing, "400": err("malformed JSON, bad queue name or a userId this service did not give"),
                               "422": err("missing, empty or too long nickname"), "429": err("rate limited"),
                               "503": err("queue store unreachable") } },
                "delete": {
                "summary": "Leave the line, or give back a ticket not yet used: the place goes to the next person at once",
                "parameters": who,
                "responses": { "200": { "description": "{userId, queue, left: true}" },
                               "400": err("missing or bad userId"),
                               "404": err("neither waiting nor holding a ticket (inside users leave by closing the chat)"),
                               "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/status": { "get": {
                "summary": "Where a user stands", "parameters": who,
                "responses": { "200": ok_standing, "400": err("missing or bad userId"), "404": err("unknown user"),
                               "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/stream": { "get": {
                "summary": "Server-sent events: `position` on every change (with `totalWaiting`, how many wait in all), then `promoted` (with ticketId), `active` or `unknown`, then the stream ends",
                "parameters": who,
                "responses": { "200": { "description": "text/event-stream; each event's data is a Standing" },
                               "404": err("unknown user"), "429": err("rate limited"), "503": err("queue store unreachable") } } },
            "/api/queue/opening": { "get": {
                "summary": "The proof of a fair opening: before it the commitment (hex SHA-256 of a secret seed); after it the seed, opening time and the placed order as idHashes (hex SHA-1 of each userId). Each idHash's place is its rank in the ascending order of hex SHA-1 of `seed:idHash`",
                "parameters": [{ "name": "queue", "in": "query", "required": false, "schema": { "type": "string", "default": "default" } }],
                "responses": { "200": { "description": "{queue, opensAt, commitment, state (none, scheduled, open), entrants, and once open seed, openedAt, order}" },
                               "400": err("bad queue name"), "503": err("queue store unreachable") } } },
            "/api/admin/queues/{queue}": {
                "get": { "summary": "QUEUE.INFO", "parameters": queue_param, "security": [{ "bearer": [] }],
                         "responses": { "200": info, "401": err("bad or missing token"), "403": err("admin disabled") } },
                "put": { "summary": "Change settings at runtime (soft_cap, hard_cap, rate, burst, batch_max, ticket_ttl, session_lease, abandon_after)",
                         "parameters": queue_param, "security": [{ "bearer": [] }],
                         "requestBody": { "required": true, "content": { "application/json": { "schema": {
                             "type": "object", "additionalProperties": { "type": "integer" } } } } },
                         "responses": { "200": info, "400": err("unknown field or value out of range"),
                                        "401": err("bad or missing token"), "403": err("admin disabled") } } },
            "/metrics": { "get": { "summary": "Prometheus metrics", "responses": { "200": { "description": "text format" } } } },
            "/healthz": { "get": { "summary": "Liveness and the store's state", "responses": { "200": { "description": "{status, valkey}" } } } }
        },
        "components": {
            "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
            "schemas": {
                "Standing": { "type": "object", "properties": {
                    "status": { "type": "string", "enum": ["WAITING", "PROMOTED", "ACTIVE", "UNKNOWN"] },
                    "rank": { "type": "integer", "description": "1 = next in line; 0 when not waiting" },
                    "userId": { "type": "string" },
                    "nickname": { "type": ["string", "null"] },
                    "ticketId": { "type": ["string", "null"], "description": "null until promoted" },
                    "estimatedWaitSeconds": { "type": ["integer", "null"], "description": "from the admissions measured from the line (capped by the rate setting); null while nobody is being let in" },
                    "estimatedWaitRange": { "type": "object", "description": "while waiting with an estimate: where about four in five waits end",
                        "properties": { "low": { "type": "integer" }, "high": { "type": "integer" } } },
                    "opensAt": { "type": "integer", "description": "only in a pre-queue: when the queue opens (ms since the epoch); the rank is 0 until then" },
                    "queue": { "type": "string" } } },
                "Error": { "type": "object", "properties": { "error": { "type": "string" }, "message": { "type": "string" } } }
            }
        }
    })
}
