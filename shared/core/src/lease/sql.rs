//! The lease rules as SQL pieces, built from a [`Queue`] descriptor: each queue's statements are
//! assembled from these once (a `LazyLock` or `OnceLock` at first use), so a rule is written here
//! and nowhere else. Every piece takes the table alias its statement uses (`""` for none) and the
//! placeholders (`"$2"`) of its parameters; none adds a round trip — a claim stays one statement.
//!
//! Invariants (see the module docs of [`crate::lease`]):
//! - every move out of `leased` clears the token (and the lease column): [`Queue::release_set`] is
//!   part of every such SET clause built here, so [`Queue::fence`] (the token alone) is the fence;
//! - the ceiling test is [`Queue::exhausted`]; a buried row gets [`Queue::bury_set`]'s values;
//! - the lease's end is `available_at` (the one due clock), mirrored in the lease column if any;
//! - a claim picks its rows with [`Queue::fair_pick`]: by priority, then interleaved across the
//!   workspaces that have due rows (each workspace's rows take turns, weighted), then oldest first —
//!   work-conserving (a claim is filled whenever enough rows are due) and one statement.

use super::{Expiry, Queue, ATTEMPTS_EXHAUSTED, LEASE_EXPIRED};

/// One `column = value` of a SET clause.
type Assignment = (&'static str, String);

/// `alias.column`, or `column` when `alias` is empty.
fn col(alias: &str, column: &str) -> String {
    if alias.is_empty() {
        column.to_owned()
    } else {
        format!("{alias}.{column}")
    }
}

fn quoted(name: &str) -> String {
    format!("'{name}'")
}

/// `now() + <lease_ms> ms`.
pub fn after_ms(lease_ms: &str) -> String {
    format!("now() + {lease_ms}::float8 * interval '1 millisecond'")
}

/// The ceiling rule on any counter: `counter` (an attempt or restart count) reached `ceiling`.
pub fn reached(counter: &str, ceiling: &str) -> String {
    format!("{counter} >= {ceiling}")
}

/// `a = x, b = y, updated_at = now()`.
fn render(assignments: &[Assignment]) -> String {
    let mut parts: Vec<String> =
        assignments.iter().map(|(column, value)| format!("{column} = {value}")).collect();
    parts.push("updated_at = now()".into());
    parts.join(", ")
}

/// Per column, `CASE WHEN <condition> THEN <then's value> ELSE <otherwise's value> END` (a column
/// one side does not set keeps its value there).
fn choose(alias: &str, condition: &str, then: &[Assignment], otherwise: &[Assignment]) -> Vec<Assignment> {
    let mut columns: Vec<&'static str> = Vec::new();
    for (column, _) in then.iter().chain(otherwise) {
        if !columns.contains(column) {
            columns.push(column);
        }
    }
    let value = |side: &[Assignment], column: &str| {
        side.iter().find(|(c, _)| *c == column).map_or_else(|| col(alias, column), |(_, v)| v.clone())
    };
    columns
        .into_iter()
        .map(|column| {
            let (yes, no) = (value(then, column), value(otherwise, column));
            // Both sides alike (a token cleared either way): no CASE, whose NULLs would type as text.
            if yes == no {
                return (column, yes);
            }
            (column, format!("CASE WHEN {condition} THEN {yes} ELSE {no} END"))
        })
        .collect()
}

/// How a claim orders the due rows it may take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ClaimOrder {
    /// [`Queue::fair_pick`]: by priority, in turns across workspaces, then oldest first.
    #[default]
    Fair,
    /// Oldest `available_at` first, whoever's and whatever kind: the claim before issue 41, kept
    /// only as the comparison `clinic bench fairness` measures the fair pick against.
    OldestFirst,
}

/// The workspace's share of each claim (`workspaces.delivery_weight`, 1 by default).
const WEIGHT: &str =
    "coalesce((SELECT w.delivery_weight FROM workspaces w WHERE w.id = p.workspace_id), 1)::float8";

/// How far behind the workspace furthest along a workspace may start (in turns): a clinic back
/// from idle goes first, but banks no more credit than this.
const CREDIT: &str = "1";

/// How many rows of the fair order a claim of `limit` looks at: per (workspace, priority), and in
/// all before it locks. Above `limit` so that rows locked by concurrent claims can be skipped.
fn window(limit: &str) -> String {
    format!("({limit}::bigint * 4 + 16)")
}

