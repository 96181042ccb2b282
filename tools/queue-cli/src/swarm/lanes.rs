//! The audits of lanes, access codes and accounts, kept in the ledger:
//!
//! - **Which lane.** A person entering with a good code waits in the code's lane, anyone
//!   else in the queue's last lane: a standing naming another lane is a wrong lane.
//! - **Codes.** Every entry with a code is tallied per code: accepted, refused (it must be
//!   the documented 403 `code_invalid`), or unanswered. At the end, no code may have let in
//!   more people than its uses, and one that still had uses left must not have refused
//!   anyone: accepted = min(tried, uses) whenever every try was answered. With an admin
//!   token, the uses the server counts as consumed during the run must equal the entries
//!   the swarm saw accepted.
//! - **One place per account.** A second tab (the same login token) must get the first
//!   tab's place: the same userId, still there, in the same lane, not moved back.
//!
//! The lane-order audit itself (nobody in a later lane promoted while someone who surely
//! entered an earlier lane before that still waits) is picked in [`Ledger::promoted`]
//! and asked in the journey.

use super::ledger::Ledger;
use super::report::LaneReport;
use queue_client::{Standing, Status};

/// One access code's entries.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct CodeTally {
    /// Its uses as uploaded (0: a code never uploaded).
    pub(super) uses: u64,
    pub(super) accepted: u64,
    /// Refused with 403 `code_invalid`.
    pub(super) refused: u64,
    /// Entries with no answer (or another refusal): whether a use went is unknown.
    pub(super) unanswered: u64,
}

/// What an entry with a code got.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum CodeAnswer {
    Accepted,
    /// Refused: the status and the body's `error: message` text.
    Refused(u16, String),
    /// No answer (transport error, 5xx, deadline).
    Unanswered,
}

impl Ledger {
    fn lane_report(&mut self) -> &mut LaneReport {
        self.report.lanes.get_or_insert_default()
    }

    /// The index of lane `name` in the queue's order.
    pub(super) fn lane_index(&self, name: &str) -> Option<usize> {
        self.lanes.iter().position(|l| l == name)
    }

    /// Codes uploaded for the run, each with `uses`.
    pub(super) fn codes_uploaded(&mut self, codes: &[String], uses: u64) {
        for c in codes {
            self.codes.entry(c.clone()).or_default().uses = uses;
        }
        let r = self.lane_report();
        r.codes += codes.len() as u64;
        r.code_uses = uses;
    }

    /// `who` sent an entry with `code` and got `answer`.
    pub(super) fn code_answer(&mut self, who: usize, code: &str, answer: CodeAnswer) {
        let tally = self.codes.entry(code.to_string()).or_default();
        match &answer {
            CodeAnswer::Accepted => tally.accepted += 1,
            CodeAnswer::Refused(403, text) if text.starts_with("code_invalid") => tally.refused += 1,
            CodeAnswer::Refused(..) | CodeAnswer::Unanswered => tally.unanswered += 1,
        }
        let r = self.lane_report();
        r.code_entries += 1;
        match answer {
            CodeAnswer::Accepted => r.code_accepted += 1,
            CodeAnswer::Refused(403, text) if text.starts_with("code_invalid") => r.code_refused += 1,
            CodeAnswer::Refused(status, text) => {
                r.code_bad_refusals += 1;
                self.error(who, format_args!("a code refused with HTTP {status} {text}, not 403 code_invalid"));
            }
            CodeAnswer::Unanswered => {}
        }
    }

    /// The lane `who` entered, as its entry's answer names it (`given`), checked against
    /// the one it should have: the first lane with a good code (`with_code`), else the
    /// last. Returns the lane to audit by (the expected one when the answer names none:
    /// admitted at once).
    pub(super) fn entered_lane(&mut self, who: usize, given: Option<&str>, with_code: bool) -> Option<usize> {
        if self.lanes.is_empty() {
            return None;
        }
        let expected = if with_code { 0 } else { self.lanes.len() - 1 };
        let Some(name) = given else { return Some(expected) };
        let got = self.lane_index(name);
        if got != Some(expected) {
            let want = self.lanes[expected].clone();
            self.lane_report().wrong_lanes += 1;
            self.error(who, format_args!("entered lane {name:?}, expected {want:?}"));
        }
        got.or(Some(expected))
    }

