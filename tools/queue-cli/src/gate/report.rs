//! What the users saw at a gate, as counts, and as the report's lines.

use serde::Serialize;

/// What the users saw at the gate. `passed_unadmitted`, `wrong_user`, `app_unverified`
/// and `access_after_leave` must be 0.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "snake_case")]
pub struct GateReport {
    /// Unadmitted requests for the gated path sent to the waiting room.
    pub sent_to_room: u64,
    /// Unadmitted requests for the gated path that got through (2xx).
    pub passed_unadmitted: u64,
    /// Unadmitted requests let straight in (the gate's straight pass on an idle queue:
    /// the admission cookie set and the app told whom it served).
    pub straight_through: u64,
    /// Tickets claimed at /gate/claim (cookie set, sent back to the gated path).
    pub claims: u64,
    /// Users who claimed their ticket twice at once.
    pub claim_races: u64,
    /// Users who sent their token as a bearer token.
    pub bearer_users: u64,
    /// Requests to the gated path while admitted, and how many the app answered.
    pub app_requests: u64,
    pub app_answered: u64,
    /// The app saw another user than the one admitted.
    pub wrong_user: u64,
    /// The app answered without telling whom it served (no X-Queue-User, no token).
    pub app_unverified: u64,
    /// Admission cookies renewed by the gate (a new Set-Cookie while inside).
    pub cookies_renewed: u64,
    /// Users who left at /gate/leave, and who went idle.
    pub left: u64,
    pub idle: u64,
    /// After leaving, the old cookie was refused (sent to the room) or still let in.
    pub refused_after_leave: u64,
    pub access_after_leave: u64,
    /// After leaving, the old cookie was dead and the idle queue let the person
    /// straight in again as someone new (left at once).
    pub passed_again_after_leave: u64,
}

impl GateReport {
    pub fn clean(&self) -> bool {
        self.passed_unadmitted == 0 && self.wrong_user == 0 && self.app_unverified == 0 && self.access_after_leave == 0
    }
}

impl std::fmt::Display for GateReport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mark = |n: u64| if n == 0 { "ok" } else { "FAIL" };
        writeln!(
            f,
            "  gate: sent to room    {} ({} straight through, {} got through unadmitted [{}])",
            self.sent_to_room,
            self.straight_through,
            self.passed_unadmitted,
            mark(self.passed_unadmitted)
        )?;
        writeln!(
            f,
            "  gate: claims          {} ({} raced, {} with a bearer token)",
            self.claims, self.claim_races, self.bearer_users
        )?;
        writeln!(
            f,
            "  gate: app requests    {} sent, {} answered, {} renewed cookies",
            self.app_requests, self.app_answered, self.cookies_renewed
        )?;
        writeln!(
            f,
            "  gate: wrong user      {} [{}] ({} answers unverified [{}])",
            self.wrong_user,
            mark(self.wrong_user),
            self.app_unverified,
            mark(self.app_unverified)
        )?;
        writeln!(
            f,
            "  gate: after leaving   {} let in [{}], {} refused, {} let straight in anew ({} left, {} went idle)",
            self.access_after_leave,
            mark(self.access_after_leave),
            self.refused_after_leave,
            self.passed_again_after_leave,
            self.left,
            self.idle
        )
    }
}
