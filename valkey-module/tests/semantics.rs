//! The queue's promises, each proven against a real valkey-server. Time moves by
//! the server's test clock (`queue:{Q}:clock`), never by sleeping.

use testkit::{as_int, digest, field_int, field_str, Backend, Client, ValkeyServer};

testkit::backend_tests!(
    fifo_order_is_entry_order,
    reentry_moves_to_the_back_and_leave_removes,
    enter_promotes_at_once_when_nobody_waits,
    promote_respects_soft_cap_max_and_batch_max,
    token_bucket_limits_admission,
    expired_tickets_free_their_slot,
    max_zero_only_does_the_housekeeping,
    silent_waiters_are_dropped_never_promoted,
    ticket_claims_exactly_once,
    claim_errors,
    a_claim_repeated_by_its_holder_is_the_same_session,
    the_entry_setting_is_kept_and_invite_refuses_plain_entries,
    lanes_admit_in_order_and_ranks_count_everyone_ahead,
    access_codes_admit_exactly_their_uses,
    fifty_racing_for_one_code_put_exactly_one_in_line,
    random_runs_with_lanes_keep_order_codes_and_watchers_right,
    a_replica_holds_the_same_lanes_codes_and_claims,
    leases_hold_slots_until_end_or_expiry,
    status_shapes_and_estimated_wait,
    ranks_answers_for_many,
    resp3_maps,
    freed_slots_are_filled_and_announced_at_once,
    freed_slots_wait_for_a_token,
    line_walks_the_waiting_users_in_pages,
    changes_made_behind_the_commands_are_seen_at_once,
    an_expired_key_is_seen_gone,
    max_waiting_refuses_newcomers_only,
    a_sale_closes_at_its_time_and_says_so_once,
    the_inventory_bounds_admissions_and_sold_out_refuses,
    a_message_and_bad_sale_settings,
    slot_wait_counts_how_long_expired_slots_stood_empty,
    a_watched_user_is_heard_from_while_its_instance_lease_lives,
    unwatch_counts_the_person_as_heard_from_now,
    every_instance_that_registers_a_user_vouches_for_it,
    registrations_go_when_the_user_leaves_the_line,
    the_change_log_tells_who_left_the_waiting_part,
    the_opening_writes_a_reset_entry,
    the_change_log_keeps_about_ten_thousand_entries,
    a_replica_holds_the_same_log_registrations_and_leases,
    pass_lets_in_while_there_is_room_and_else_changes_nothing,
    a_sale_reported_for_a_user_needs_a_unit_and_sold_saturates,
    watch_removes_instances_gone_for_a_day,
);

/// The test clock's start.
const T0: i64 = 1_700_000_000_000;

fn server(b: Backend) -> (ValkeyServer, Client) {
    let s = ValkeyServer::builder(b).test_clock().start();
    let mut c = s.client();
    for q in ["q", "s"] {
        c.set_clock(q, T0);
    }
    (s, c)
}

/// A queue where nobody is let in until PROMOTE is called with room.
fn closed_queue(c: &mut Client, q: &str) {
    c.config_set(q, &[("soft_cap", 0)]);
}

fn fifo_order_is_entry_order(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    // Many entries land in the same millisecond; order must still be exact.
    let users: Vec<String> = (0..600).map(|i| format!("user-{:04}", (i * 7919) % 10007)).collect();
    let mut pipe = redis::pipe();
    for u in &users {
        pipe.add_command(c.cmd("QUEUE.ENTER", &["q", u.as_str(), "n"]));
    }
    let _: Vec<redis::Value> = pipe.query(&mut c.con).unwrap();
    c.config_set("q", &[("soft_cap", 1_000_000), ("batch_max", 100_000)]);
    let mut promoted = Vec::new();
    for batch in [1, 50, 149, 400] {
        let r = c.promote("q", Some(batch));
        assert_eq!(field_int(&r, "promoted"), batch);
        // Who was promoted: everyone whose status is PROMOTED, in entry order.
        promoted.clear();
        for u in &users {
            if field_str(&c.status("q", u), "status").as_deref() == Some("PROMOTED") {
                promoted.push(u.clone());
            }
        }
        let n = promoted.len();
        assert_eq!(promoted, users[..n].to_vec(), "promotion must follow entry order");
    }
    assert_eq!(promoted.len(), 600);
}

fn reentry_moves_to_the_back_and_leave_removes(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    for u in ["a", "b", "c"] {
        c.enter("q", u, u);
    }
    assert_eq!(field_int(&c.status("q", "a"), "rank"), 1);
    let r = c.enter("q", "a", "a2");
    assert_eq!(field_int(&r, "rank"), 3);
    assert_eq!(field_str(&r, "nickname").as_deref(), Some("a2"));
    assert_eq!(field_int(&c.status("q", "b"), "rank"), 1);
    assert_eq!(field_int(&c.status("q", "c"), "rank"), 2);
    assert_eq!(c.leave("q", "b"), 1);
    assert_eq!(c.leave("q", "b"), 0);
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("UNKNOWN"));
    assert_eq!(field_int(&c.status("q", "c"), "rank"), 1);
    assert_eq!(field_int(&c.info("q"), "waiting"), 2);
    // A promoted user who enters again gives up the ticket and goes to the back.
    c.config_set("q", &[("soft_cap", 1)]);
    c.promote("q", None);
    let t = field_str(&c.status("q", "c"), "ticketId").expect("c promoted");
    c.config_set("q", &[("soft_cap", 0)]);
    let r = c.enter("q", "c", "c");
    assert_eq!(field_str(&r, "status").as_deref(), Some("WAITING"));
    assert_eq!(c.claim("q", &t).unwrap_err(), "NOTICKET unknown or already used ticket");
    assert_eq!(field_int(&c.info("q"), "joining"), 0);
}

fn enter_promotes_at_once_when_nobody_waits(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 2)]);
    let r = c.enter("q", "a", "alice");
    assert_eq!(field_str(&r, "status").as_deref(), Some("PROMOTED"));
    assert_eq!(field_int(&r, "rank"), 0);
    assert!(queue_core::ticket::is_ticket_id(&field_str(&r, "ticketId").unwrap()));
    let r = c.enter("q", "b", "bob");
    assert_eq!(field_str(&r, "status").as_deref(), Some("PROMOTED"));
    // Full now: the next one waits, and so does everyone after, even once there is room.
    let r = c.enter("q", "c", "carol");
    assert_eq!(field_str(&r, "status").as_deref(), Some("WAITING"));
    assert_eq!(field_int(&r, "rank"), 1);
    c.config_set("q", &[("soft_cap", 10)]);
    let r = c.enter("q", "d", "dave");
    assert_eq!(field_str(&r, "status").as_deref(), Some("WAITING"), "d must not jump ahead of c");
    assert_eq!(field_int(&r, "rank"), 2);
}

fn promote_respects_soft_cap_max_and_batch_max(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    for i in 0..50 {
        c.enter("q", &format!("u{i}"), "n");
    }
    c.config_set("q", &[("soft_cap", 20), ("batch_max", 8)]);
    let r = c.promote("q", None);
    assert_eq!(field_int(&r, "promoted"), 8, "batch_max");
    let r = c.promote("q", Some(3));
    assert_eq!(field_int(&r, "promoted"), 3, "MAX");
    let r = c.promote("q", None);
    assert_eq!(field_int(&r, "promoted"), 8);
    let r = c.promote("q", None);
    assert_eq!(field_int(&r, "promoted"), 1, "soft cap: 20 - 19 joining");
    assert_eq!(field_int(&r, "available_slots"), 0);
    assert_eq!(field_int(&r, "joining"), 20);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0);
    // Claimed tickets become sessions, which still count against the soft cap.
    let t = field_str(&c.status("q", "u0"), "ticketId").unwrap();
    c.claim("q", &t).unwrap();
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0);
    // Ending the session gives its slot to the head inside SESSION.END.
    c.end("q", "u0");
    assert_eq!(field_str(&c.status("q", "u20"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0);
    let info = c.info("q");
    assert_eq!((field_int(&info, "joining"), field_int(&info, "active"), field_int(&info, "waiting")), (20, 0, 29));
}

fn token_bucket_limits_admission(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    for i in 0..40 {
        c.enter("q", &format!("u{i}"), "n");
    }
    // 10 per second with a bucket of 5: at most 5 at once, then one per 100 ms.
    c.config_set("q", &[("soft_cap", 1000), ("rate", 10), ("burst", 5)]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 5);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0, "the bucket is empty");
    c.set_clock("q", T0 + 99);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0, "not a whole token yet");
    c.set_clock("q", T0 + 100);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    c.set_clock("q", T0 + 350);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 2);
    // Refills stop at the bucket's size.
    c.set_clock("q", T0 + 60_000);
    assert_eq!(field_int(&c.info("q"), "tokens"), 5);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 5);
}

fn expired_tickets_free_their_slot(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 1), ("ticket_ttl", 200)]);
    let t = field_str(&c.enter("q", "a", "a"), "ticketId").unwrap();
    c.enter("q", "b", "b");
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0);
    c.set_clock("q", T0 + 199);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0, "still good 1 ms before its time");
    c.set_clock("q", T0 + 200);
    let r = c.promote("q", None);
    assert_eq!(field_int(&r, "promoted"), 1, "the expired ticket frees its slot");
    assert_eq!(field_int(&r, "tickets_expired"), 1);

    assert_eq!(c.claim("q", &t).unwrap_err(), "NOTICKET unknown or already used ticket");
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("UNKNOWN"));
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(field_int(&c.info("q"), "expired"), 1);
}

fn max_zero_only_does_the_housekeeping(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 1), ("ticket_ttl", 200)]);
    c.enter("q", "a", "a");
    c.enter("q", "b", "b");
    c.set_clock("q", T0 + 200);
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("UNKNOWN"), "a's ticket expired");
    let r = c.promote("q", Some(0));
    assert_eq!((field_int(&r, "promoted"), field_int(&r, "tickets_expired")), (0, 1));
    assert_eq!((field_int(&r, "joining"), field_int(&r, "available_slots")), (0, 1));
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("WAITING"));
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
}

fn silent_waiters_are_dropped_never_promoted(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("abandon_after", 1000)]);
    for u in ["quiet1", "talker", "quiet2"] {
        c.enter("q", u, u);
    }
    // Only the talker keeps asking (last-seen times are kept to 250 ms).
    c.set_clock("q", T0 + 600);
    c.status("q", "talker");
    c.set_clock("q", T0 + 1000);
    c.config_set("q", &[("soft_cap", 10)]);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 0, "silent for exactly abandon_after: not yet");
    c.set_clock("q", T0 + 1001);
    let r = c.promote("q", None);
    assert_eq!(field_int(&r, "promoted"), 1);
    assert_eq!(field_int(&r, "dropped"), 2);
    assert_eq!(field_str(&c.status("q", "talker"), "status").as_deref(), Some("PROMOTED"));
    for u in ["quiet1", "quiet2"] {
        assert_eq!(field_str(&c.status("q", u), "status").as_deref(), Some("UNKNOWN"));
    }
    // The sweep drops silent users behind the head too, keeping ranks honest.
    closed_queue(&mut c, "s");
    c.config_set("s", &[("abandon_after", 1000)]);
    c.enter("s", "head", "h");
    c.enter("s", "gone", "g");
    c.enter("s", "tail", "t");
    c.set_clock("s", T0 + 900);
    c.status("s", "head");
    c.status("s", "tail");
    c.set_clock("s", T0 + 1600);
    let r = c.promote("s", None);
    assert_eq!((field_int(&r, "promoted"), field_int(&r, "dropped")), (0, 1));
    assert_eq!(field_int(&c.status("s", "tail"), "rank"), 2);
}

fn ticket_claims_exactly_once(b: Backend) {
    let (_s, mut c) = server(b);
    let t = field_str(&c.enter("q", "a", "alice"), "ticketId").unwrap();
    let r = c.claim("q", &t).unwrap();
    assert_eq!(field_str(&r, "userId").as_deref(), Some("a"));
    assert_eq!(field_str(&r, "nickname").as_deref(), Some("alice"));
    assert_eq!(field_int(&r, "leaseMs"), 30_000);
    assert_eq!(c.claim("q", &t).unwrap_err(), "NOTICKET unknown or already used ticket");
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("ACTIVE"));
    let info = c.info("q");
    assert_eq!((field_int(&info, "active"), field_int(&info, "claimed")), (1, 1));
}

fn claim_errors(b: Backend) {
    let (_s, mut c) = server(b);
    assert_eq!(c.claim("q", "no-such-ticket").unwrap_err(), "NOTICKET unknown or already used ticket");
    assert_eq!(
        c.claim("q", "bad ticket").unwrap_err(),
        "ERR invalid ticketId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"
    );
    // Expired: the ticket's time is over.
    c.config_set("q", &[("ticket_ttl", 150)]);
    let t = field_str(&c.enter("q", "a", "a"), "ticketId").unwrap();
    c.set_clock("q", T0 + 150);
    assert_eq!(c.claim("q", &t).unwrap_err(), "EXPIRED ticket has expired");
    c.config_set("q", &[("ticket_ttl", 60_000)]);
    c.promote("q", None);
    // Inside: a user with a live session queues again from a second device.
    let t1 = field_str(&c.enter("q", "u", "u"), "ticketId").unwrap();
    c.claim("q", &t1).unwrap();
    let t2 = field_str(&c.enter("q", "u", "u"), "ticketId").expect("promoted again");
    assert_eq!(c.claim("q", &t2).unwrap_err(), "INSIDE user is already inside");
    // Refusals consume nothing: once the first session ends, the ticket works.
    c.end("q", "u");
    c.claim("q", &t2).unwrap();
    // Full: the hard cap bounds sessions whatever the soft cap says.
    c.config_set("q", &[("hard_cap", 1)]);
    let t3 = field_str(&c.enter("q", "v", "v"), "ticketId").unwrap();
    assert_eq!(c.claim("q", &t3).unwrap_err(), "FULL hard cap reached");
    c.end("q", "u");
    c.claim("q", &t3).unwrap();
    assert_eq!(c.claim("q", &t3).unwrap_err(), "NOTICKET unknown or already used ticket");
}