impl Queue {
    /// The fair pick (DESIGN §5d, issue 41): a `SELECT` of up to `limit` (a placeholder) rows of this
    /// queue's table (alias `t`), locked `FOR UPDATE SKIP LOCKED`, answering `t.<id> AS id`,
    /// `columns` (of `t`) and what [`Queue::charge`] needs (`fair_workspace`, `fair_start`,
    /// `fair_weight`).
    ///
    /// - `groups` is a `SELECT` answering `workspace_id` and `priority`, one row per pair that may
    ///   have due rows (a superset is fine: a pair with none adds nothing);
    /// - `firsts` is a `SELECT` answering `id` and `available_at` of one pair's due rows (it refers
    ///   to the pair as `g.workspace_id` and `g.priority`); the pick appends `ORDER BY available_at,
    ///   id LIMIT <window>`, so with an index on `(workspace_id, priority, available_at, id)` each
    ///   pair costs one short index range scan;
    /// - `recheck` is the due condition again, on `t`: a row another claim took (and committed)
    ///   after this statement's snapshot is re-read when it is locked, and only a condition on `t`
    ///   itself is re-checked then — without it, the row would be claimed twice.
    ///
    /// Order: `priority` first (a cancellation before any clinic's reminders); within a priority,
    /// by turns across workspaces (weighted fair queueing): a workspace's rows, oldest first, are
    /// ranked from its start `1 / weight` apart, and its start is where its last claims left it
    /// (`fair_turns.vtime`, moved on by [`Queue::charge`]) but at most [`CREDIT`] turn behind the
    /// workspace furthest along, so turns hold across claims however small (a claim of one row
    /// goes to the workspace served least) and a clinic back from idle banks no credit. Ties go to
    /// the oldest. A lone workspace fills the whole claim (work-conserving).
    ///
    /// Cost: only the first `4 × limit + 16` due rows of each (workspace, priority) are ranked (the
    /// claim's first `limit` rows of the whole order lie among them: a pair's rows are taken in
    /// their own order), so a claim's cost grows with the pairs that have due work, not with the
    /// due rows; the same window of the ranked order is joined back to the table and locked, a
    /// short index join whatever the table's statistics say. Rows taken by concurrent claims are
    /// skipped within that window; a claim may come back short when many senders claim at once,
    /// never with a row twice.
    pub fn fair_pick(&self, groups: &str, firsts: &str, recheck: &str, columns: &str, limit: &str) -> String {
        let columns = if columns.is_empty() { String::new() } else { format!(", {columns}") };
        let window = window(limit);
        format!(
            "SELECT t.{id} AS id, f.workspace_id AS fair_workspace, f.start AS fair_start, \
               f.weight AS fair_weight{columns} FROM ( \
               SELECT r.* FROM ( \
                 SELECT c.id, g.workspace_id, g.priority, c.available_at, g.start, g.weight, \
                   g.start + (row_number() OVER (PARTITION BY g.workspace_id, g.priority \
                                                 ORDER BY c.available_at, c.id) - 1) / g.weight AS turn \
                 FROM ( \
                   SELECT a.workspace_id, a.priority, a.weight, \
                     coalesce(greatest(a.vtime, max(a.vtime) OVER () - {CREDIT}), 0) AS start \
                   FROM (SELECT p.workspace_id, p.priority, {WEIGHT} AS weight, v.vtime \
                         FROM ({groups}) p \
                         LEFT JOIN fair_turns v ON v.queue = '{name}' AND v.workspace_id = p.workspace_id) a \
                 ) g \
                 CROSS JOIN LATERAL ({firsts} ORDER BY available_at, id LIMIT {window}) c) r \
               ORDER BY r.priority, r.turn, r.available_at, r.id LIMIT {window}) f \
             JOIN {table} t ON t.{id} = f.id \
             WHERE {recheck} \
             ORDER BY f.priority, f.turn, f.available_at, f.id LIMIT {limit} FOR UPDATE OF t SKIP LOCKED",
            id = self.id,
            table = self.table,
            name = self.name,
        )
    }

    /// A statement for a `WITH` of the claim that moves each claimed workspace's turn on by what
    /// the claim took from the fair pick named `picked` (`n / weight` from its start); concurrent
    /// claims add up (the later one adds its step to whatever the row holds by then), and lock the
    /// rows in one order (by workspace), so two claims never deadlock on them.
    pub fn charge(&self, picked: &str) -> String {
        format!(
            "INSERT INTO fair_turns AS v (queue, workspace_id, vtime, last_charge) \
             SELECT '{name}', fair_workspace, min(fair_start) + count(*) / min(fair_weight), \
                    count(*) / min(fair_weight) \
             FROM {picked} GROUP BY fair_workspace ORDER BY fair_workspace \
             ON CONFLICT (queue, workspace_id) DO UPDATE \
               SET vtime = greatest(v.vtime + EXCLUDED.last_charge, EXCLUDED.vtime), \
                   last_charge = EXCLUDED.last_charge",
            name = self.name,
        )
    }

