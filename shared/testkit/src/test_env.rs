//! The test harnesses' environment: `DATABASE_URL`, `CLINIC_TEST_*`, `CLINIC_DB_CA_FILE` and the
//! like, set by `tests/run` (or by hand) for the test processes. The one place tests read the
//! environment; the service's own code reads it only through the settings a `main` builds
//! (`clinic_core::config::Env`).

/// A variable of the test process, treating an empty value as unset.
pub fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|value| !value.trim().is_empty())
}

/// The first of `names` that is set.
pub fn first(names: &[&str]) -> Option<String> {
    names.iter().find_map(|name| var(name))
}

/// `1`, `true` or `yes`.
pub fn flag(name: &str) -> bool {
    matches!(var(name).as_deref(), Some("1" | "true" | "yes"))
}