fn claim_as(
    c: &mut Client,
    q: &str,
    ticket: &str,
    holder: &str,
) -> Result<std::collections::HashMap<String, redis::Value>, String> {
    c.call("TICKET.CLAIM", &[q, ticket, "HOLDER", holder])
        .map(|v| testkit::fields(&v))
        .map_err(|e| testkit::error_text(&e))
}

fn claimed_fields(raw: &mut redis::Connection, q: &str) -> std::collections::BTreeMap<String, String> {
    redis::cmd("HGETALL").arg(format!("queue:{{{q}}}:claimed")).query(raw).unwrap()
}

fn a_claim_repeated_by_its_holder_is_the_same_session(b: Backend) {
    let (s, mut c) = server(b);
    let mut raw = s.conn();
    const NOTICKET: &str = "NOTICKET unknown or already used ticket";
    // A claim without HOLDER is as before: no entry, a repeat is refused.
    let t0 = field_str(&c.enter("q", "z", "zed"), "ticketId").unwrap();
    c.claim("q", &t0).unwrap();
    assert!(claimed_fields(&mut raw, "q").is_empty());
    assert_eq!(claim_as(&mut c, "q", &t0, "h-z").unwrap_err(), NOTICKET);
    c.end("q", "z");

    let t = field_str(&c.enter("q", "a", "alice"), "ticketId").unwrap();
    let first = claim_as(&mut c, "q", &t, "browser-1").unwrap();
    assert_eq!(field_str(&first, "userId").as_deref(), Some("a"));
    assert_eq!(field_str(&first, "ticketId").as_deref(), Some(t.as_str()));
    assert_eq!(field_int(&first, "leaseMs"), 30_000);
    let remembered = claimed_fields(&mut raw, "q");
    assert_eq!(remembered.get(&t).map(String::as_str), Some("browser-1|30000|a"), "{remembered:?}");
    assert_eq!(remembered.get("#a"), Some(&t), "{remembered:?}");
    // The same holder again, later and after the lease setting changed: the same
    // answer, nothing changed, not counted twice, the lease not extended.
    c.set_clock("q", T0 + 1_000);
    c.config_set("q", &[("session_lease", 5_000)]);
    let before = digest(&mut raw);
    let lease_before = redis::cmd("ZSCORE").arg("queue:{q}:sessions").arg("a").query::<i64>(&mut raw).unwrap();
    let again = claim_as(&mut c, "q", &t, "browser-1").unwrap();
    assert_eq!(again, first);
    assert_eq!(digest(&mut raw), before, "a repeat by its holder changes nothing");
    assert_eq!(redis::cmd("ZSCORE").arg("queue:{q}:sessions").arg("a").query::<i64>(&mut raw).unwrap(), lease_before);
    assert_eq!(field_int(&c.info("q"), "claimed"), 2);
    // Anyone else, or without the holder: NOTICKET, nothing changed.
    assert_eq!(c.claim("q", &t).unwrap_err(), NOTICKET);
    assert_eq!(claim_as(&mut c, "q", &t, "browser-2").unwrap_err(), NOTICKET);
    assert_eq!(claim_as(&mut c, "q", &t, "browser-10").unwrap_err(), NOTICKET);
    assert_eq!(digest(&mut raw), before);
    // A heartbeat keeps the session and so the answer.
    c.set_clock("q", T0 + 29_000);
    assert_eq!(c.heartbeat("q", &["a"]), vec![1]);
    c.set_clock("q", T0 + 31_000);
    assert_eq!(claim_as(&mut c, "q", &t, "browser-1").unwrap(), first);
    // Ended: the entry goes with the session, the repeat is refused.
    assert_eq!(c.end("q", "a"), 1);
    assert!(claimed_fields(&mut raw, "q").is_empty());
    assert_eq!(claim_as(&mut c, "q", &t, "browser-1").unwrap_err(), NOTICKET);
    // Lapsed: refused once the lease ran out, and the entry goes when it is reaped.
    let t2 = field_str(&c.enter("q", "b", "bob"), "ticketId").unwrap();
    assert_eq!(field_int(&claim_as(&mut c, "q", &t2, "browser-3").unwrap(), "leaseMs"), 5_000);
    c.set_clock("q", T0 + 36_000);
    assert_eq!(claim_as(&mut c, "q", &t2, "browser-3").unwrap_err(), NOTICKET);
    assert_eq!(claimed_fields(&mut raw, "q").len(), 2, "kept until reaped");
    assert_eq!(field_int(&c.promote("q", None), "leases_expired"), 1);
    assert!(claimed_fields(&mut raw, "q").is_empty());
    // A user claiming again (a new ticket, the old session over) leaves one entry: its own.
    let t3 = field_str(&c.enter("q", "d", "dee"), "ticketId").unwrap();
    claim_as(&mut c, "q", &t3, "browser-4").unwrap();
    c.set_clock("q", T0 + 42_000);
    let t4 = field_str(&c.enter("q", "d", "dee"), "ticketId").unwrap();
    claim_as(&mut c, "q", &t4, "browser-5").unwrap();
    let remembered = claimed_fields(&mut raw, "q");
    assert_eq!(remembered.len(), 2, "{remembered:?}");
    assert_eq!(remembered.get("#d"), Some(&t4));
    assert_eq!(claim_as(&mut c, "q", &t3, "browser-4").unwrap_err(), NOTICKET);
    let info = c.info("q");
    assert_eq!((field_int(&info, "claimed"), field_int(&info, "active")), (5, 1));
}

fn the_entry_setting_is_kept_and_invite_refuses_plain_entries(b: Backend) {
    let (s, mut c) = server(b);
    let mut raw = s.conn();
    let get = |c: &mut Client, f: &str| testkit::as_string(&c.call("QUEUE.CONFIG", &["q", "GET", f]).unwrap());
    assert_eq!(get(&mut c, "entry").as_deref(), Some("open"));
    let all = testkit::fields(&c.call("QUEUE.CONFIG", &["q", "GET", "*"]).unwrap());
    assert_eq!(field_str(&all, "entry").as_deref(), Some("open"));
    assert_eq!(field_int(&all, "soft_cap"), 1000);
    assert_eq!(field_str(&c.info("q"), "entry").as_deref(), Some("open"));
    c.enter("q", "early", "e");
    // Bad values change nothing, not even the good pair before them.
    let before = digest(&mut raw);
    for bad in ["closed", "", "open ", "1"] {
        let e = c.err("QUEUE.CONFIG", &["q", "SET", "soft_cap", "5", "entry", bad]);
        assert_eq!(e, "ERR entry must be one of open, identified, invite", "{bad:?}");
    }
    assert_eq!(digest(&mut raw), before);
    // invite: plain entries are refused, with nothing changed; the others keep their place.
    c.call("QUEUE.CONFIG", &["q", "SET", "ENTRY", "Invite"]).unwrap();
    let stored: String = redis::cmd("HGET").arg("queue:{q}:config").arg("entry").query(&mut raw).unwrap();
    assert_eq!(stored, "invite");
    assert_eq!(get(&mut c, "Entry").as_deref(), Some("invite"));
    assert_eq!(field_str(&c.info("q"), "entry").as_deref(), Some("invite"));
    let before = digest(&mut raw);
    for u in ["new", "early"] {
        assert_eq!(c.err("QUEUE.ENTER", &["q", u, "n"]), "INVITE this queue admits by invitation only");
    }
    assert_eq!(digest(&mut raw), before);
    assert_eq!(field_str(&c.status("q", "early"), "status").as_deref(), Some("PROMOTED"));
    // identified: stored for the services, entries go on as in an open queue.
    c.call("QUEUE.CONFIG", &["q", "SET", "entry", "identified"]).unwrap();
    assert_eq!(get(&mut c, "entry").as_deref(), Some("identified"));
    assert_eq!(field_str(&c.enter("q", "new", "n"), "status").as_deref(), Some("PROMOTED"));
    c.call("QUEUE.CONFIG", &["q", "SET", "entry", "open"]).unwrap();
    assert_eq!(get(&mut c, "entry").as_deref(), Some("open"));
}

fn lanes_admit_in_order_and_ranks_count_everyone_ahead(b: Backend) {
    let (s, mut c) = server(b);
    let mut raw = s.conn();
    c.call("QUEUE.CONFIG", &["q", "SET", "lanes", "presale,general", "soft_cap", "0"]).unwrap();
    let get = |c: &mut Client| testkit::as_string(&c.call("QUEUE.CONFIG", &["q", "GET", "lanes"]).unwrap());
    assert_eq!(get(&mut c).as_deref(), Some("presale,general"));
    assert_eq!(field_str(&c.info("q"), "lanes").as_deref(), Some("presale,general"));
    // Without LANE: the last lane.
    for (u, rank) in [("g1", 1), ("g2", 2)] {
        let st = c.enter("q", u, u);
        assert_eq!((field_int(&st, "rank"), field_str(&st, "lane").as_deref()), (rank, Some("general")));
    }
    let enter_lane = |c: &mut Client, u: &str, lane: &str| {
        testkit::fields(&c.call("QUEUE.ENTER", &["q", u, u, "LANE", lane]).unwrap())
    };
    let p1 = enter_lane(&mut c, "p1", "presale");
    assert_eq!((field_int(&p1, "rank"), field_str(&p1, "lane").as_deref()), (1, Some("presale")));
    assert_eq!(field_int(&c.status("q", "g1"), "rank"), 2, "an arrival in an earlier lane is ahead");
    // Watched people learn of an arrival ahead of them from the change log.
    c.call("QUEUE.WATCH", &["q", "pod", "60000", "g1", "p1"]).unwrap();
    let last_log = |raw: &mut redis::Connection| -> std::collections::HashMap<String, String> {
        let v: Vec<(String, std::collections::HashMap<String, String>)> =
            redis::cmd("XREVRANGE").arg("queue:{q}:log").arg("+").arg("-").arg("COUNT").arg(1).query(raw).unwrap();
        v.into_iter().next().map(|e| e.1).unwrap_or_default()
    };
    enter_lane(&mut c, "p2", "presale");
    let p2_number: i64 = redis::cmd("ZSCORE").arg("queue:{q}:waiting").arg("p2").query(&mut raw).unwrap();
    assert!(p2_number > 1 << 40 && p2_number < 2 << 40, "{p2_number}");
    assert_eq!(last_log(&mut raw).get("ahead"), Some(&p2_number.to_string()));
    assert_eq!(field_int(&c.status("q", "g1"), "rank"), 3);
    // An arrival at the back of the last lane writes nothing.
    let before: i64 = redis::cmd("XLEN").arg("queue:{q}:log").query(&mut raw).unwrap();
    c.enter("q", "g3", "g3");
    assert_eq!(redis::cmd("XLEN").arg("queue:{q}:log").query::<i64>(&mut raw).unwrap(), before);
    // PROMOTE takes the first lane first, in entry order; tickets are numbered below
    // every lane, and the log maps the watched one's old number to its ticket.
    let p1_number: i64 = redis::cmd("ZSCORE").arg("queue:{q}:waiting").arg("p1").query(&mut raw).unwrap();
    c.config_set("q", &[("soft_cap", 3)]);
    assert_eq!(field_int(&c.promote("q", Some(2)), "promoted"), 2);
    let t1 = field_str(&c.status("q", "p1"), "ticketId").expect("p1 promoted");
    assert!(field_str(&c.status("q", "p2"), "ticketId").is_some(), "p2 promoted");
    let e = last_log(&mut raw);
    assert_eq!(e.get("head"), Some(&p2_number.to_string()));
    assert_eq!(e.get("tickets"), Some(&format!("{p1_number}={t1}")));
    let g1 = c.status("q", "g1");
    assert_eq!((field_int(&g1, "rank"), field_str(&g1, "lane").as_deref()), (1, Some("general")));
    assert!(t1.split('.').next().unwrap().parse::<i64>().unwrap() < 1 << 40);
    assert_eq!(field_str(&c.claim("q", &t1).unwrap(), "userId").as_deref(), Some("p1"));
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    assert!(field_str(&c.status("q", "g1"), "ticketId").is_some(), "g1 next");
    assert_eq!(field_int(&c.status("q", "g2"), "rank"), 1);
    // Lanes change only while nobody waits; a queue without lanes replies as before.
    let e = c.err("QUEUE.CONFIG", &["q", "SET", "lanes", ""]);
    assert_eq!(e, "ERR lanes can change only while nobody waits");
    let plain = c.enter("s", "x", "x");
    assert!(!plain.contains_key("lane"), "{plain:?}");
}

