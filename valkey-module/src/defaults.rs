//! Module-wide defaults for settings a queue's config hash does not set. Each is a
//! module config (`CONFIG SET queue.default-soft-cap 500`, also accepted on the
//! `--loadmodule` line as `default-soft-cap 500`).

use queue_core::config::FIELDS;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};

/// `--loadmodule ... test-clock yes` (load time only, for tests): a queue's commands
/// read the time from the string key `queue:{Q}:clock` (milliseconds) when it exists,
/// so that tests can move the clock past expiry times instead of sleeping.
pub static TEST_CLOCK: AtomicBool = AtomicBool::new(false);

pub fn test_clock() -> bool {
    TEST_CLOCK.load(Ordering::Relaxed)
}

pub static SOFT_CAP: AtomicI64 = AtomicI64::new(FIELDS[0].default);
pub static HARD_CAP: AtomicI64 = AtomicI64::new(FIELDS[1].default);
pub static RATE: AtomicI64 = AtomicI64::new(FIELDS[2].default);
pub static BURST: AtomicI64 = AtomicI64::new(FIELDS[3].default);
pub static BATCH_MAX: AtomicI64 = AtomicI64::new(FIELDS[4].default);
pub static TICKET_TTL: AtomicI64 = AtomicI64::new(FIELDS[5].default);
pub static SESSION_LEASE: AtomicI64 = AtomicI64::new(FIELDS[6].default);
pub static ABANDON_AFTER: AtomicI64 = AtomicI64::new(FIELDS[7].default);

/// In the order of `queue_core::config::FIELDS`.
const ALL: [&AtomicI64; 8] =
    [&SOFT_CAP, &HARD_CAP, &RATE, &BURST, &BATCH_MAX, &TICKET_TTL, &SESSION_LEASE, &ABANDON_AFTER];

/// The default of one setting (index into FIELDS).
pub fn get(i: usize) -> i64 {
    ALL[i].load(Ordering::Relaxed)
}

/// Module config names (without the `queue.` prefix), in the order of FIELDS.
pub const NAMES: [&str; 8] = [
    "default-soft-cap",
    "default-hard-cap",
    "default-rate",
    "default-burst",
    "default-batch-max",
    "default-ticket-ttl",
    "default-session-lease",
    "default-abandon-after",
];

/// Applies `name value` pairs from the `--loadmodule` line.
pub fn apply_load_args(args: &[&[u8]]) -> Result<(), String> {
    if !args.len().is_multiple_of(2) {
        return Err("queue module arguments come in pairs: <config> <value>".into());
    }
    for pair in args.chunks(2) {
        let name = String::from_utf8_lossy(pair[0]);
        let name = name.strip_prefix("queue.").unwrap_or(&name);
        if name.eq_ignore_ascii_case("test-clock") {
            let on = match pair[1].to_ascii_lowercase().as_slice() {
                b"yes" => true,
                b"no" => false,
                _ => return Err("test-clock: yes or no".into()),
            };
            TEST_CLOCK.store(on, Ordering::Relaxed);
            continue;
        }
        let i = NAMES
            .iter()
            .position(|n| n.eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("unknown queue module argument '{name}'; known: {}", NAMES.join(", ")))?;
        let v = queue_core::config::check_value(&FIELDS[i], pair[1]).map_err(|e| format!("{name}: {e}"))?;
        ALL[i].store(v, Ordering::Relaxed);
    }
    Ok(())
}

/// Registers every default as a numeric module config and loads configured values.
pub fn register(ctx: *mut redis_module::raw::RedisModuleCtx) -> Result<(), String> {
    for (i, name) in NAMES.iter().enumerate() {
        let f = &FIELDS[i];
        crate::server::register_numeric_config(ctx, name, ALL[i], f.default, f.min, f.max)?;
    }
    crate::server::load_configs(ctx)
}
