//! The clinic service's core: ids, domain, repositories, events, outbox, listeners, delivery, webhooks,
//! housekeeping and operator use cases. No HTTP server: the router is `clinic-http` (shared/http).
//!
//! Every mutation commits its resource change and exactly one event (with its timeline links and its
//! outbox row) in one PostgreSQL transaction; events carry identifiers only.
//!
//! Floors: each top-level module imports (`crate::…`) only from the floors below its own, so no two
//! import each other and the knot cannot grow back ([`FLOORS`], checked by a test over these sources).
//!
//! | floor | modules |
//! |---|---|
//! | 0 | `config`, `domain`, `ids`, `tags` — values and their parsing, no I/O |
//! | 1 | `db`, `private_file`, `telemetry` |
//! | 2 | `error`, `events`, `workspaces` |
//! | 3 | `context`, `contract`, `disclosures`, `lease` |
//! | 4 | `patients`, `webhooks` |
//! | 5 | `practitioners` |
//! | 6 | `appointments` |
//! | 7 | `delivery` |
//! | 8 | `listeners` |
//! | 9 | `outbox` |
//! | 10 | `operator` |
//! | 11 | `dispatch` |
//! | 12 | `housekeeping` |
//!
//! The one import upward: `contract` reads the listener catalog, `listeners::map`, which itself
//! imports only the event types (see `contract`'s and `listeners::map`'s docs).

pub mod appointments;
pub mod config;
pub mod context;
pub mod contract;
pub mod db;
pub mod delivery;
pub mod disclosures;
pub mod dispatch;
pub mod domain;
pub mod error;
pub mod events;
pub mod housekeeping;
pub mod ids;
pub mod lease;
pub mod listeners;
pub mod operator;
pub mod outbox;
pub mod patients;
pub mod practitioners;
pub mod private_file;
pub mod tags;
pub mod telemetry;
pub mod webhooks;
pub mod workspaces;

/// The floor of every top-level module (see the table above).
pub const FLOORS: &[(&str, u8)] = &[
    ("config", 0),
    ("domain", 0),
    ("ids", 0),
    ("tags", 0),
    ("db", 1),
    ("private_file", 1),
    ("telemetry", 1),
    ("error", 2),
    ("events", 2),
    ("workspaces", 2),
    ("context", 3),
    ("contract", 3),
    ("disclosures", 3),
    ("lease", 3),
    ("patients", 4),
    ("webhooks", 4),
    ("practitioners", 5),
    ("appointments", 6),
    ("delivery", 7),
    ("listeners", 8),
    ("outbox", 9),
    ("operator", 10),
    ("dispatch", 11),
    ("housekeeping", 12),
];

#[cfg(test)]
mod floors {
    use std::path::{Path, PathBuf};

    use super::FLOORS;

    /// The one documented import from a lower floor into a higher one: (from, to, through).
    const UPWARD: &[(&str, &str, &str)] = &[("contract", "listeners", "listeners::map")];

    fn floor(module: &str) -> Option<u8> {
        FLOORS.iter().find(|(name, _)| *name == module).map(|(_, floor)| *floor)
    }

    fn sources(path: &Path, out: &mut Vec<PathBuf>) {
        if path.is_dir() {
            for entry in std::fs::read_dir(path).unwrap() {
                sources(&entry.unwrap().path(), out);
            }
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            out.push(path.to_owned());
        }
    }

    /// The `crate::<module>` paths of `text` (also inside `crate::{a, b::c}`), comments skipped,
    /// each with the path that follows it (for the documented exception).
    fn imports(text: &str) -> Vec<(String, String)> {
        let mut found = Vec::new();
        for line in text.lines().filter(|line| !line.trim_start().starts_with("//")) {
            for (at, _) in line.match_indices("crate::") {
                let rest = &line[at + "crate::".len()..];
                let paths: Vec<&str> = match rest.strip_prefix('{') {
                    Some(group) => group.split('}').next().unwrap_or("").split(',').collect(),
                    None => vec![rest],
                };
                for path in paths {
                    let path: String = path
                        .trim()
                        .chars()
                        .take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':')
                        .collect();
                    let module = path.split("::").next().unwrap_or("").to_owned();
                    if !module.is_empty() {
                        found.push((module, path));
                    }
                }
            }
        }
        found
    }

    #[test]
    fn every_module_imports_only_from_lower_floors() {
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut broken = Vec::new();
        for entry in std::fs::read_dir(&src).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_stem().unwrap().to_string_lossy().into_owned();
            if name == "lib" || name == "tests" {
                continue;
            }
            let Some(own) = floor(&name) else {
                broken.push(format!("{name} has no floor in FLOORS"));
                continue;
            };
            let mut files = Vec::new();
            sources(&path, &mut files);
            for file in files {
                for (module, full) in imports(&std::fs::read_to_string(&file).unwrap()) {
                    if module == name {
                        continue;
                    }
                    let Some(theirs) = floor(&module) else { continue };
                    let documented = UPWARD.iter().any(|(from, to, through)| {
                        *from == name && *to == module && full.starts_with(through)
                    });
                    if theirs >= own && !documented {
                        broken.push(format!(
                            "{} imports crate::{full} (floor {theirs} from floor {own})",
                            file.display()
                        ));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "imports that break the floors (lib.rs):\n{}", broken.join("\n"));
    }

    #[test]
    fn the_import_scan_sees_grouped_paths_and_skips_comments() {
        let text = "use crate::{events::Envelope, ids};\n// crate::dispatch\nlet x = crate::db::sql::query;";
        let modules: Vec<String> = imports(text).into_iter().map(|(module, _)| module).collect();
        assert_eq!(modules, ["events", "ids", "db"]);
    }
}