fn access_codes_admit_exactly_their_uses(b: Backend) {
    let (s, mut c) = server(b);
    let mut raw = s.conn();
    let (h1, h2) = ("1".repeat(64), "2".repeat(64));
    c.call("QUEUE.CONFIG", &["q", "SET", "lanes", "presale,general", "soft_cap", "0", "entry", "invite"]).unwrap();
    let add = |c: &mut Client, lane: &str, uses: &str, h: &str| {
        as_int(&c.call("QUEUE.CODES", &["q", "ADD", lane, uses, h]).unwrap()).unwrap()
    };
    assert_eq!(add(&mut c, "presale", "2", &h1), 1);
    assert_eq!(add(&mut c, "general", "1", &h2), 1);
    assert_eq!(add(&mut c, "presale", "3", &h1), 0, "known already: its uses change");
    let enter = |c: &mut Client, u: &str, h: &str| c.call("QUEUE.ENTER", &["q", u, u, "CODE", h]);
    for (u, rank) in [("a", 1), ("b", 2), ("c", 3)] {
        let st = testkit::fields(&enter(&mut c, u, &h1).unwrap());
        assert_eq!((field_int(&st, "rank"), field_str(&st, "lane").as_deref()), (rank, Some("presale")));
    }
    let before = digest(&mut raw);
    assert_eq!(c.err("QUEUE.ENTER", &["q", "d", "d", "CODE", &h1]), "NOCODE unknown or used-up access code");
    assert_eq!(c.err("QUEUE.ENTER", &["q", "d", "d"]), "INVITE this queue admits by invitation only");
    assert_eq!(digest(&mut raw), before, "refusals consume nothing");
    let counts = |c: &mut Client| -> Vec<(String, i64, i64, i64)> {
        match c.call("QUEUE.CODES", &["q", "COUNTS"]).unwrap() {
            redis::Value::Array(lanes) => lanes
                .iter()
                .map(|l| match l {
                    redis::Value::Array(f) => (
                        testkit::as_string(&f[0]).unwrap(),
                        as_int(&f[1]).unwrap(),
                        as_int(&f[2]).unwrap(),
                        as_int(&f[3]).unwrap(),
                    ),
                    other => panic!("{other:?}"),
                })
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    assert_eq!(counts(&mut c), vec![("presale".into(), 1, 3, 0), ("general".into(), 1, 0, 1)]);
    // An entry refused for another reason (the line is full) consumes nothing.
    c.config_set("q", &[("max_waiting", 3)]);
    assert_eq!(c.err("QUEUE.ENTER", &["q", "e", "e", "CODE", &h2]), "LINEFULL the line is full, try again later");
    assert_eq!(counts(&mut c)[1], ("general".into(), 1, 0, 1));
    c.config_set("q", &[("max_waiting", 0)]);
    // LANE alone is an invitation too; a code's lane wins over none given.
    let st = testkit::fields(&c.call("QUEUE.ENTER", &["q", "g", "g", "LANE", "general"]).unwrap());
    assert_eq!((field_int(&st, "rank"), field_str(&st, "lane").as_deref()), (4, Some("general")));
    assert_eq!(as_int(&c.call("QUEUE.CODES", &["q", "REMOVE", &h2, &h1]).unwrap()), Some(2));
    assert_eq!(c.err("QUEUE.ENTER", &["q", "e", "e", "CODE", &h2]), "NOCODE unknown or used-up access code");
    assert_eq!(counts(&mut c), vec![("presale".into(), 0, 0, 0), ("general".into(), 0, 0, 0)]);
}

fn fifty_racing_for_one_code_put_exactly_one_in_line(b: Backend) {
    let (s, mut c) = server(b);
    let h = "f".repeat(64);
    c.call("QUEUE.CONFIG", &["q", "SET", "lanes", "presale,general", "soft_cap", "0"]).unwrap();
    c.call("QUEUE.CODES", &["q", "ADD", "presale", "1", &h]).unwrap();
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(50));
    let handles: Vec<_> = (0..50)
        .map(|i| {
            let (mut c, barrier, h) = (s.client(), barrier.clone(), h.clone());
            std::thread::spawn(move || {
                let u = format!("racer-{i}");
                barrier.wait();
                c.call("QUEUE.ENTER", &["q", &u, "r", "CODE", &h]).is_ok()
            })
        })
        .collect();
    let won = handles.into_iter().map(|t| t.join().unwrap()).filter(|&ok| ok).count();
    assert_eq!(won, 1);
    assert_eq!(field_int(&c.info("q"), "waiting"), 1);
}

/// Random runs on a queue with three lanes and two codes, against a plain model
/// written from "Lanes and access codes": after every step every person's status,
/// rank and lane (RANKS of everyone), and each lane's code counts, are the model's
/// (lane order, entry order within a lane, a code's uses never exceeded); and a
/// watcher that follows the change log by the documented rule alone (head, gone,
/// left, ahead), from QUEUE.WATCH checkpoints, knows every watched rank.
fn random_runs_with_lanes_keep_order_codes_and_watchers_right(b: Backend) {
    use std::collections::{BTreeMap, BTreeSet};
    let (s, mut c) = server(b);
    let mut raw = s.conn();
    const LANES: [&str; 3] = ["a", "b", "c"];
    let users: Vec<String> = (0..12).map(|i| format!("u{i}")).collect();
    let codes = [("1".repeat(64), 0usize, 3i64), ("2".repeat(64), 1usize, 2i64)];
    for run in 0..6u64 {
        let q = format!("r{run}");
        c.set_clock(&q, T0);
        c.call("QUEUE.CONFIG", &[&q, "SET", "lanes", "a,b,c", "soft_cap", "0", "abandon_after", "0"]).unwrap();
        for (h, lane, uses) in &codes {
            c.call("QUEUE.CODES", &[&q, "ADD", LANES[*lane], &uses.to_string(), h]).unwrap();
        }
        let mut rng = testkit::Rng(0xA11E_0000 + run);
        // The model: waiting (user -> (lane, entry counter)), ticket holders, code uses.
        let mut waiting: BTreeMap<String, (usize, u64)> = BTreeMap::new();
        let mut holders: BTreeSet<String> = BTreeSet::new();
        let mut used = [0i64; 2];
        let mut counter = 0u64;
        // The watcher: user -> (number, rank), and the last log id read.
        let mut watcher: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        let mut last_id = "0".to_string();
        let order = |w: &BTreeMap<String, (usize, u64)>| {
            let mut v: Vec<(&String, &(usize, u64))> = w.iter().collect();
            v.sort_by_key(|(_, k)| **k);
            v.into_iter().map(|(u, _)| u.clone()).collect::<Vec<_>>()
        };
        for step in 0..300 {
            let u = users[rng.below(users.len() as u64) as usize].clone();
            let at = format!("run {run} step {step}");
            match rng.below(10) {
                0..=2 => {
                    let lane = rng.below(4) as usize;
                    let mut args = vec![q.clone(), u.clone(), "n".into()];
                    if lane < 3 {
                        args.extend(["LANE".into(), LANES[lane].into()]);
                    }
                    let args: Vec<&str> = args.iter().map(String::as_str).collect();
                    c.call("QUEUE.ENTER", &args).unwrap_or_else(|e| panic!("{at}: {e}"));
                    holders.remove(&u);
                    counter += 1;
                    waiting.insert(u.clone(), (lane.min(2), counter));
                }
                3 | 4 => {
                    let k = rng.below(2) as usize;
                    let (h, lane, uses) = &codes[k];
                    match c.call("QUEUE.ENTER", &[&q, &u, "n", "CODE", h]) {
                        Ok(_) => {
                            assert!(used[k] < *uses, "{at}: a code used past its uses");
                            used[k] += 1;
                            holders.remove(&u);
                            counter += 1;
                            waiting.insert(u.clone(), (*lane, counter));
                        }
                        Err(e) => {
                            assert_eq!(testkit::error_text(&e), "NOCODE unknown or used-up access code", "{at}");
                            assert_eq!(used[k], *uses, "{at}: refused with uses left");
                        }
                    }
                }
                5 => {
                    c.leave(&q, &u);
                    waiting.remove(&u);
                    holders.remove(&u);
                }
                6 | 7 => {
                    let k = rng.below(3) as usize;
                    c.config_set(&q, &[("soft_cap", 100_000)]);
                    c.promote(&q, Some(k as i64));
                    c.config_set(&q, &[("soft_cap", 0)]);
                    for p in order(&waiting).into_iter().take(k) {
                        waiting.remove(&p);
                        holders.insert(p);
                    }
                }
                _ => {
                    // A checkpoint: the watcher starts over from QUEUE.WATCH.
                    let mut args = vec![q.as_str(), "pod", "600000"];
                    args.extend(users.iter().map(String::as_str));
                    let v = c.call("QUEUE.WATCH", &args).unwrap();
                    let redis::Value::Array(parts) = v else { panic!("{v:?}") };
                    let redis::Value::Array(each) = &parts[2] else { panic!("{parts:?}") };
                    watcher.clear();
                    for (user, pair) in users.iter().zip(each) {
                        let redis::Value::Array(pair) = pair else { panic!("{pair:?}") };
                        let number = as_int(&pair[0]).unwrap();
                        if number > 0 {
                            watcher.insert(user.clone(), (number, field_int(&testkit::fields(&pair[1]), "rank")));
                        }
                    }
                    let ids: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XRANGE")
                        .arg(format!("queue:{{{q}}}:log"))
                        .arg("-")
                        .arg("+")
                        .query(&mut raw)
                        .unwrap();
                    last_id = ids.last().map_or("0".into(), |e| e.0.clone());
                }
            }
            // The watcher applies the entries written since, by the documented rule.
            let entries: Vec<(String, BTreeMap<String, String>)> = redis::cmd("XRANGE")
                .arg(format!("queue:{{{q}}}:log"))
                .arg(format!("({last_id}"))
                .arg("+")
                .query(&mut raw)
                .unwrap();
            for (id, e) in entries {
                last_id = id;
                let nums = |f: &str| -> Vec<i64> {
                    e.get(f).map(|v| v.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or_default()
                };
                let (head, gone) = (e.get("head").map(|h| h.parse::<i64>().unwrap()), nums("gone"));
                let (left, ahead) = (nums("left"), nums("ahead"));
                assert!(!e.contains_key("reset"), "{at}: no reset expected");
                watcher.retain(|_, (s, r)| {
                    if head.is_some_and(|h| *s <= h) || left.contains(s) {
                        return false;
                    }
                    if head.is_some_and(|h| h < *s) {
                        *r -= gone[0];
                    }
                    *r -= left.iter().filter(|l| *l < s).count() as i64;
                    *r += ahead.iter().filter(|a| *a < s).count() as i64;
                    true
                });
            }
            // Everyone as the model has them; the watcher's ranks too.
            let line = order(&waiting);
            let mut args = vec![q.as_str()];
            args.extend(users.iter().map(String::as_str));
            let redis::Value::Array(all) = c.call("QUEUE.RANKS", &args).unwrap() else { panic!() };
            for (user, st) in users.iter().zip(&all) {
                let st = testkit::fields(st);
                let status = field_str(&st, "status").unwrap();
                if let Some(i) = line.iter().position(|x| x == user) {
                    let want_lane = LANES[waiting[user].0];
                    assert_eq!(
                        (status.as_str(), field_int(&st, "rank"), field_str(&st, "lane").as_deref()),
                        ("WAITING", i as i64 + 1, Some(want_lane)),
                        "{at}: {user}"
                    );
                    if let Some((_, r)) = watcher.get(user) {
                        assert_eq!(*r, i as i64 + 1, "{at}: the watcher's rank of {user}");
                    }
                } else if holders.contains(user) {
                    assert_eq!(status, "PROMOTED", "{at}: {user}");
                } else {
                    assert_eq!(status, "UNKNOWN", "{at}: {user}");
                }
            }
            let redis::Value::Array(counts) = c.call("QUEUE.CODES", &[&q, "COUNTS"]).unwrap() else { panic!() };
            for (k, (_, lane, uses)) in codes.iter().enumerate() {
                let redis::Value::Array(f) = &counts[*lane] else { panic!() };
                assert_eq!((as_int(&f[2]), as_int(&f[3])), (Some(used[k]), Some(uses - used[k])), "{at}");
            }
        }
    }
}

fn leases_hold_slots_until_end_or_expiry(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 2), ("session_lease", 300)]);
    for u in ["a", "b"] {
        let t = field_str(&c.enter("q", u, u), "ticketId").unwrap();
        c.claim("q", &t).unwrap();
    }
    c.enter("q", "c", "c");
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0);
    // a keeps heartbeating; b goes silent (its server died): b's slot comes back.
    c.set_clock("q", T0 + 200);
    assert_eq!(c.heartbeat("q", &["a"]), vec![1]);
    c.set_clock("q", T0 + 299);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0, "b's lease runs until T0 + 300");
    c.set_clock("q", T0 + 300);
    let r = c.promote("q", None);
    assert_eq!((field_int(&r, "promoted"), field_int(&r, "leases_expired")), (1, 1));
    assert_eq!(c.heartbeat("q", &["a", "b", "nobody"]), vec![1, 0, 0]);
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("ACTIVE"));
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("UNKNOWN"));
    assert_eq!(c.end("q", "a"), 1);
    assert_eq!(c.end("q", "a"), 0);
    let info = c.info("q");
    assert_eq!((field_int(&info, "active"), field_int(&info, "ended"), field_int(&info, "lapsed")), (0, 1, 1));
}