    /// `who`'s second tab (the same login) entered and got `second`; the first tab had
    /// `first` (its entry's answer).
    pub(super) fn second_tab(&mut self, who: usize, first: &Standing, second: &Standing) {
        self.lane_report().second_tabs += 1;
        let first_lane_or_none = first.lane.as_deref().is_none_or(|l| self.lane_index(l) == Some(0));
        let wrong = if second.user_id != first.user_id {
            Some(format!("a second place: the second tab got {}, the first {}", second.user_id, first.user_id))
        } else if second.status == Status::Unknown {
            Some("the second tab found no place".to_string())
        } else if first.status == Status::Waiting && second.status == Status::Waiting && second.lane != first.lane {
            Some(format!("the second tab waits in lane {:?}, the first in {:?}", second.lane, first.lane))
        } else if first.status == Status::Waiting
            && second.status == Status::Waiting
            && first_lane_or_none
            && second.rank > first.rank
        {
            // Nobody enters ahead of the first lane: a higher rank is a move to the back.
            Some(format!("the second tab moved the place back from rank {} to {}", first.rank, second.rank))
        } else if first.status != Status::Waiting && second.status == Status::Waiting {
            Some(format!("the second tab is WAITING, the first was {}", first.status.as_str()))
        } else {
            None
        };
        if let Some(e) = wrong {
            self.lane_report().two_places += 1;
            self.error(who, e);
        }
    }

    /// `who` asked `user`, in an earlier lane, after its own promotion: still waiting
    /// (`rank` given) means the lanes were jumped.
    pub(super) fn lane_audited(&mut self, who: usize, user: &str, still_waiting_at: Option<u64>) {
        self.lane_report().lane_audits += 1;
        if let Some(rank) = still_waiting_at {
            self.lane_report().lane_inversions += 1;
            self.error(
                who,
                format_args!("promoted from a later lane while {user}, in an earlier lane since before, still waits at rank {rank}"),
            );
        }
    }

