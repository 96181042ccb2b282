//! QUEUE.CONFIG: a queue's runtime settings (the back office).

use crate::queue::arity;
use crate::server::{Server, Str, Val};
use crate::state::Queue;
use queue_core::config::{
    check_inventory, check_message, check_value, field, is_entry, is_inventory, is_message, EntryMode, ENTRY, FIELDS,
    MESSAGE, OPENS_AT,
};
use queue_core::engine::{self, Part, Store};
use queue_core::lanes::{Lanes, LANES};
use queue_core::QueueError;

/// QUEUE.CONFIG <queue> GET <field|*>
/// QUEUE.CONFIG <queue> SET <field> <value> [<field> <value> ...]
pub fn config(srv: &Server, args: &[Str]) -> Result<(), QueueError> {
    arity(args.len() >= 4, "queue.config")?;
    let sub = args[2].bytes();
    if sub.eq_ignore_ascii_case(b"GET") {
        arity(args.len() == 4, "queue.config")?;
        let q = Queue::open(srv, args[1], false)?;
        q.check(&[Part::Config])?;
        let cfg = q.config();
        if args[3].bytes() == b"*" {
            let mut fields: Vec<(&str, Val)> =
                FIELDS.iter().zip(cfg.values).map(|(f, v)| (f.name, Val::Int(v))).collect();
            fields.push((ENTRY, Val::Bulk(q.entry_mode().as_str().as_bytes())));
            let lanes = q.lanes().text();
            fields.push((LANES, Val::Bulk(&lanes)));
            srv.reply_fields(&queue_core::replies::CONFIG, &fields);
        } else if is_entry(args[3].bytes()) {
            srv.reply_bulk(q.entry_mode().as_str().as_bytes());
        } else if args[3].bytes().eq_ignore_ascii_case(LANES.as_bytes()) {
            srv.reply_bulk(&q.lanes().text());
        } else if is_message(args[3].bytes()) {
            srv.reply_bulk(&q.message());
        } else if is_inventory(args[3].bytes()) {
            srv.reply_val(&Val::opt_int(engine::sale::inventory(&q)));
        } else {
            let f = field(args[3].bytes())?;
            srv.reply_int(cfg.get(f.name));
        }
        Ok(())
    } else if sub.eq_ignore_ascii_case(b"SET") {
        arity(!args.len().is_multiple_of(2), "queue.config")?;
        // Check every pair before writing any.
        let mut pairs = Vec::new();
        let (mut new_lanes, mut new_opens_at) = (None, None);
        let (mut new_inventory, mut new_message) = (None, None);
        for pair in args[3..].chunks(2) {
            if is_inventory(pair[0].bytes()) {
                new_inventory = Some(check_inventory(pair[1].bytes())?);
                continue;
            }
            if is_message(pair[0].bytes()) {
                let m = check_message(pair[1].bytes())?;
                pairs.push((MESSAGE, srv.str(m)));
                new_message = Some(());
                continue;
            }
            if is_entry(pair[0].bytes()) {
                let mode = EntryMode::parse(pair[1].bytes())?;
                pairs.push((ENTRY, srv.str(mode.as_str().as_bytes())));
                continue;
            }
            if pair[0].bytes().eq_ignore_ascii_case(LANES.as_bytes()) {
                let lanes = Lanes::parse(pair[1].bytes())?;
                pairs.push((LANES, srv.str(&lanes.text())));
                new_lanes = Some(lanes);
                continue;
            }
            let f = field(pair[0].bytes())?;
            let v = check_value(f, pair[1].bytes())?;
            if f.name == FIELDS[OPENS_AT].name {
                new_opens_at = Some(v);
            }
            pairs.push((f.name, srv.int_str(v)));
        }
        let q = Queue::open(srv, args[1], true)?;
        q.check(&[Part::Config])?;
        // Lanes change only while nobody waits, and not together with an opening.
        if new_lanes.is_some() || new_opens_at.is_some() {
            let lanes = new_lanes.unwrap_or_else(|| q.lanes());
            engine::check_lanes_with(&q, lanes, new_opens_at.unwrap_or_else(|| q.setting(OPENS_AT)))?;
        }
        if new_inventory.is_some() {
            q.check(&[Part::Stats])?;
        }
        let key_name = q.name_of(Part::Config);
        let key = q.key(Part::Config);
        let mut argv = vec![key_name];
        for (name, v) in pairs {
            let f = srv.str(name.as_bytes());
            key.hset(f, v);
            argv.extend([f, v]);
        }
        if argv.len() > 1 {
            srv.replicate(c"HSET", &argv);
        }
        q.forget_settings();
        srv.notify(c"queue.config", q.name);
        // A future opens_at schedules an opening (its commitment) now.
        let mut q = q;
        let now = q.now();
        // Inventory, closing time and message: one `state` entry in the change log
        // when what followers see changed.
        if let Some(v) = new_inventory {
            engine::sale::set_inventory(&mut q, v, now);
        }
        if new_message.is_some() {
            engine::sale::note_message(&mut q, now);
        } else {
            engine::sale::note_state(&mut q, now);
        }
        let _ = queue_core::opening::schedule_if_needed(&mut q, now);
        q.finish(c"queue.opening");
        srv.reply_simple(c"OK");
        Ok(())
    } else {
        Err(QueueError::Syntax)
    }
}