fn status_shapes_and_estimated_wait(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    let r = c.status("q", "ghost");
    assert_eq!(field_str(&r, "status").as_deref(), Some("UNKNOWN"));
    assert_eq!(field_int(&r, "rank"), 0);
    assert_eq!(field_str(&r, "ticketId"), None);
    assert_eq!(r.len(), 7);
    assert_eq!(r.get("opensAt"), Some(&redis::Value::Nil), "nil for everyone not in a pre-queue");
    c.config_set("q", &[("rate", 2)]);
    for i in 0..10 {
        c.enter("q", &format!("u{i}"), "n");
    }
    let r = c.status("q", "u9");
    assert_eq!(field_str(&r, "status").as_deref(), Some("WAITING"));
    assert_eq!(field_int(&r, "rank"), 10);
    assert_eq!(field_str(&r, "ticketId"), None);
    // No admissions measured yet: the configured rate (2/s) gives 10 / 2 = 5 s: under
    // 15 s no figure is given (the turn is near).
    assert!(matches!(r.get("estimatedWaitSeconds"), Some(redis::Value::Nil)), "{r:?}");
    for i in 10..300 {
        c.enter("q", &format!("u{i}"), "n");
    }
    // The 29th at 2/s: 14.5 s, rounded to 15 s, shown as 20 s (the shortest step a
    // person reads); the 28th: 14 s, no figure.
    assert_eq!(field_int(&c.status("q", "u28"), "estimatedWaitSeconds"), 20);
    assert!(matches!(c.status("q", "u27").get("estimatedWaitSeconds"), Some(redis::Value::Nil)));
    // 300th at 2/s: 150 s, in 30 s steps.
    assert_eq!(field_int(&c.status("q", "u299"), "estimatedWaitSeconds"), 150);
    c.config_set("q", &[("rate", 0)]);
    assert_eq!(field_str(&c.status("q", "u9"), "estimatedWaitSeconds"), None);
}

fn ranks_answers_for_many(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    for u in ["a", "b", "c"] {
        c.enter("q", u, u);
    }
    let v = c.call("QUEUE.RANKS", &["q", "c", "zz", "a"]).unwrap();
    let redis::Value::Array(items) = v else { panic!("array") };
    let got: Vec<(Option<String>, i64)> = items
        .iter()
        .map(|m| {
            let m = testkit::fields(m);
            (field_str(&m, "status"), field_int(&m, "rank"))
        })
        .collect();
    assert_eq!(got, vec![(Some("WAITING".into()), 3), (Some("UNKNOWN".into()), 0), (Some("WAITING".into()), 1)]);
}

fn resp3_maps(b: Backend) {
    let s = ValkeyServer::start(b);
    let mut c = s.client3();
    let v = c.call("QUEUE.ENTER", &["q", "a", "alice"]).unwrap();
    assert!(matches!(v, redis::Value::Map(_)), "{v:?}");
    let m = testkit::fields(&v);
    assert!(matches!(m["estimatedWaitSeconds"], redis::Value::Nil), "{m:?}");
    assert_eq!(as_int(&c.call("QUEUE.LEAVE", &["q", "a"]).unwrap()), Some(1));
}

/// A slot freed inside SESSION.END, QUEUE.LEAVE of a ticket holder, a claim of an
/// expired ticket or a holder's re-entry goes to the head of the line in that same
/// command, announced on `queue:{Q}:promoted` with the queue-manager's JSON.
fn freed_slots_are_filled_and_announced_at_once(b: Backend) {
    let (s, mut c) = server(b);
    let mut sub = redis::Client::open(s.url()).unwrap().get_connection().unwrap();
    sub.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut sub = sub.as_pubsub();
    sub.subscribe("queue:{q}:promoted").unwrap();
    let mut heard = |(promoted, waiting, at): (i64, i64, i64)| {
        let msg = sub.get_message().expect("an announcement");
        let want = format!(r#"{{"queue":"q","promoted":{promoted},"waiting":{waiting},"atMs":{at}}}"#);
        assert_eq!(String::from_utf8_lossy(msg.get_payload_bytes()), want);
    };
    c.config_set("q", &[("soft_cap", 2), ("ticket_ttl", 1_000)]);
    for u in ["a", "b", "c", "d", "e", "f"] {
        c.enter("q", u, u);
    }
    // a and b hold tickets; c..f wait.
    let ta = field_str(&c.status("q", "a"), "ticketId").unwrap();
    let tb = field_str(&c.status("q", "b"), "ticketId").unwrap();
    c.claim("q", &ta).unwrap();
    assert_eq!(c.end("q", "a"), 1);
    heard((1, 3, T0));
    assert_eq!(field_str(&c.status("q", "c"), "status").as_deref(), Some("PROMOTED"));
    // A ticket holder leaves: d gets the slot.
    assert_eq!(c.leave("q", "c"), 1);
    heard((1, 2, T0));
    assert_eq!(field_str(&c.status("q", "d"), "status").as_deref(), Some("PROMOTED"));
    // A holder re-enters: its ticket goes to e, it goes to the back.
    let r = c.enter("q", "d", "d");
    assert_eq!((field_str(&r, "status").as_deref(), field_int(&r, "rank")), (Some("WAITING"), 2));
    heard((1, 1, T0));
    // b's ticket expires and is claimed: the claim is refused, b's slot and e's go to
    // f and d.
    c.set_clock("q", T0 + 1_000);
    let i = c.info("q");
    assert_eq!((field_int(&i, "waiting"), field_int(&i, "joining")), (2, 2), "b and e hold expired tickets");
    let err = c.claim("q", &tb).unwrap_err();
    assert!(err.starts_with("EXPIRED"), "{err}");
    heard((2, 0, T0 + 1_000));
    for u in ["f", "d"] {
        assert_eq!(field_str(&c.status("q", u), "status").as_deref(), Some("PROMOTED"), "{u}");
    }
    let i = c.info("q");
    assert_eq!((field_int(&i, "joining"), field_int(&i, "expired")), (2, 2));
    // Nobody waits: ending a session announces nothing; the next announcement is the
    // next promotion.
    c.enter("q", "g", "g");
    let tf = field_str(&c.status("q", "f"), "ticketId").unwrap();
    c.claim("q", &tf).unwrap();
    assert_eq!(c.end("q", "f"), 1);
    heard((1, 0, T0 + 1_000));
}

/// QUEUE.LINE pages through the waiting users in line order with exact ranks, skips
/// ticket holders, tells the ETA inputs, and counts nobody as heard from.
fn line_walks_the_waiting_users_in_pages(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 0), ("abandon_after", 10_000), ("rate", 5)]);
    for i in 0..25 {
        c.enter("q", &format!("u{i:02}"), "n");
    }
    c.config_set("q", &[("soft_cap", 3)]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 3);
    c.leave("q", "u07");
    c.leave("q", "u20");
    let waiting: Vec<String> = (3..25).map(|i| format!("u{i:02}")).filter(|u| u != "u07" && u != "u20").collect();
    let page = |c: &mut Client, cursor: i64, count: i64| -> (i64, i64, Vec<i64>, Vec<String>) {
        let v: redis::Value =
            c.cmd("QUEUE.LINE", &["q".to_string(), cursor.to_string(), count.to_string()]).query(&mut c.con).unwrap();
        let redis::Value::Array(items) = v else { panic!("{v:?}") };
        let ints: Vec<i64> = items[..4].iter().map(|v| as_int(v).unwrap()).collect();
        let users = match &items[4] {
            redis::Value::Array(us) => us.iter().map(|u| testkit::as_string(u).unwrap()).collect(),
            other => panic!("{other:?}"),
        };
        (ints[0], ints[1], ints[2..].to_vec(), users)
    };
    let measured = field_int(&c.info("q"), "admission_rate_per_min");
    let (mut cursor, mut seen, mut pages) = (0, Vec::new(), 0);
    loop {
        let (first, next, eta_inputs, users) = page(&mut c, cursor, 7);
        assert_eq!(eta_inputs, vec![measured, 5], "the measured admissions per minute and the rate setting");
        if !users.is_empty() {
            assert_eq!(first, seen.len() as i64 + 1, "page {pages}");
            let st = c.status("q", &users[0]);
            assert_eq!(field_int(&st, "rank"), first, "the first rank is STATUS's");
        }
        seen.extend(users);
        pages += 1;
        if next == 0 {
            break;
        }
        cursor = next;
    }
    assert_eq!(seen, waiting);
    assert_eq!(pages, 3, "20 users in pages of 7, the last one short");
    // Bad arguments.
    for (cur, n) in [("-1", "5"), ("x", "5"), ("0", "0"), ("0", "100001")] {
        let r: Result<redis::Value, _> = c.cmd("QUEUE.LINE", &["q", cur, n]).query(&mut c.con);
        assert!(r.is_err(), "{cur} {n}");
    }
    // Walking counts nobody as heard from: past abandon_after, all but the users
    // STATUS asked about above are dropped.
    c.set_clock("q", T0 + 10_001);
    let (_, _, _, left) = page(&mut c, 0, 100);
    assert_eq!(left.len(), 20, "LINE drops nobody itself");
    let p = c.promote("q", Some(0));
    assert!(field_int(&p, "dropped") >= 16, "{p:?}");
}

/// The module keeps a queue's settings and stats between commands; whatever changes
/// its keys other than its own commands (an operator's HSET or DEL, SWAPDB, FLUSHALL)
/// is seen by the very next command.
fn changes_made_behind_the_commands_are_seen_at_once(b: Backend) {
    let (_s, mut c) = server(b);
    let raw = |c: &mut Client, args: &[&str]| -> redis::Value {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        cmd.query(&mut c.con).unwrap()
    };
    c.config_set("q", &[("soft_cap", 1)]);
    assert_eq!(field_str(&c.enter("q", "a", "n"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(field_str(&c.enter("q", "b", "n"), "status").as_deref(), Some("WAITING"));
    // The soft cap raised by hand: the next PROMOTE uses it.
    raw(&mut c, &["HSET", "queue:{q}:config", "soft_cap", "3"]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    // joining rewritten by hand (as a repair would): INFO and the next ENTER see it.
    raw(&mut c, &["HSET", "queue:{q}:stats", "joining", "0"]);
    assert_eq!(field_int(&c.info("q"), "joining"), 0);
    raw(&mut c, &["HSET", "queue:{q}:stats", "joining", "2"]);
    assert_eq!(field_int(&c.info("q"), "joining"), 2);
    // The config deleted: defaults again (soft cap 1000 lets the next one in at once).
    raw(&mut c, &["DEL", "queue:{q}:config"]);
    assert_eq!(field_int(&c.info("q"), "soft_cap"), 1000);
    // SWAPDB: the queue in db 0 is now the empty one that was in db 1.
    raw(&mut c, &["SWAPDB", "0", "1"]);
    let i = c.info("q");
    assert_eq!((field_int(&i, "joining"), field_int(&i, "promoted")), (0, 0), "{i:?}");
    raw(&mut c, &["SWAPDB", "0", "1"]);
    assert_eq!(field_int(&c.info("q"), "joining"), 2);
    raw(&mut c, &["FLUSHALL"]);
    c.set_clock("q", T0);
    assert_eq!(field_int(&c.info("q"), "joining"), 0);
    assert_eq!(field_str(&c.enter("q", "c", "n"), "status").as_deref(), Some("PROMOTED"));
}

/// A queue key given a TTL (an operator's doing) is seen gone once it expires, with
/// active expiry off too (the key is then deleted when first opened): nothing the
/// module kept of it outlives it.
fn an_expired_key_is_seen_gone(b: Backend) {
    let s = ValkeyServer::builder(b).test_clock().arg("--enable-debug-command").arg("yes").start();
    let mut c = s.client();
    let raw = |c: &mut Client, args: &[&str]| {
        let mut cmd = redis::cmd(args[0]);
        cmd.arg(&args[1..]);
        cmd.query::<redis::Value>(&mut c.con).unwrap();
    };
    c.set_clock("q", T0);
    raw(&mut c, &["DEBUG", "SET-ACTIVE-EXPIRE", "0"]);
    c.config_set("q", &[("soft_cap", 1)]);
    c.enter("q", "a", "n");
    assert_eq!(field_int(&c.info("q"), "joining"), 1);
    raw(&mut c, &["PEXPIRE", "queue:{q}:stats", "1"]);
    std::thread::sleep(std::time::Duration::from_millis(10));
    // Opens the stats hash for the counters: it expires right there.
    c.info("q");
    let i = c.info("q");
    assert_eq!((field_int(&i, "joining"), field_int(&i, "promoted")), (0, 0), "{i:?}");
}

/// A slot freed inside SESSION.END is filled only when the token bucket has a whole
/// token: the rate limit holds on this path too.
fn freed_slots_wait_for_a_token(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 1), ("rate", 1), ("burst", 1)]);
    let ta = field_str(&c.enter("q", "a", "n"), "ticketId").expect("a is let in with the one token");
    c.claim("q", &ta).unwrap();
    c.enter("q", "b", "n");
    assert_eq!(c.end("q", "a"), 1);
    let st = c.status("q", "b");
    assert_eq!(field_str(&st, "status").as_deref(), Some("WAITING"), "no token yet: {st:?}");
    assert_eq!(field_int(&c.info("q"), "tokens"), 0);
    c.set_clock("q", T0 + 1_000);
    c.enter("q", "c", "n");
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1, "the refilled token lets b in");
    let tb = field_str(&c.status("q", "b"), "ticketId").unwrap();
    c.claim("q", &tb).unwrap();
    c.set_clock("q", T0 + 1_500);
    assert_eq!(c.end("q", "b"), 1);
    assert_eq!(field_str(&c.status("q", "c"), "status").as_deref(), Some("WAITING"), "half a token");
    c.set_clock("q", T0 + 2_000);
    c.enter("q", "d", "n");
    c.enter("q", "e", "n");
    // A holder leaving with a token in the bucket: the slot goes to the head at once.
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    assert_eq!(field_str(&c.status("q", "c"), "status").as_deref(), Some("PROMOTED"));
    c.set_clock("q", T0 + 3_000);
    assert_eq!(c.leave("q", "c"), 1);
    assert_eq!(field_str(&c.status("q", "d"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(field_str(&c.status("q", "e"), "status").as_deref(), Some("WAITING"));
    assert_eq!(field_int(&c.info("q"), "tokens"), 0);
}

/// `max_waiting`: past it a newcomer is refused with LINEFULL and nothing changes;
/// those already waiting may enter again; the pre-queue counts too; 0 lifts it.
fn max_waiting_refuses_newcomers_only(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("max_waiting", 2)]);
    c.enter("q", "a", "a");
    c.enter("q", "b", "b");
    let dump = |c: &mut Client| -> Vec<(String, Vec<u8>)> {
        let keys: Vec<String> = redis::cmd("KEYS").arg("queue:{q}:*").query(&mut c.con).unwrap();
        let mut all: Vec<(String, Vec<u8>)> = keys
            .into_iter()
            .filter(|k| !k.ends_with(":clock"))
            .map(|k| {
                let d: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut c.con).unwrap();
                (k, d)
            })
            .collect();
        all.sort();
        all
    };
    let before = dump(&mut c);
    let refused = c.call("QUEUE.ENTER", &["q", "c", "c"]).unwrap_err();
    assert_eq!(testkit::error_text(&refused), "LINEFULL the line is full, try again later");
    assert_eq!(dump(&mut c), before, "a refused entry changes nothing");
    assert_eq!(field_str(&c.status("q", "c"), "status").as_deref(), Some("UNKNOWN"));
    // Someone already waiting enters again: moved to the back, nobody added.
    assert_eq!(field_int(&c.enter("q", "a", "a"), "rank"), 2);
    // Room again once someone leaves.
    c.leave("q", "b");
    assert_eq!(field_int(&c.enter("q", "c", "c"), "rank"), 2);
    // Before an opening the pre-queue counts with the line.
    c.config_set("q", &[("max_waiting", 3), ("opens_at", T0 + 60_000)]);
    c.enter("q", "d", "d");
    assert!(c.call("QUEUE.ENTER", &["q", "e", "e"]).is_err(), "a, c and d wait");
    assert_eq!(field_str(&c.enter("q", "d", "d2"), "nickname").as_deref(), Some("d2"), "d may enter again");
    c.config_set("q", &[("max_waiting", 0)]);
    c.enter("q", "e", "e");
    assert_eq!(field_int(&c.info("q"), "max_waiting"), 0);
}

