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

/// One default per setting, in the order of `queue_core::config::FIELDS`.
static DEFAULTS: [AtomicI64; FIELDS.len()] = {
    let mut a = [const { AtomicI64::new(0) }; FIELDS.len()];
    let mut i = 0;
    while i < FIELDS.len() {
        a[i] = AtomicI64::new(FIELDS[i].default);
        i += 1;
    }
    a
};

/// The default of one setting (index into FIELDS).
pub fn get(i: usize) -> i64 {
    DEFAULTS[i].load(Ordering::Relaxed)
}

/// The module config name of a setting (without the `queue.` prefix):
/// `default-` and the field's name with dashes, e.g. `default-soft-cap`.
pub fn config_name(i: usize) -> String {
    format!("default-{}", FIELDS[i].name.replace('_', "-"))
}

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
        let names: Vec<String> = (0..FIELDS.len()).map(config_name).collect();
        let i = names.iter().position(|n| n.eq_ignore_ascii_case(name)).ok_or_else(|| {
            format!("unknown queue module argument '{name}'; known: {}, test-clock", names.join(", "))
        })?;
        let v = queue_core::config::check_value(&FIELDS[i], pair[1]).map_err(|e| format!("{name}: {e}"))?;
        DEFAULTS[i].store(v, Ordering::Relaxed);
    }
    Ok(())
}

/// Registers every default as a numeric module config and loads configured values.
pub fn register(ctx: *mut redis_module::raw::RedisModuleCtx) -> Result<(), String> {
    for (i, f) in FIELDS.iter().enumerate() {
        crate::server::register_numeric_config(ctx, &config_name(i), &DEFAULTS[i], f.default, f.min, f.max)?;
    }
    crate::server::load_configs(ctx)
}