    /// The distinct `(workspace_id, priority)` pairs of this queue's rows matching `indexed` (the
    /// predicate of a partial index on `(workspace_id, priority, …)`), found by a skip scan of that
    /// index — one index probe per pair, whatever the rows — as [`Queue::fair_pick`]'s `groups`.
    pub fn groups(&self, indexed: &str) -> String {
        format!(
            "WITH RECURSIVE p AS ( \
               (SELECT workspace_id, priority FROM {table} WHERE {indexed} \
                ORDER BY workspace_id, priority LIMIT 1) \
               UNION ALL \
               SELECT n.workspace_id, n.priority FROM p CROSS JOIN LATERAL ( \
                 SELECT workspace_id, priority FROM {table} \
                 WHERE {indexed} AND (workspace_id, priority) > (p.workspace_id, p.priority) \
                 ORDER BY workspace_id, priority LIMIT 1) n) \
             SELECT workspace_id, priority FROM p",
            table = self.table,
        )
    }

    /// The claim before issue 41, kept only as the comparison `clinic bench fairness` measures the
    /// fair pick against (and for a claim by key, where there is one row to take): the same
    /// `SELECT` as [`Queue::fair_pick`] over `candidates` (a `SELECT` of due rows answering `id` and
    /// `available_at`), ordered by `available_at` alone.
    pub fn oldest_first_pick(&self, candidates: &str, recheck: &str, columns: &str, limit: &str) -> String {
        let columns = if columns.is_empty() { String::new() } else { format!(", {columns}") };
        format!(
            "SELECT t.{id} AS id{columns} FROM {table} t JOIN ({candidates}) c ON c.id = t.{id} \
             WHERE {recheck} ORDER BY c.available_at, c.id LIMIT {limit} FOR UPDATE OF t SKIP LOCKED",
            id = self.id,
            table = self.table,
        )
    }

    /// The statuses whose rows the queue still owes an attempt and a claim may take once due.
    pub fn live(&self, alias: &str) -> String {
        let s = &self.stored;
        let mut names = vec![quoted(s.ready), quoted(s.retry)];
        // Holds stored apart (`deferred`) are due at their `available_at` like a retry.
        names.extend(
            s.others.iter().filter(|(_, state)| *state == super::State::Held).map(|(name, _)| quoted(name)),
        );
        if self.expiry == Expiry::Reclaim {
            names.push(quoted(s.leased));
        }
        format!("{} IN ({})", col(alias, "status"), names.join(", "))
    }

    /// Live and `available_at` has come (a lease end, for a leased row of a re-claiming queue).
    pub fn due(&self, alias: &str) -> String {
        format!("{} AND {} <= now()", self.live(alias), col(alias, "available_at"))
    }

    /// Leased with its lease ended.
    pub fn expired(&self, alias: &str) -> String {
        format!(
            "{} = {} AND {} <= now()",
            col(alias, "status"),
            quoted(self.stored.leased),
            col(alias, "available_at")
        )
    }

    /// The lease still runs (with [`Queue::fence`]: "still leased by this token").
    pub fn lease_running(&self, alias: &str) -> String {
        format!("{} > now()", col(alias, "available_at"))
    }

    /// The attempt ceiling (`ceiling`, a placeholder) is reached.
    pub fn exhausted(&self, alias: &str, ceiling: &str) -> String {
        reached(&col(alias, self.attempts), ceiling)
    }

    /// Still held by the claim whose token is `token` (a placeholder).
    pub fn fence(&self, alias: &str, token: &str) -> String {
        format!("{} = {token}", col(alias, self.token))
    }

    /// The held attempt given back (a hold: unavailable is not rejected).
    pub fn give_back(&self, alias: &str) -> String {
        format!("greatest({} - 1, 0)", col(alias, self.attempts))
    }

    fn release(&self) -> Vec<Assignment> {
        let mut set = vec![(self.token, "NULL".to_owned())];
        set.extend(self.lease_until.map(|column| (column, "NULL".to_owned())));
        set
    }

    fn claimed(&self, alias: &str, token: &str, lease_ms: &str, claimer: Option<&str>) -> Vec<Assignment> {
        let end = after_ms(lease_ms);
        let mut set = vec![
            ("status", quoted(self.stored.leased)),
            (self.token, token.to_owned()),
            (self.attempts, format!("{} + 1", col(alias, self.attempts))),
            ("available_at", end.clone()),
        ];
        set.extend(self.lease_until.map(|column| (column, end.clone())));
        if let (Some(column), Some(claimer)) = (self.claimer, claimer) {
            set.push((column, claimer.to_owned()));
        }
        set
    }

    fn buried(&self) -> Vec<Assignment> {
        let mut set = vec![("status", quoted(self.stored.dead))];
        set.extend(self.release());
        set.push((self.error_code, quoted(ATTEMPTS_EXHAUSTED)));
        set.extend(
            self.error_text
                .map(|column| (column, quoted("reclaimed after its lease with the attempt ceiling reached"))),
        );
        set
    }