/// Every key of queue `q` but its test clock, dumped: a refused command changes none.
fn dump_queue(c: &mut Client, q: &str) -> Vec<(String, Vec<u8>)> {
    let keys: Vec<String> = redis::cmd("KEYS").arg(format!("queue:{{{q}}}:*")).query(&mut c.con).unwrap();
    let mut all: Vec<(String, Vec<u8>)> = keys
        .into_iter()
        .filter(|k| !k.ends_with(":clock"))
        .map(|k| {
            let d: Vec<u8> = redis::cmd("DUMP").arg(&k).query(&mut c.con).unwrap();
            (k, d)
        })
        .collect();
    all.sort();
    all
}

/// A `state` entry of the change log: n, closed, sold_out, message (hex), waiting.
fn state_entry(n: i64, closed: bool, sold_out: bool, message: &str, waiting: i64) -> Vec<(&'static str, String)> {
    let hex: String = message.bytes().map(|b| format!("{b:02x}")).collect();
    vec![
        ("n", n.to_string()),
        ("closed", u8::from(closed).to_string()),
        ("sold_out", u8::from(sold_out).to_string()),
        ("message", hex),
        ("waiting", waiting.to_string()),
    ]
}

/// `closes_at`: from then on every form of ENTER is refused with CLOSED; the first
/// command to see the time pass writes one `state` entry; people already waiting stay
/// and are still promoted; 0 opens the queue again.
fn a_sale_closes_at_its_time_and_says_so_once(b: Backend) {
    let (s, mut c) = server(b);
    let mut log = LogReader::new(&s, "q");
    closed_queue(&mut c, "q");
    c.config_set("q", &[("closes_at", T0 + 1_000)]);
    log.expect(&mut c, "closes_at in the future", &[]);
    c.enter("q", "a", "a");
    c.enter("q", "b", "b");
    assert_eq!(field_int(&c.info("q"), "closed"), 0);
    c.set_clock("q", T0 + 1_000);
    // QUEUE.INFO is read-only: it shows the time passed, and writes nothing.
    let info = c.info("q");
    assert_eq!((field_int(&info, "closed"), field_int(&info, "closes_at")), (1, T0 + 1_000));
    log.expect(&mut c, "INFO", &[]);
    assert_eq!(c.err("QUEUE.ENTER", &["q", "c", "c"]), "CLOSED this queue is closed to new entries");
    log.expect(&mut c, "the first ENTER after closes_at", &[&state_entry(1, true, false, "", 2)]);
    // Refused again: nothing changes at all, re-entry and a lane included.
    let before = dump_queue(&mut c, "q");
    assert_eq!(c.err("QUEUE.ENTER", &["q", "a", "a"]), "CLOSED this queue is closed to new entries");
    assert_eq!(c.err("QUEUE.ENTER", &["q", "c", "c", "LANE", "x"]), "CLOSED this queue is closed to new entries");
    assert_eq!(dump_queue(&mut c, "q"), before, "a refused entry changes nothing");
    log.expect(&mut c, "ENTER refused again", &[]);
    // Those waiting are still promoted.
    c.config_set("q", &[("soft_cap", 1)]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("WAITING"));
    log.expect(
        &mut c,
        "PROMOTE while closed",
        &[&[("n", "2".into()), ("head", "1".into()), ("gone", "1".into()), ("waiting", "1".into())]],
    );
    // Open again: one entry says so, and entries are taken.
    c.config_set("q", &[("closes_at", 0)]);
    log.expect(&mut c, "closes_at 0", &[&state_entry(3, false, false, "", 1)]);
    assert_eq!(field_str(&c.enter("q", "c", "c"), "status").as_deref(), Some("WAITING"));
    // PROMOTE (the queue-manager's tick) is the first to see a closing time pass too.
    c.config_set("q", &[("closes_at", T0 + 2_000)]);
    c.set_clock("q", T0 + 2_000);
    c.promote("q", Some(0));
    log.expect(&mut c, "PROMOTE after closes_at", &[&state_entry(4, true, false, "", 2)]);
}

/// `inventory`: tickets and sessions not reported bought count against it; PROMOTE
/// never goes beyond it; QUEUE.SOLD lowers it (USER: that person no longer counts);
/// at 0 every ENTER is refused with SOLDOUT and nobody is promoted.
fn the_inventory_bounds_admissions_and_sold_out_refuses(b: Backend) {
    let (s, mut c) = server(b);
    let mut log = LogReader::new(&s, "q");
    closed_queue(&mut c, "q");
    for u in ["a", "b", "c", "d", "e"] {
        c.enter("q", u, u);
    }
    c.config_set("q", &[("soft_cap", 10), ("inventory", 3)]);
    let info = c.info("q");
    assert_eq!(
        (field_int(&info, "inventory"), field_int(&info, "outstanding"), field_int(&info, "sold_out")),
        (3, 0, 0)
    );
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 3, "three units: three tickets");
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0, "three tickets out: no room");
    let ticket = field_str(&c.status("q", "a"), "ticketId").unwrap();
    c.claim("q", &ticket).unwrap();
    assert_eq!(field_int(&c.info("q"), "outstanding"), 3, "a session counts as a ticket does");
    // Someone not inside reported as buying: only the inventory goes down.
    assert_eq!(as_int(&c.call("QUEUE.SOLD", &["q", "1", "USER", "e"]).unwrap()), Some(2));
    assert_eq!(field_int(&c.info("q"), "outstanding"), 3);
    // a bought: a no longer counts; a report of 0 units for a is refused (it would
    // free a unit nobody sold), changing nothing.
    c.config_set("q", &[("inventory", 4)]);
    assert_eq!(as_int(&c.call("QUEUE.SOLD", &["q", "1", "USER", "a"]).unwrap()), Some(3));
    assert_eq!(c.err("QUEUE.SOLD", &["q", "0", "USER", "a"]), "ERR n must be an integer from 1 to 1000000000000");
    assert_eq!(field_int(&c.info("q"), "outstanding"), 2);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1, "three left, two outstanding");
    log.expect(
        &mut c,
        "promotions within the inventory",
        &[
            &[("n", "1".into()), ("head", "3".into()), ("gone", "3".into()), ("waiting", "2".into())],
            &[("n", "2".into()), ("head", "4".into()), ("gone", "1".into()), ("waiting", "1".into())],
        ],
    );
    // Sold out: one entry says so; ENTER refused changing nothing; nobody promoted.
    assert_eq!(as_int(&c.call("QUEUE.SOLD", &["q", "5"]).unwrap()), Some(0), "never below 0");
    log.expect(&mut c, "sold out", &[&state_entry(3, false, true, "", 1)]);
    let info = c.info("q");
    assert_eq!((field_int(&info, "inventory"), field_int(&info, "sold_out")), (0, 1));
    let before = dump_queue(&mut c, "q");
    assert_eq!(c.err("QUEUE.ENTER", &["q", "f", "f"]), "SOLDOUT sold out");
    assert_eq!(c.err("QUEUE.ENTER", &["q", "e", "e"]), "SOLDOUT sold out");
    assert_eq!(dump_queue(&mut c, "q"), before, "a refused entry changes nothing");
    c.end("q", "a");
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 0, "sold out: nobody promoted");
    // CLOSED is said before SOLDOUT.
    c.config_set("q", &[("closes_at", T0)]);
    assert_eq!(c.err("QUEUE.ENTER", &["q", "f", "f"]), "CLOSED this queue is closed to new entries");
    // More stock: entries again; no limit: INFO's inventory is nil.
    c.config_set("q", &[("closes_at", 0), ("inventory", -1)]);
    assert_eq!(field_str(&c.enter("q", "f", "f"), "status").as_deref(), Some("WAITING"));
    let nil = |v: Option<&redis::Value>| matches!(v, Some(redis::Value::Nil | redis::Value::Boolean(false)));
    assert!(nil(c.info("q").get("inventory")), "no limit: nil");
    assert!(nil(Some(&c.call("QUEUE.SOLD", &["q", "1"]).unwrap())));
    assert!(nil(Some(&c.call("QUEUE.CONFIG", &["q", "GET", "inventory"]).unwrap())));
    let sold: Option<String> = redis::cmd("HGET").arg("queue:{q}:stats").arg("sold").query(&mut c.con).unwrap();
    assert_eq!(sold.as_deref(), Some("8"), "every unit reported counted");
}