    /// At the end of the run: every code against its uses (see the module docs), and
    /// the uses the server counted during the run (`server_used`, when read) against the
    /// entries seen accepted.
    pub(super) fn judge_codes(&mut self, server_used: Option<u64>) {
        let mut found = Vec::new();
        let (mut overuses, mut wrongly_refused, mut expected_refusals) = (0, 0, 0);
        for (code, t) in &self.codes {
            let tried = t.accepted + t.refused;
            expected_refusals += tried.saturating_sub(t.uses);
            if t.accepted > t.uses {
                overuses += t.accepted - t.uses;
                found.push(format!("code {code} let in {} people, it has {} uses", t.accepted, t.uses));
            } else if t.unanswered == 0 && t.accepted < tried.min(t.uses) {
                wrongly_refused += tried.min(t.uses) - t.accepted;
                found.push(format!(
                    "code {code} refused {} entries with uses left ({} of {} used)",
                    t.refused, t.accepted, t.uses
                ));
            }
        }
        let accepted: u64 = self.codes.values().map(|t| t.accepted).sum();
        let unanswered: u64 = self.codes.values().map(|t| t.unanswered).sum();
        let r = self.lane_report();
        r.code_overuses += overuses;
        r.code_wrongly_refused += wrongly_refused;
        r.code_refusals_expected = expected_refusals;
        r.server_codes_used = server_used;
        // An entry without an answer may or may not have consumed a use.
        if let Some(used) = server_used.filter(|&u| u < accepted || u > accepted + unanswered) {
            r.codes_miscounted += 1;
            found.push(format!("the server counts {used} uses consumed in the run, the swarm saw {accepted} accepted"));
        }
        for e in found {
            self.run_error(e);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::swarm::ledger::{Person, Phase};
    use std::time::{Duration, Instant};

    fn ledger(lanes: &[&str]) -> Ledger {
        Ledger { lanes: lanes.iter().map(|l| l.to_string()).collect(), ..Ledger::default() }
    }

    /// A steadfast person waiting in `lane`, entry sent at `sent` and answered at `recv`.
    fn person(l: &mut Ledger, user: &str, lane: Option<usize>, sent: Instant, recv: Instant) {
        l.people.push(Person {
            phase: Phase::Waiting,
            entry_sent: sent,
            entry_recv: Some(recv),
            steadfast: true,
            user_id: user.into(),
            forwarded_for: None,
            eta_at_entry: None,
            eta_at_rank10: None,
            generation: 0,
            last_waiting: None,
            lane,
            token: Some(format!("token-of-{user}")),
            surely_waiting_at: Some(sent),
        });
    }

    fn standing(user: &str, status: Status, rank: u64, lane: Option<&str>) -> Standing {
        Standing {
            status,
            rank,
            user_id: user.into(),
            nickname: None,
            ticket_id: None,
            estimated_wait_seconds: None,
            opens_at: None,
            lane: lane.map(str::to_string),
        }
    }

    fn asked(audits: &[crate::swarm::ledger::Audit]) -> Vec<(String, bool)> {
        audits.iter().map(|a| (a.user.clone(), a.earlier_lane)).collect()
    }

    #[test]
    fn a_later_lanes_promotion_asks_the_earliest_waiter_surely_in_an_earlier_lane_before_it() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut l = ledger(&["presale", "general"]);
        person(&mut l, "g1", Some(1), ms(0), ms(5));
        person(&mut l, "g2", Some(1), ms(10), ms(15));
        person(&mut l, "p1", Some(0), ms(20), ms(25)); // presale, entered after g2
        person(&mut l, "p2", Some(0), ms(200), ms(205)); // entered after g2's last sure WAITING
                                                         // g2 was surely still waiting at 100 ms (a poll asked after then said so).
        l.people[1].surely_waiting_at = Some(ms(100));
        let audits = l.promoted(1, ms(300));
        // Within the lane: g1 entered before g2's entry left. Across lanes: p1, not p2.
        assert_eq!(asked(&audits), vec![("g1".into(), false), ("p1".into(), true)]);
        assert_eq!(audits[1].token.as_deref(), Some("token-of-p1"), "asked with the account's token");
        // The answers: p1 still waits, so the lanes were jumped.
        l.lane_audited(1, "p1", Some(1));
        let r = l.report.lanes.clone().unwrap();
        assert_eq!((r.lane_audits, r.lane_inversions, r.violations()), (1, 1, 1));
        assert!(!l.report.clean());
        assert!(l.report.first_errors[0].contains("in an earlier lane since before, still waits"));
    }

    #[test]
    fn an_earlier_lanes_promotion_is_no_inversion_and_fifo_holds_within_each_lane() {
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        let mut l = ledger(&["presale", "general"]);
        person(&mut l, "g1", Some(1), ms(0), ms(5));
        person(&mut l, "p1", Some(0), ms(10), ms(15));
        person(&mut l, "p2", Some(0), ms(20), ms(25));
        // p2 promoted: g1 (a later lane) waiting is fine; p1 (same lane, earlier) is asked.
        assert_eq!(asked(&l.promoted(2, ms(50))), vec![("p1".into(), false)]);
        // p1 promoted: nobody of its lane or an earlier one waits.
        assert_eq!(l.promoted(1, ms(60)), vec![]);
        // A queue without lanes: everyone earlier is asked, none as a lane audit.
        let mut l = ledger(&[]);
        person(&mut l, "a", None, ms(0), ms(5));
        person(&mut l, "b", None, ms(10), ms(15));
        assert_eq!(asked(&l.promoted(1, ms(50))), vec![("a".into(), false)]);
        l.lane_audited(1, "a", None);
        assert_eq!(l.report.lanes.unwrap().lane_inversions, 0);
    }

    #[test]
    fn a_code_used_beyond_its_uses_or_refused_with_uses_left_or_wrongly_is_found() {
        let mut l = ledger(&["presale", "general"]);
        let codes: Vec<String> = ["A", "B", "C", "D"].iter().map(|c| c.to_string()).collect();
        l.codes_uploaded(&codes, 2);
        let refused = || CodeAnswer::Refused(403, "code_invalid: no such code".into());
        // A: three tries, two let in, one refused: as it should be.
        for a in [CodeAnswer::Accepted, CodeAnswer::Accepted, refused()] {
            l.code_answer(0, "A", a);
        }
        l.judge_codes(Some(2));
        assert_eq!(l.report.lanes.as_ref().unwrap().violations(), 0, "{:?}", l.report.first_errors);
        assert_eq!(l.report.lanes.as_ref().unwrap().code_refusals_expected, 1);
        // B let in three people on two uses; C refused someone with uses left; D refused
        // with another answer than 403 code_invalid; an unknown code let someone in.
        let mut l = ledger(&["presale", "general"]);
        l.codes_uploaded(&codes, 2);
        for _ in 0..3 {
            l.code_answer(1, "B", CodeAnswer::Accepted);
        }
        l.code_answer(2, "C", CodeAnswer::Accepted);
        l.code_answer(2, "C", refused());
        l.code_answer(3, "D", CodeAnswer::Refused(400, "bad_request: nope".into()));
        l.code_answer(4, "X-never", CodeAnswer::Accepted);
        l.judge_codes(Some(7));
        let r = l.report.lanes.clone().unwrap();
        assert_eq!(
            (r.code_overuses, r.code_wrongly_refused, r.code_bad_refusals),
            (2, 1, 1),
            "{:?}",
            l.report.first_errors
        );
        assert_eq!(r.codes_miscounted, 1, "the server counts 7 uses, the swarm saw 5 let in and 1 unanswered");
        assert!(!l.report.clean());
        let text = l.report.to_string();
        assert!(text.contains("codes used over uses  2 [FAIL]"), "{text}");
    }

    #[test]
    fn an_unanswered_entry_leaves_the_count_open() {
        let mut l = ledger(&["presale", "general"]);
        l.codes_uploaded(&["A".to_string()], 1);
        l.code_answer(0, "A", CodeAnswer::Unanswered);
        l.code_answer(1, "A", CodeAnswer::Refused(403, "code_invalid: x".into()));
        for used in [0, 1] {
            l.judge_codes(Some(used));
            assert_eq!(l.report.lanes.as_ref().unwrap().violations(), 0, "{used}: {:?}", l.report.first_errors);
        }
    }

    #[test]
    fn a_second_tab_must_find_the_first_tabs_place() {
        let mut l = ledger(&["presale", "general"]);
        let first = standing("id:a", Status::Waiting, 4, Some("presale"));
        l.second_tab(0, &first, &standing("id:a", Status::Waiting, 3, Some("presale")));
        l.second_tab(0, &first, &standing("id:a", Status::Promoted, 0, None));
        let general = standing("id:b", Status::Waiting, 4, Some("general"));
        l.second_tab(1, &general, &standing("id:b", Status::Waiting, 9, Some("general")));
        assert_eq!(l.report.lanes.as_ref().unwrap().two_places, 0, "{:?}", l.report.first_errors);
        for second in [
            standing("id:other", Status::Waiting, 4, Some("presale")), // a second place
            standing("id:a", Status::Waiting, 90, Some("presale")),    // moved to the back
            standing("id:a", Status::Waiting, 2, Some("general")),     // another lane
            standing("id:a", Status::Unknown, 0, None),                // lost
        ] {
            l.second_tab(0, &first, &second);
        }
        let promoted = standing("id:a", Status::Promoted, 0, None);
        l.second_tab(0, &promoted, &standing("id:a", Status::Waiting, 1, Some("presale")));
        let r = l.report.lanes.clone().unwrap();
        assert_eq!((r.second_tabs, r.two_places), (8, 5), "{:?}", l.report.first_errors);
        assert!(!l.report.clean());
    }

    #[test]
    fn an_entry_in_another_lane_than_its_code_gives_is_a_wrong_lane() {
        let mut l = ledger(&["presale", "general"]);
        assert_eq!(l.entered_lane(0, Some("presale"), true), Some(0));
        assert_eq!(l.entered_lane(1, Some("general"), false), Some(1));
        assert_eq!(l.entered_lane(2, None, true), Some(0), "admitted at once: the lane it should have");
        assert_eq!(l.report.lanes.as_ref().map_or(0, |r| r.wrong_lanes), 0);
        assert_eq!(l.entered_lane(3, Some("presale"), false), Some(0), "no code, yet presale");
        assert_eq!(l.entered_lane(4, Some("vip"), false), Some(1));
        assert_eq!(l.report.lanes.unwrap().wrong_lanes, 2);
        assert_eq!(ledger(&[]).entered_lane(0, None, false), None);
    }
}
