//! Patient search: a case-insensitive prefix of the family or the given name (optionally one date of
//! birth), in the order of the matched name, paged by the keyset (matched name, id).
//!
//! Invariants:
//! - Each patient appears once: under its family name when that matches, else under its given name.
//!   Both halves of the statement walk an index in (lower-cased name, id) order
//!   (`patients_family_prefix_idx`, `patients_given_prefix_idx`, V4, under the "C" collation) and
//!   PostgreSQL merges them, so a page costs about its own rows whatever page it is.
//! - A prefix is the index range [`q`, `q` with its last character's successor): under the "C"
//!   collation (code-point order) that range holds exactly the names starting with `q`.
//! - Deleted (erased) patients never appear: both indexes and both halves exclude `deleted_at IS NOT
//!   NULL`. Rows are scoped by workspace.
//! - The query text is health data: it is never logged (the router logs route templates only) and a
//!   cursor seals the matched name (`http::cursor`).
//! - The statements are public so a test can `EXPLAIN` them under a generic plan and see the index.

use chrono::NaiveDate;
use deadpool_postgres::GenericClient;

use super::{repo, Patient};
use crate::db::sql;
use crate::domain::input::FieldError;
use crate::ids::{PatientId, WorkspaceId};

/// Shortest and longest accepted query, in characters.
pub const MIN_QUERY_CHARS: usize = 2;
pub const MAX_QUERY_CHARS: usize = 100;

/// `$1` workspace, `$2` the lower-cased prefix, `$3` its range end, `$4`/`$5` the keyset position
/// (first page: the prefix and the nil id), `$6` an optional date of birth, `$7` the page size.
pub const SEARCH: &str = r#"
SELECT sort_key, id, workspace_id, given_name, family_name, email, phone, date_of_birth, version,
       created_at, updated_at, contact_channels, contact_opt_outs, time_zone
FROM (
    (SELECT lower(family_name) COLLATE "C" AS sort_key, id, workspace_id, given_name, family_name,
            email, phone, date_of_birth, version, created_at, updated_at, contact_channels,
            contact_opt_outs, time_zone
     FROM patients
     WHERE workspace_id = $1 AND deleted_at IS NULL
       AND (lower(family_name) COLLATE "C", id) > ($4::text COLLATE "C", $5::uuid)
       AND lower(family_name) COLLATE "C" < $3::text COLLATE "C"
       AND ($6::date IS NULL OR date_of_birth = $6)
     ORDER BY lower(family_name) COLLATE "C", id
     LIMIT $7)
    UNION ALL
    (SELECT lower(given_name) COLLATE "C", id, workspace_id, given_name, family_name,
            email, phone, date_of_birth, version, created_at, updated_at, contact_channels,
            contact_opt_outs, time_zone
     FROM patients
     WHERE workspace_id = $1 AND deleted_at IS NULL
       AND (lower(given_name) COLLATE "C", id) > ($4::text COLLATE "C", $5::uuid)
       AND lower(given_name) COLLATE "C" < $3::text COLLATE "C"
       AND NOT (lower(family_name) COLLATE "C" >= $2::text COLLATE "C"
                AND lower(family_name) COLLATE "C" < $3::text COLLATE "C")
       AND ($6::date IS NULL OR date_of_birth = $6)
     ORDER BY lower(given_name) COLLATE "C", id
     LIMIT $7)
) AS hits
ORDER BY sort_key, id
LIMIT $7"#;

/// A validated search: the lower-cased prefix and its range end.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Search {
    prefix: String,
    end: String,
    pub date_of_birth: Option<NaiveDate>,
}

impl Search {
    /// `q`: at most 100 characters, at least 2 of them once trimmed, no NUL; the error names `q`.
    pub fn new(q: &str, date_of_birth: Option<NaiveDate>) -> Result<Self, FieldError> {
        let trimmed = q.trim();
        if trimmed.contains('\0') {
            return Err(FieldError::new("q", "must not contain NUL characters"));
        }
        if q.chars().count() > MAX_QUERY_CHARS || trimmed.chars().count() < MIN_QUERY_CHARS {
            return Err(FieldError::new(
                "q",
                format!("must be {MIN_QUERY_CHARS} to {MAX_QUERY_CHARS} characters (a name prefix)"),
            ));
        }
        let prefix = trimmed.to_lowercase();
        let end = range_end(&prefix);
        Ok(Self { prefix, end, date_of_birth })
    }

    /// The lower-cased prefix (part of a cursor's scope, never logged).
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The end of the prefix's index range ([`SEARCH`]'s `$3`).
    pub fn end(&self) -> &str {
        &self.end
    }
}

/// The least string after every string that starts with `prefix`, in code-point order: the prefix
/// with its last character replaced by that character's successor (dropping trailing characters that
/// have none).
fn range_end(prefix: &str) -> String {
    let mut chars: Vec<char> = prefix.chars().collect();
    while let Some(last) = chars.pop() {
        let successor = (u32::from(last) + 1..=u32::from(char::MAX)).find_map(char::from_u32);
        if let Some(next) = successor {
            chars.push(next);
            return chars.into_iter().collect();
        }
    }
    // Every character was U+10FFFF: no string sorts after all of them but one that is longer.
    char::MAX.to_string().repeat(prefix.chars().count() + 1)
}

/// A listed patient and the lower-cased name it matched on (its keyset position).
#[derive(Debug, Clone)]
pub struct Hit {
    pub sort_key: String,
    pub patient: Patient,
}

/// Up to `limit` matching patients after `after` (`None`: from the start).
pub async fn search(
    client: &impl GenericClient,
    workspace_id: WorkspaceId,
    search: &Search,
    after: Option<(String, PatientId)>,
    limit: i64,
) -> Result<Vec<Hit>, tokio_postgres::Error> {
    let (after_key, after_id) =
        after.map_or_else(|| (search.prefix.clone(), uuid::Uuid::nil()), |(key, id)| (key, id.uuid()));
    let rows = sql::query(
        client,
        SEARCH,
        &[&workspace_id, &search.prefix, &search.end, &after_key, &after_id, &search.date_of_birth, &limit],
    )
    .await?;
    Ok(rows.iter().map(|row| Hit { sort_key: row.get("sort_key"), patient: repo::from_row(row) }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_end_is_the_successor_of_the_last_character() {
        assert_eq!(range_end("sm"), "sn");
        assert_eq!(range_end("zz"), "z{");
        assert_eq!(range_end("ö"), "÷");
        assert_eq!(range_end("a\u{D7FF}"), "a\u{E000}");
        assert_eq!(range_end("a\u{10FFFF}"), "b");
    }

    #[test]
    fn query_is_trimmed_lower_cased_and_bounded() {
        assert_eq!(Search::new("  SMith ", None).unwrap().prefix(), "smith");
        assert_eq!(Search::new("s", None).unwrap_err().field, "q");
        assert_eq!(Search::new("  s  ", None).unwrap_err().field, "q");
        assert_eq!(Search::new(&"a".repeat(101), None).unwrap_err().field, "q");
        assert_eq!(Search::new(&format!(" {}", "a".repeat(100)), None).unwrap_err().field, "q");
        assert!(Search::new(&"a".repeat(100), None).is_ok());
        assert_eq!(Search::new("a\0b", None).unwrap_err().field, "q");
        assert!(Search::new("Ōk", None).is_ok());
    }
}