/// The message: one write, one `state` entry (hex: the published entry is words
/// separated by spaces); bad settings and arguments are refused changing nothing.
fn a_message_and_bad_sale_settings(b: Backend) {
    let (s, mut c) = server(b);
    let mut log = LogReader::new(&s, "q");
    c.call("QUEUE.CONFIG", &["q", "SET", "message", "Doors close at 9, café open"]).unwrap();
    log.expect(&mut c, "a message", &[&state_entry(1, false, false, "Doors close at 9, café open", 0)]);
    assert_eq!(field_str(&c.info("q"), "message").as_deref(), Some("Doors close at 9, café open"));
    assert_eq!(
        testkit::as_string(&c.call("QUEUE.CONFIG", &["q", "GET", "message"]).unwrap()).as_deref(),
        Some("Doors close at 9, café open")
    );
    let before = dump_queue(&mut c, "q");
    let long = "x".repeat(501);
    let msg_err = "ERR message must be at most 500 bytes, no control characters";
    for (args, want) in [
        (vec!["q", "SET", "message", long.as_str()], msg_err),
        (vec!["q", "SET", "message", "a\nb"], msg_err),
        (vec!["q", "SET", "soft_cap", "5", "message", "bell\u{7}"], msg_err),
        (vec!["q", "SET", "inventory", "-2"], "ERR inventory must be an integer from -1 to 1000000000000"),
        (vec!["q", "SET", "inventory", "x"], "ERR value is not an integer or out of range"),
        (vec!["q", "SET", "closes_at", "-1"], "ERR closes_at must be an integer from 0 to 253402300799999"),
    ] {
        assert_eq!(c.err("QUEUE.CONFIG", &args), want, "{args:?}");
    }
    for (args, want) in [
        (vec!["q", "-1"], "ERR n must be an integer from 0 to 1000000000000"),
        (vec!["q", "x"], "ERR value is not an integer or out of range"),
        (vec!["q", "1", "USER"], "ERR wrong number of arguments for 'queue.sold' command"),
        (vec!["q", "1", "WHO", "a"], "ERR syntax error"),
        (vec!["q", "1", "USER", "a b"], "ERR invalid userId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
    ] {
        assert_eq!(c.err("QUEUE.SOLD", &args), want, "{args:?}");
    }
    assert_eq!(dump_queue(&mut c, "q"), before, "refused settings and sales change nothing");
    log.expect(&mut c, "refusals", &[]);
    c.call("QUEUE.CONFIG", &["q", "SET", "message", ""]).unwrap();
    log.expect(&mut c, "the message cleared", &[&state_entry(2, false, false, "", 0)]);
}

/// `slot_wait_ms`: a slot freed by an expiry (a ticket not claimed, a lease not
/// renewed) stands empty from its deadline until a promotion fills it; the oldest
/// are filled first; a slot freed inside a command (SESSION.END) waits nothing.
fn slot_wait_counts_how_long_expired_slots_stood_empty(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 2), ("ticket_ttl", 1_000), ("session_lease", 5_000)]);
    let wait = |c: &mut Client| field_int(&c.info("q"), "slot_wait_ms");
    let ta = field_str(&c.enter("q", "a", "n"), "ticketId").expect("a is let in at once");
    c.claim("q", &ta).unwrap();
    // b's ticket expires at T0 + 1000 unclaimed; a's lease ends at T0 + 5000.
    assert!(field_str(&c.enter("q", "b", "n"), "ticketId").is_some());
    for u in ["c", "d", "e"] {
        c.enter("q", u, "n");
    }
    assert_eq!(wait(&mut c), 0);
    c.set_clock("q", T0 + 1_300);
    let r = c.promote("q", None);
    assert_eq!((field_int(&r, "tickets_expired"), field_int(&r, "promoted")), (1, 1));
    assert_eq!(wait(&mut c), 300, "b's slot stood empty from its expiry to this PROMOTE");
    // c's ticket (issued at T0 + 1300) expires at T0 + 2300, a's lease at T0 + 5000:
    // both are gone at T0 + 5200, and MAX 1 fills only the older slot.
    c.set_clock("q", T0 + 5_200);
    let r = c.promote("q", Some(1));
    assert_eq!((field_int(&r, "tickets_expired"), field_int(&r, "leases_expired")), (1, 1));
    assert_eq!(wait(&mut c), 300 + 2_900, "c's slot: from T0 + 2300");
    // The other freed slot is filled by the next PROMOTE: not counted (only slots
    // freed by this command's own housekeeping are).
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    assert_eq!(wait(&mut c), 3_200);
    // A slot freed by SESSION.END goes at once: nothing waited.
    let t = field_str(&c.status("q", "d"), "ticketId").unwrap();
    c.claim("q", &t).unwrap();
    c.enter("q", "f", "n");
    assert_eq!(c.end("q", "d"), 1);
    assert_eq!(wait(&mut c), 3_200);
    // A claim that finds its ticket expired hands the expired slots on at once, each
    // counted from its own deadline.
    let te = field_str(&c.status("q", "e"), "ticketId").unwrap();
    assert_eq!(field_str(&c.status("q", "f"), "status").as_deref(), Some("PROMOTED"));
    c.enter("q", "g", "n");
    c.enter("q", "h", "n");
    c.set_clock("q", T0 + 6_500);
    assert!(c.claim("q", &te).is_err(), "e's ticket expired at T0 + 6200");
    // e's and f's tickets both went (both expiring at T0 + 6200): g and h are in.
    assert_eq!(field_str(&c.status("q", "h"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(wait(&mut c), 3_200 + 2 * 300);
}

/// QUEUE.WATCH's reply: (log number, waiting, per user (number, standing map)).
type Checkpoint = (i64, i64, Vec<(i64, std::collections::HashMap<String, redis::Value>)>);

fn watch(c: &mut Client, q: &str, instance: &str, lease_ms: i64, users: &[&str]) -> Checkpoint {
    let lease = lease_ms.to_string();
    let mut args = vec![q, instance, lease.as_str()];
    args.extend_from_slice(users);
    let v = c.call("QUEUE.WATCH", &args).unwrap_or_else(|e| panic!("WATCH {args:?}: {e}"));
    let redis::Value::Array(items) = &v else { panic!("WATCH: {v:?}") };
    assert_eq!(items.len(), 3, "WATCH: {v:?}");
    let redis::Value::Array(each) = &items[2] else { panic!("WATCH: {v:?}") };
    let each = each
        .iter()
        .map(|p| match p {
            redis::Value::Array(pair) if pair.len() == 2 => (as_int(&pair[0]).unwrap(), testkit::fields(&pair[1])),
            other => panic!("WATCH user entry {other:?}"),
        })
        .collect::<Vec<_>>();
    assert_eq!(each.len(), users.len());
    (as_int(&items[0]).unwrap(), as_int(&items[1]).unwrap(), each)
}

fn unwatch(c: &mut Client, q: &str, instance: &str, users: &[&str]) -> i64 {
    let mut args = vec![q, instance];
    args.extend_from_slice(users);
    as_int(&c.call("QUEUE.UNWATCH", &args).unwrap()).unwrap()
}

/// Each user's number in line (0 unless waiting in line), by a WATCH that registers
/// them under a throwaway instance of the shortest lease, then takes that back.
fn numbers(c: &mut Client, q: &str, users: &[&str]) -> Vec<i64> {
    let (_, _, each) = watch(c, q, "numbers", 1, users);
    let nums: Vec<i64> = each.iter().map(|(n, _)| *n).collect();
    // Unwatching counts as heard from: drop the registrations by hand instead.
    for u in users {
        let _: () = redis::cmd("HDEL").arg(format!("queue:{{{q}}}:watched")).arg(*u).query(&mut c.con).unwrap();
    }
    nums
}

/// The change log's entries after `after` ("-" for all): (id, fields in order).
fn log_after(con: &mut redis::Connection, q: &str, after: &str) -> Vec<(String, Vec<(String, String)>)> {
    let from = if after == "-" { "-".to_string() } else { format!("({after}") };
    redis::cmd("XRANGE").arg(format!("queue:{{{q}}}:log")).arg(from).arg("+").query(con).unwrap()
}

/// Reads the entries written since the last call and checks them against `want`
/// (field, value) lists, in order; and that each was published on the queue's
/// changes channel, as written (id, then fields and values), and nothing else was.
struct LogReader {
    q: String,
    last: String,
    changes: redis::Connection,
}

impl LogReader {
    fn new(s: &ValkeyServer, q: &str) -> LogReader {
        let mut changes = redis::Client::open(s.admin_url()).unwrap().get_connection().unwrap();
        let _: redis::Value =
            redis::cmd("SUBSCRIBE").arg(format!("queue:{{{q}}}:changes")).query(&mut changes).unwrap();
        LogReader { q: q.into(), last: "-".into(), changes }
    }
    fn expect(&mut self, c: &mut Client, what: &str, want: &[&[(&str, String)]]) {
        let got = log_after(&mut c.con, &self.q, &self.last);
        if let Some((id, _)) = got.last() {
            self.last = id.clone();
        }
        let written: Vec<String> = got
            .iter()
            .map(|(id, fields)| {
                let mut m = id.clone();
                for (f, v) in fields {
                    m.push_str(&format!(" {f} {v}"));
                }
                m
            })
            .collect();
        // A marker published after the command: everything it published came before.
        let channel = format!("queue:{{{}}}:changes", self.q);
        let _: i64 = redis::cmd("PUBLISH").arg(&channel).arg("end").query(&mut c.con).unwrap();
        self.changes.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
        let mut heard = Vec::new();
        loop {
            let v = self.changes.recv_response().unwrap();
            let redis::Value::Array(parts) = v else { panic!("a pub/sub message: {v:?}") };
            let redis::Value::BulkString(payload) = &parts[2] else { panic!("a payload: {parts:?}") };
            if payload == b"end" {
                break;
            }
            heard.push(String::from_utf8(payload.clone()).unwrap());
        }
        assert_eq!(heard, written, "published changes after {what}");
        let got: Vec<Vec<(String, String)>> = got.into_iter().map(|(_, f)| f).collect();
        let want: Vec<Vec<(String, String)>> =
            want.iter().map(|e| e.iter().map(|(f, v)| (f.to_string(), v.clone())).collect()).collect();
        assert_eq!(got, want, "change log after {what}");
    }
}

fn watched(c: &mut Client, q: &str) -> std::collections::BTreeMap<String, String> {
    redis::cmd("HGETALL").arg(format!("queue:{{{q}}}:watched")).query(&mut c.con).unwrap()
}

fn waiting_now(c: &mut Client, q: &str) -> i64 {
    field_int(&c.info(q), "waiting")
}

/// A registered waiting user is heard from as long as its instance's lease lives:
/// PROMOTE (its walk and its sweep) drops it only `abandon_after` after the later of
/// its own time and the lease's end; WATCH itself counts nobody as heard from.
fn a_watched_user_is_heard_from_while_its_instance_lease_lives(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("abandon_after", 1_000)]);
    for u in ["a", "b", "c"] {
        c.enter("q", u, u);
    }
    let (n, waiting, each) = watch(&mut c, "q", "pod-1", 5_000, &["b"]);
    assert_eq!((n, waiting), (0, 3));
    assert_eq!(field_str(&each[0].1, "status").as_deref(), Some("WAITING"));
    assert_eq!(field_int(&each[0].1, "rank"), 2);
    assert!(each[0].0 > 0, "b's number in line");
    // a and c are silent past abandon_after; b's instance vouches for it until T0 + 5000.
    c.set_clock("q", T0 + 1_001);
    let r = c.promote("q", Some(0));
    assert_eq!(field_int(&r, "dropped"), 2, "{r:?}");
    assert_eq!(waiting_now(&mut c, "q"), 1);
    // Renewing the lease with no users keeps b's registration and vouches further.
    c.set_clock("q", T0 + 4_000);
    let (_, waiting, each) = watch(&mut c, "q", "pod-1", 2_000, &[]);
    assert_eq!((waiting, each.len()), (1, 0));
    // The lease ends at T0 + 6000: b is heard from then, and dropped only past
    // T0 + 7000.
    c.set_clock("q", T0 + 7_000);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 0, "silent for exactly abandon_after since the lease");
    c.set_clock("q", T0 + 7_001);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 1, "the instance stopped renewing");
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("UNKNOWN"));
    assert!(watched(&mut c, "q").is_empty(), "a dropped user's registration goes");

    // The walk at the head too: x silent, y watched, z silent; y is promoted, x and z
    // dropped on the way (room for ten).
    closed_queue(&mut c, "s");
    c.config_set("s", &[("abandon_after", 1_000)]);
    for u in ["x", "y", "z"] {
        c.enter("s", u, u);
    }
    watch(&mut c, "s", "pod-2", 3_000, &["y"]);
    // x registered under another instance whose lease is over at once.
    c.set_clock("s", T0 + 1);
    watch(&mut c, "s", "pod-3", 1, &["x"]);
    c.set_clock("s", T0 + 2_000);
    c.config_set("s", &[("soft_cap", 10)]);
    let r = c.promote("s", None);
    assert_eq!((field_int(&r, "promoted"), field_int(&r, "dropped")), (1, 2), "{r:?}");
    assert_eq!(field_str(&c.status("s", "y"), "status").as_deref(), Some("PROMOTED"));
    assert_eq!(waiting_now(&mut c, "s"), 0);
}

/// Every instance that registers a waiting user is listed in its registration, in the
/// order they registered, and vouches for it until its own lease ends: one letting go
/// (`QUEUE.UNWATCH`) leaves the others', so a person followed by two instances is not
/// dropped while one of them still follows them. An instance listed whose lease has
/// ended goes when another registers the user.
fn every_instance_that_registers_a_user_vouches_for_it(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("abandon_after", 1_000)]);
    for u in ["a", "b"] {
        c.enter("q", u, u);
    }
    watch(&mut c, "q", "pod-1", 500, &["a"]);
    watch(&mut c, "q", "pod-2", 100_000, &["a"]);
    watch(&mut c, "q", "pod-1", 500, &["a"]);
    assert_eq!(watched(&mut c, "q").get("a").map(String::as_str), Some("pod-1,pod-2"), "each once, in order");
    // pod-1's lease ended long ago; pod-2's still vouches for a (b is dropped).
    c.set_clock("q", T0 + 5_000);
    let r = c.promote("q", Some(0));
    assert_eq!(field_int(&r, "dropped"), 1, "{r:?}");
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("WAITING"));
    // pod-2 lets go: pod-1 stays listed; a counts as heard from now, and pod-1's
    // ended lease vouches no further.
    c.set_clock("q", T0 + 6_000);
    assert_eq!(unwatch(&mut c, "q", "pod-2", &["a"]), 1);
    assert_eq!(watched(&mut c, "q").get("a").map(String::as_str), Some("pod-1"));
    c.set_clock("q", T0 + 7_000);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 0, "heard from when pod-2 let go");
    // pod-3 registers a: pod-1, whose lease ended, goes from the list.
    watch(&mut c, "q", "pod-3", 100_000, &["a"]);
    assert_eq!(watched(&mut c, "q").get("a").map(String::as_str), Some("pod-3"));
    // pod-2 registers a again, then lets go: pod-3 still vouches.
    watch(&mut c, "q", "pod-2", 100_000, &["a"]);
    assert_eq!(watched(&mut c, "q").get("a").map(String::as_str), Some("pod-3,pod-2"));
    assert_eq!(unwatch(&mut c, "q", "pod-2", &["a"]), 1);
    c.set_clock("q", T0 + 50_000);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 0, "pod-3 vouches");
    // Once a does not wait (promoted), an instance naming it takes only itself out.
    watch(&mut c, "q", "pod-2", 100_000, &["a"]);
    c.config_set("q", &[("soft_cap", 1)]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 1);
    watch(&mut c, "q", "pod-2", 100_000, &["a"]);
    assert_eq!(watched(&mut c, "q").get("a").map(String::as_str), Some("pod-3"));
    c.leave("q", "a");
    assert!(watched(&mut c, "q").is_empty(), "giving the ticket back takes the whole registration");
}