    /// The SET clause that leaves `leased` without a new status (the marks add theirs): token and
    /// lease cleared, `updated_at`.
    pub fn release_set(&self) -> String {
        render(&self.release())
    }

    /// The claim's SET clause: `leased`, the token, the lease, `attempts + 1` (and the claimer).
    pub fn claim_set(&self, alias: &str, token: &str, lease_ms: &str, claimer: Option<&str>) -> String {
        render(&self.claimed(alias, token, lease_ms, claimer))
    }

    /// The claim's SET clause that buries instead of claiming a row at the ceiling (one statement:
    /// a re-claimed row whose last holder died on its last attempt is never claimed again).
    pub fn claim_or_bury_set(
        &self,
        alias: &str,
        ceiling: &str,
        token: &str,
        lease_ms: &str,
        claimer: Option<&str>,
    ) -> String {
        let condition = self.exhausted(alias, ceiling);
        render(&choose(alias, &condition, &self.buried(), &self.claimed(alias, token, lease_ms, claimer)))
    }

    /// The SET clause of a burial at the ceiling: `dead`, `attempts_exhausted`, token cleared.
    pub fn bury_set(&self) -> String {
        render(&self.buried())
    }

    /// The SET clause of lease expiry for a queue with `uncertain`: `uncertain` (`lease_expired`)
    /// below the ceiling, buried at it.
    pub fn expiry_set(&self, alias: &str, ceiling: &str) -> String {
        let uncertain = self.stored.uncertain.expect("expiry_set needs a queue with an uncertain state");
        let mut to_uncertain = vec![("status", quoted(uncertain))];
        to_uncertain.extend(self.release());
        to_uncertain.push((self.error_code, quoted(LEASE_EXPIRED)));
        let condition = self.exhausted(alias, ceiling);
        render(&choose(alias, &condition, &self.buried(), &to_uncertain))
    }

    /// The renewal's SET clause: the lease runs `lease_ms` from now (fence it with [`Queue::fence`]
    /// and [`Queue::lease_running`]).
    pub fn renew_set(&self, lease_ms: &str) -> String {
        let end = after_ms(lease_ms);
        let mut set = vec![("available_at", end.clone())];
        set.extend(self.lease_until.map(|column| (column, end.clone())));
        render(&set)
    }

    /// An operator retry or replay: `ready` now with a fresh attempt budget, token and lease cleared.
    pub fn retry_set(&self) -> String {
        let mut set = vec![
            ("status", quoted(self.stored.ready)),
            (self.attempts, "0".to_owned()),
            ("available_at", "now()".to_owned()),
        ];
        set.extend(self.release());
        set.extend(self.claimer.map(|column| (column, "NULL".to_owned())));
        render(&set)
    }

    /// An operator discard: `discarded`, token and lease cleared (`None`: the queue cannot discard).
    pub fn discard_set(&self) -> Option<String> {
        let discarded = self.stored.discarded?;
        let mut set = vec![("status", quoted(discarded))];
        set.extend(self.release());
        Some(render(&set))
    }
}

#[cfg(test)]
mod tests {
    use super::super::{NOTIFICATIONS, OUTBOX, WEBHOOK_DELIVERIES};

    #[test]
    fn the_due_predicate_names_the_ready_and_retry_statuses() {
        assert_eq!(
            NOTIFICATIONS.due("n"),
            "n.status IN ('pending', 'retry', 'deferred') AND n.available_at <= now()"
        );
        assert_eq!(OUTBOX.due(""), "status IN ('pending', 'retry', 'claimed') AND available_at <= now()");
    }

    #[test]
    fn every_exit_from_leased_clears_the_token() {
        for queue in [OUTBOX, NOTIFICATIONS, WEBHOOK_DELIVERIES] {
            for set in [queue.release_set(), queue.bury_set(), queue.retry_set()] {
                assert!(set.contains("claim_token = NULL"), "{}: {set}", queue.name);
            }
            if let Some(set) = queue.discard_set() {
                assert!(set.contains("claim_token = NULL"), "{set}");
            }
        }
        let expiry = NOTIFICATIONS.expiry_set("n", "$1");
        assert!(expiry.contains("claim_token = NULL, claimed_until = NULL"), "{expiry}");
    }

    #[test]
    fn the_claim_buries_at_the_ceiling() {
        let set = OUTBOX.claim_or_bury_set("o", "$5", "$2::uuid", "$4", Some("$3"));
        assert!(set.contains("status = CASE WHEN o.attempts >= $5 THEN 'dead' ELSE 'claimed' END"), "{set}");
        assert!(set.contains("attempts = CASE WHEN o.attempts >= $5 THEN o.attempts ELSE o.attempts + 1 END"));
        assert!(set.contains("last_error_code = CASE WHEN o.attempts >= $5 THEN 'attempts_exhausted'"));
    }
}