/// QUEUE.UNWATCH takes back the instance's registrations (not another's) and counts
/// each person whose registration went as heard from at that moment, so the usual
/// abandon_after runs from when the page closed.
fn unwatch_counts_the_person_as_heard_from_now(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("abandon_after", 1_000)]);
    c.enter("q", "a", "a");
    c.enter("q", "b", "b");
    watch(&mut c, "q", "pod-1", 100_000, &["a"]);
    watch(&mut c, "q", "pod-2", 100_000, &["b"]);
    c.set_clock("q", T0 + 50_000);
    assert_eq!(unwatch(&mut c, "q", "pod-2", &["a"]), 0, "a is pod-1's");
    assert_eq!(watched(&mut c, "q").get("a").map(String::as_str), Some("pod-1"));
    assert_eq!(unwatch(&mut c, "q", "pod-1", &["a", "nobody"]), 1);
    assert_eq!(unwatch(&mut c, "q", "pod-1", &["a"]), 0, "already gone");
    assert!(!watched(&mut c, "q").contains_key("a"));
    // a is heard from at T0 + 50000 now, no longer vouched for by pod-1's lease.
    c.set_clock("q", T0 + 51_000);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 0);
    c.set_clock("q", T0 + 51_001);
    assert_eq!(field_int(&c.promote("q", Some(0)), "dropped"), 1);
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("UNKNOWN"));
    // b, still pod-2's, waits on.
    assert_eq!(field_str(&c.status("q", "b"), "status").as_deref(), Some("WAITING"));
}

/// Taking a user out of line removes its registration: leaving, being dropped,
/// claiming, a ticket expiring. A ticket holder is still in line (its registration
/// stays until then); one who enters again and waits keeps it, whatever the nickname;
/// WATCH does not register those who do not wait.
fn registrations_go_when_the_user_leaves_the_line(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("ticket_ttl", 1_000), ("abandon_after", 100_000)]);
    let users = ["a", "b", "c", "d", "e"];
    for u in users {
        c.enter("q", u, u);
    }
    watch(&mut c, "q", "pod", 600_000, &users);
    assert_eq!(watched(&mut c, "q").len(), 5);
    c.config_set("q", &[("soft_cap", 2)]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 2);
    let w = watched(&mut c, "q");
    assert!(w.contains_key("a") && w.contains_key("b"), "ticket holders are still in line: {w:?}");
    let ta = field_str(&c.status("q", "a"), "ticketId").unwrap();
    c.claim("q", &ta).unwrap();
    assert!(!watched(&mut c, "q").contains_key("a"), "claimed");
    assert_eq!(c.leave("q", "c"), 1);
    assert!(!watched(&mut c, "q").contains_key("c"), "left");
    c.enter("q", "d", "dee");
    assert_eq!(watched(&mut c, "q").get("d").map(String::as_str), Some("pod"), "re-entered, renamed");
    // Renamed: the log says they are still in the queue, not where (they are asked).
    let last = log_after(&mut c.con, "q", "-").pop().unwrap().1;
    let keys: Vec<&str> = last.iter().map(|(k, _)| k.as_str()).collect();
    assert_eq!(keys, ["n", "left", "again", "waiting"], "no `moved` for a renamed re-entry");
    c.set_clock("q", T0 + 1_000);
    c.promote("q", Some(0));
    assert!(!watched(&mut c, "q").contains_key("b"), "b's ticket expired");
    // Only d and e are still registered; WATCH of someone inside, holding a ticket or
    // unknown registers nobody.
    assert_eq!(watched(&mut c, "q").into_keys().collect::<Vec<_>>(), ["d", "e"]);
    let (_, _, each) = watch(&mut c, "q", "pod", 600_000, &["a", "nobody"]);
    assert_eq!(each.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![0, 0]);
    assert_eq!(field_str(&each[0].1, "status").as_deref(), Some("ACTIVE"));
    assert_eq!(field_str(&each[1].1, "status").as_deref(), Some("UNKNOWN"));
    assert_eq!(watched(&mut c, "q").len(), 2);
}

/// One entry per command that takes people out of the line's waiting part, with the
/// documented fields in order: LEAVE and re-entry name the old number in `left`
/// (re-entry in `again` too); PROMOTE's tickets and the silent dropped on the way are
/// `head`/`gone` (the tickets of the registered listed in `tickets`), the sweep's
/// drops `left`; a slot freed inside a command fills from the head; arrivals, claims,
/// expiries, settings and reads write none; `n` goes up by one.
fn the_change_log_tells_who_left_the_waiting_part(b: Backend) {
    let (s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("abandon_after", 1_000), ("ticket_ttl", 60_000)]);
    let mut log = LogReader::new(&s, "q");
    for u in ["u1", "u2", "u3", "u4", "u5", "u6"] {
        c.enter("q", u, u);
    }
    log.expect(&mut c, "arrivals", &[]);
    let num = numbers(&mut c, "q", &["u1", "u2", "u3", "u4", "u5", "u6"]);
    let n = |i: usize| num[i - 1].to_string();
    assert!(num.windows(2).all(|w| w[0] < w[1]), "numbers in entry order: {num:?}");
    assert_eq!(c.leave("q", "u2"), 1);
    log.expect(&mut c, "LEAVE", &[&[("n", "1".into()), ("left", n(2)), ("waiting", "5".into())]]);
    c.set_clock("q", T0 + 600);
    c.enter("q", "u3", "u3");
    // Entering again as they were: `moved` gives the new number and rank (u1 u4 u5 u6 u3).
    let u3 = numbers(&mut c, "q", &["u3"])[0];
    let moved = format!("{}:{u3}:5", n(3));
    let re_entry = [("n", "2".into()), ("left", n(3)), ("again", n(3)), ("moved", moved), ("waiting", "5".into())];
    log.expect(&mut c, "re-entry", &[&re_entry]);
    assert_eq!(c.leave("q", "nobody"), 0);
    c.status("q", "u4");
    c.enter("q", "u7", "u7");
    let (ln, _, _) = watch(&mut c, "q", "pod", 1, &[]);
    assert_eq!(ln, 2, "WATCH's checkpoint: the log's number");
    log.expect(&mut c, "a LEAVE of nobody, STATUS, an arrival, WATCH", &[]);
    let new = numbers(&mut c, "q", &["u3", "u7"]);
    assert!(new[0] > num[5] && new[1] > new[0], "after everyone: {new:?} {num:?}");
    // u1 and u4 promoted: the head; u4, registered by a push instance, has its
    // ticket listed.
    c.config_set("q", &[("soft_cap", 2)]);
    watch(&mut c, "q", "pod", 600_000, &["u4"]);
    log.expect(&mut c, "QUEUE.CONFIG, WATCH", &[]);
    assert_eq!(field_int(&c.promote("q", None), "promoted"), 2);
    let t4 = field_str(&c.status("q", "u4"), "ticketId").unwrap();
    assert!(t4.starts_with(&format!("{}.", n(4))), "{t4}");
    log.expect(
        &mut c,
        "PROMOTE",
        &[&[("n", "3".into()), ("head", n(4)), ("gone", "2".into()), ("tickets", t4), ("waiting", "4".into())]],
    );
    let t1 = field_str(&c.status("q", "u1"), "ticketId").unwrap();
    c.claim("q", &t1).unwrap();
    log.expect(&mut c, "a claim", &[]);
    // A ticket holder leaves: its slot goes to u5 inside LEAVE.
    assert_eq!(c.leave("q", "u4"), 1);
    log.expect(
        &mut c,
        "LEAVE of a holder",
        &[&[("n", "4".into()), ("head", n(5)), ("gone", "1".into()), ("waiting", "3".into())]],
    );
    // At T0 + 1200 u6 (heard from at T0) is silent: dropped on the way to u3.
    c.set_clock("q", T0 + 1_200);
    c.config_set("q", &[("soft_cap", 3)]);
    let r = c.promote("q", None);
    assert_eq!((field_int(&r, "promoted"), field_int(&r, "dropped")), (1, 1), "{r:?}");
    log.expect(
        &mut c,
        "PROMOTE dropping on the way",
        &[&[("n", "5".into()), ("head", new[0].to_string()), ("gone", "2".into()), ("waiting", "1".into())]],
    );
    // The sweep: u7 (heard from at T0 + 600) silent behind u8 who talks.
    c.enter("q", "u8", "u8");
    let u8n = numbers(&mut c, "q", &["u8"])[0];
    c.set_clock("q", T0 + 1_700);
    c.status("q", "u8");
    let r = c.promote("q", Some(0));
    assert_eq!(field_int(&r, "dropped"), 1, "{r:?}");
    log.expect(&mut c, "the sweep", &[&[("n", "6".into()), ("left", new[1].to_string()), ("waiting", "1".into())]]);
    // A session ending with someone waiting: the slot fills from the head.
    c.end("q", "u1");
    log.expect(
        &mut c,
        "SESSION.END",
        &[&[("n", "7".into()), ("head", u8n.to_string()), ("gone", "1".into()), ("waiting", "0".into())]],
    );
    // Tickets expiring write nothing; neither does a session ending with nobody waiting.
    c.set_clock("q", T0 + 100_000);
    let r = c.promote("q", None);
    assert!(field_int(&r, "tickets_expired") >= 1, "{r:?}");
    log.expect(&mut c, "expiries", &[]);
    assert_eq!(field_int(&c.info("q"), "waiting"), 0);
    let stats: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg("queue:{q}:stats").query(&mut c.con).unwrap();
    assert_eq!(stats.get("log").map(String::as_str), Some("7"), "the stats field log: the last number");
}

/// The opening places the pre-queue in line in an order no entry lists: one entry
/// with `reset`. WATCH registers people in the pre-queue (number 0: not in line yet).
fn the_opening_writes_a_reset_entry(b: Backend) {
    let (s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.config_set("q", &[("opens_at", T0 + 10_000)]);
    let mut log = LogReader::new(&s, "q");
    for u in ["p1", "p2", "p3"] {
        c.enter("q", u, u);
    }
    let (ln, _, each) = watch(&mut c, "q", "pod", 60_000, &["p1", "p2"]);
    assert_eq!(ln, 0);
    assert_eq!(each.iter().map(|(n, _)| *n).collect::<Vec<_>>(), vec![0, 0], "not in line before the opening");
    assert_eq!(field_str(&each[0].1, "status").as_deref(), Some("WAITING"));
    assert_eq!(watched(&mut c, "q").len(), 2, "people in the pre-queue are registered");
    assert_eq!(c.leave("q", "p3"), 1);
    log.expect(&mut c, "LEAVE from the pre-queue", &[]);
    c.set_clock("q", T0 + 10_000);
    // The first command at or after opens_at opens the queue: WATCH's checkpoint counts it.
    let (ln, waiting, each) = watch(&mut c, "q", "pod", 60_000, &["p1", "p2"]);
    assert_eq!((ln, waiting), (1, 2));
    assert!(each.iter().all(|(n, st)| *n > 0 && field_int(st, "rank") > 0), "{each:?}");
    log.expect(&mut c, "the opening", &[&[("n", "1".into()), ("reset", "1".into()), ("waiting", "2".into())]]);
    // After it, the usual entries.
    c.leave("q", "p1");
    let p1 = each[0].0.to_string();
    log.expect(&mut c, "LEAVE", &[&[("n", "2".into()), ("left", p1), ("waiting", "1".into())]]);
}

/// The log keeps about its last 10,000 entries (`MAXLEN ~`), numbered one after the
/// other, and the stats field `log` keeps counting.
fn the_change_log_keeps_about_ten_thousand_entries(b: Backend) {
    let (_s, mut c) = server(b);
    closed_queue(&mut c, "q");
    c.enter("q", "first", "f");
    c.enter("q", "u", "n");
    let first = numbers(&mut c, "q", &["first"])[0];
    // Each re-entry of a waiting user writes one entry.
    let entries = 10_500;
    for chunk in 0..entries / 500 {
        let mut pipe = redis::pipe();
        for _ in 0..500 {
            pipe.add_command(c.cmd("QUEUE.ENTER", &["q", "u", "n"])).ignore();
        }
        let _: () = pipe.query(&mut c.con).unwrap_or_else(|e| panic!("chunk {chunk}: {e}"));
    }
    let len: i64 = redis::cmd("XLEN").arg("queue:{q}:log").query(&mut c.con).unwrap();
    assert!((10_000..10_200).contains(&len), "about 10,000 entries kept: {len}");
    let all = log_after(&mut c.con, "q", "-");
    let ns: Vec<i64> = all.iter().map(|(_, f)| f.iter().find(|(k, _)| k == "n").unwrap().1.parse().unwrap()).collect();
    assert_eq!(*ns.last().unwrap(), entries as i64, "the last entry's number");
    assert!(ns.windows(2).all(|w| w[1] == w[0] + 1), "n goes up by one");
    // Each entry names u's old number, always after first's (u, re-entering, is
    // numbered after the last one in line: first).
    let lefts: Vec<i64> =
        all.iter().map(|(_, f)| f.iter().find(|(k, _)| k == "left").unwrap().1.parse().unwrap()).collect();
    assert!(lefts.iter().all(|&l| l > first), "{:?}", &lefts[..5]);
    for (_, f) in &all {
        let keys: Vec<&str> = f.iter().map(|(k, _)| k.as_str()).collect();
        assert_eq!(keys, vec!["n", "left", "again", "moved", "waiting"]);
        assert_eq!(f[2].1, f[1].1, "the one who left entered again");
        let moved: Vec<i64> = f[3].1.split(':').map(|x| x.parse().unwrap()).collect();
        // Numbered anew after first, the last one in line: here its old number again.
        assert!(moved.len() == 3 && moved[0].to_string() == f[1].1 && moved[1] > first && moved[2] == 2, "{f:?}");
        assert_eq!(f[4].1, "2");
    }
    let stats: std::collections::HashMap<String, String> =
        redis::cmd("HGETALL").arg("queue:{q}:stats").query(&mut c.con).unwrap();
    assert_eq!(stats.get("log").map(String::as_str), Some("10500"));
}

/// The log replicates with the ids the primary's entries got, and the registrations
/// and leases as written: a replica promoted after a failover continues the same log.
fn a_replica_holds_the_same_log_registrations_and_leases(b: Backend) {
    let primary = ValkeyServer::builder(b).test_clock().start();
    let replica = ValkeyServer::builder(b).test_clock().start_replica_of(&primary);
    let mut c = primary.client();
    c.set_clock("q", T0);
    closed_queue(&mut c, "q");
    for u in ["a", "b", "c", "d"] {
        c.enter("q", u, u);
    }
    watch(&mut c, "q", "pod", 30_000, &["b", "c", "d"]);
    c.leave("q", "a");
    c.enter("q", "b", "b");
    c.config_set("q", &[("soft_cap", 1)]);
    c.promote("q", None);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut c.con).unwrap();
    assert_eq!(acked, 1, "the replica has every write");
    let mut rc = replica.conn();
    let read = |con: &mut redis::Connection| {
        let log = log_after(con, "q", "-");
        let w: std::collections::BTreeMap<String, String> =
            redis::cmd("HGETALL").arg("queue:{q}:watched").query(con).unwrap();
        let i: Vec<(String, String)> =
            redis::cmd("ZRANGE").arg("queue:{q}:instances").arg(0).arg(-1).arg("WITHSCORES").query(con).unwrap();
        (log, w, i)
    };
    let on_primary = read(&mut c.con);
    assert_eq!(on_primary.0.len(), 3, "LEAVE, re-entry, PROMOTE: {:?}", on_primary.0);
    assert_eq!(read(&mut rc), on_primary);
}

/// Lanes, codes and claims replicate as their effects: after entries into lanes (one
/// with a code), a promotion that renumbers, a claim with a holder and its repeat, the
/// replica's data is the primary's, key by key.
fn a_replica_holds_the_same_lanes_codes_and_claims(b: Backend) {
    let primary = ValkeyServer::builder(b).test_clock().start();
    let replica = ValkeyServer::builder(b).test_clock().start_replica_of(&primary);
    let mut c = primary.client();
    c.set_clock("q", T0);
    let h = "9".repeat(64);
    c.call("QUEUE.CONFIG", &["q", "SET", "lanes", "presale,general", "soft_cap", "0"]).unwrap();
    c.call("QUEUE.CODES", &["q", "ADD", "presale", "2", &h]).unwrap();
    c.enter("q", "g", "g");
    c.call("QUEUE.ENTER", &["q", "p", "p", "CODE", &h]).unwrap();
    c.call("QUEUE.ENTER", &["q", "l", "l", "LANE", "presale"]).unwrap();
    c.config_set("q", &[("soft_cap", 2)]);
    c.promote("q", None);
    let t = field_str(&c.status("q", "p"), "ticketId").unwrap();
    c.call("TICKET.CLAIM", &["q", &t, "HOLDER", "tab"]).unwrap();
    c.call("TICKET.CLAIM", &["q", &t, "HOLDER", "tab"]).unwrap();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut c.con).unwrap();
    assert_eq!(acked, 1, "the replica has every write");
    let dump = |con: &mut redis::Connection| {
        let mut keys: Vec<String> = redis::cmd("KEYS").arg("queue:{q}:*").query(con).unwrap();
        keys.retain(|k| !k.ends_with(":clock"));
        keys.sort();
        let digests: Vec<Option<String>> = keys
            .iter()
            .map(|k| redis::cmd("DEBUG").arg("DIGEST-VALUE").arg(k).query::<Vec<String>>(con).ok().map(|v| v.concat()))
            .collect();
        (keys, digests)
    };
    let on_primary = dump(&mut c.con);
    assert!(on_primary.0.iter().any(|k| k.ends_with(":codes")) && on_primary.0.iter().any(|k| k.ends_with(":claimed")));
    assert!(on_primary.1.iter().all(Option::is_some), "every key has a digest: {on_primary:?}");
    assert_eq!(dump(&mut replica.conn()), on_primary);
}

/// The replication offset: what the primary has sent its replicas so far.
fn repl_offset(c: &mut Client) -> i64 {
    let info: String = redis::cmd("INFO").arg("replication").query(&mut c.con).unwrap();
    info.lines().find_map(|l| l.strip_prefix("master_repl_offset:")).and_then(|v| v.trim().parse().ok()).unwrap()
}

/// QUEUE.PASS: straight in (entered and claimed) while nobody waits and there is room;
/// otherwise nil, and nothing written, logged or replicated. The replica holds what the
/// primary holds.
fn pass_lets_in_while_there_is_room_and_else_changes_nothing(b: Backend) {
    let primary = ValkeyServer::builder(b).test_clock().start();
    let replica = ValkeyServer::builder(b).test_clock().start_replica_of(&primary);
    let mut c = primary.client();
    c.set_clock("q", T0);
    let mut log = LogReader::new(&primary, "q");
    c.config_set("q", &[("soft_cap", 2)]);
    let a = testkit::fields(&c.call("QUEUE.PASS", &["q", "a", "Ann", "HOLDER", "tab-a"]).unwrap());
    let ticket = a.get("ticketId").and_then(testkit::as_string).expect("a passes");
    assert_eq!(a.get("userId").and_then(testkit::as_string).as_deref(), Some("a"));
    assert_eq!(a.get("nickname").and_then(testkit::as_string).as_deref(), Some("Ann"));
    assert_eq!(a.get("leaseMs").and_then(as_int), Some(30_000));
    assert_eq!(field_str(&c.status("q", "a"), "status").as_deref(), Some("ACTIVE"));
    // The holder's claim of that ticket answers the same; anyone else's is NOTICKET.
    let again = c.call("TICKET.CLAIM", &["q", &ticket, "HOLDER", "tab-a"]).unwrap();
    assert_eq!(testkit::fields(&again), a);
    assert!(c.err("TICKET.CLAIM", &["q", &ticket]).starts_with("NOTICKET"));
    let info = c.info("q");
    assert_eq!(
        (
            field_int(&info, "active"),
            field_int(&info, "promoted"),
            field_int(&info, "claimed"),
            field_int(&info, "waiting")
        ),
        (1, 1, 1, 0)
    );
    log.expect(&mut c, "a pass (an instant entry and a claim)", &[]);
    assert!(c.call("QUEUE.PASS", &["q", "b", "Bo"]).is_ok_and(|v| v != redis::Value::Nil));
    // Full now, inside already, waiting, closed: nil, and nothing changes.
    let refusals = |c: &mut Client| {
        let before = (dump_queue(c, "q"), repl_offset(c));
        for u in ["c", "a", "b"] {
            assert_eq!(c.call("QUEUE.PASS", &["q", u, "n"]).unwrap(), redis::Value::Nil, "{u}");
        }
        assert_eq!((dump_queue(c, "q"), repl_offset(c)), before, "a nil pass writes and replicates nothing");
    };
    refusals(&mut c);
    c.config_set("q", &[("soft_cap", 0)]);
    c.enter("q", "w", "w");
    c.config_set("q", &[("soft_cap", 5)]);
    refusals(&mut c);
    let before = dump_queue(&mut c, "q");
    assert_eq!(c.call("QUEUE.PASS", &["q", "x", "n"]).unwrap(), redis::Value::Nil, "w waits: nobody jumps it");
    assert_eq!(dump_queue(&mut c, "q"), before);
    log.expect(&mut c, "refused passes", &[]);
    // A queue that asks for proof of work lets nobody straight past it.
    c.config_set("p", &[("soft_cap", 5), ("pow_difficulty", 1)]);
    let before_p = dump_queue(&mut c, "p");
    assert_eq!(c.call("QUEUE.PASS", &["p", "y", "n"]).unwrap(), redis::Value::Nil, "proof of work asked");
    assert_eq!(dump_queue(&mut c, "p"), before_p);
    c.config_set("p", &[("pow_difficulty", 0)]);
    assert!(c.call("QUEUE.PASS", &["p", "y", "n"]).is_ok_and(|v| v != redis::Value::Nil), "none asked");
    // Bad arguments: refused before anything is read.
    for (args, want) in [
        (vec!["q", "u"], "ERR wrong number of arguments for 'queue.pass' command"),
        (vec!["q", "u", "n", "HOLDER"], "ERR wrong number of arguments for 'queue.pass' command"),
        (vec!["q", "u b", "n"], "ERR invalid userId: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
        (vec!["q", "u", "a\nb"], "ERR invalid nickname: 1 to 32 bytes, no control characters"),
        (vec!["q", "u", "n", "OWNER", "h"], "ERR syntax error"),
        (vec!["q", "u", "n", "HOLDER", "h h"], "ERR invalid holder: 1 to 64 characters from A-Z a-z 0-9 . _ : @ -"),
    ] {
        assert_eq!(c.err("QUEUE.PASS", &args), want, "{args:?}");
    }
    assert_eq!(dump_queue(&mut c, "q"), before);
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(5_000).query(&mut c.con).unwrap();
    assert_eq!(acked, 1);
    let mut rc = replica.client();
    assert_eq!(dump_queue(&mut rc, "q"), dump_queue(&mut c, "q"), "the replica holds the passes");
}

/// QUEUE.SOLD Q 0 USER u is refused (it would mark u as having bought without
/// lowering the inventory: one more admission per call); the counter `sold` stops at
/// 2^53 - 1, never wrapping or refusing a sale.
fn a_sale_reported_for_a_user_needs_a_unit_and_sold_saturates(b: Backend) {
    let (_s, mut c) = server(b);
    c.config_set("q", &[("soft_cap", 5)]);
    c.call("QUEUE.CONFIG", &["q", "SET", "inventory", "1"]).unwrap();
    let t = field_str(&c.enter("q", "a", "n"), "ticketId").unwrap();
    c.claim("q", &t).unwrap();
    let before = dump_queue(&mut c, "q");
    assert_eq!(c.err("QUEUE.SOLD", &["q", "0", "USER", "a"]), "ERR n must be an integer from 1 to 1000000000000");
    assert_eq!(dump_queue(&mut c, "q"), before, "refused: nothing written");
    // Still one unit, held by a: nobody else gets in.
    assert_eq!(field_str(&c.enter("q", "b", "n"), "status").as_deref(), Some("WAITING"));
    let max = (1i64 << 53) - 1;
    let sold =
        |c: &mut Client| -> String { redis::cmd("HGET").arg("queue:{q}:stats").arg("sold").query(&mut c.con).unwrap() };
    for (start, want) in [(max - 5, max), (max, max), (i64::MAX, i64::MAX)] {
        let _: i64 = redis::cmd("HSET").arg("queue:{q}:stats").arg("sold").arg(start).query(&mut c.con).unwrap();
        c.call("QUEUE.SOLD", &["q", "1000000000000"]).unwrap();
        assert_eq!(sold(&mut c), want.to_string(), "from {start}");
    }
}

/// QUEUE.WATCH removes the instances whose lease ended more than a day ago (the
/// longest abandon_after); a live one, and one ended less long ago, stay.
fn watch_removes_instances_gone_for_a_day(b: Backend) {
    let (_s, mut c) = server(b);
    let day = 86_400_000;
    watch(&mut c, "q", "gone", 1_000, &[]);
    c.set_clock("q", T0 + 10_000);
    watch(&mut c, "q", "recent", 1_000, &[]);
    let leases = |c: &mut Client| -> Vec<(String, i64)> {
        redis::cmd("ZRANGE").arg("queue:{q}:instances").arg(0).arg(-1).arg("WITHSCORES").query(&mut c.con).unwrap()
    };
    // A day after "gone" ended: kept; a millisecond later, removed by another's WATCH.
    c.set_clock("q", T0 + 1_000 + day);
    watch(&mut c, "q", "live", 600_000, &[]);
    assert_eq!(leases(&mut c).len(), 3);
    c.set_clock("q", T0 + 1_001 + day);
    watch(&mut c, "q", "live", 600_000, &[]);
    let names: Vec<String> = leases(&mut c).into_iter().map(|(i, _)| i).collect();
    assert_eq!(names, ["recent", "live"]);
}
