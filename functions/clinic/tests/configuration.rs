//! docs/configuration.md against the settings trees: every variable a binary reads is documented
//! there, and every variable documented there is read by one (DESIGN.md §7, STYLE.md pattern 24).
//!
//! Each binary's `Settings` is built from an [`Env`] (empty but for what a start needs, then the
//! variants that enable conditional reads) and the names it asked for are collected; `clinic dev`'s
//! flags that clap reads from the environment (`CLINIC_HOST`, …) are added from its argument
//! definitions. The drills (`clinic-drill`) are not here: their variables are set by a parent drill
//! for its children, not configuration.

use std::collections::BTreeSet;

use clinic_core::config::Env;

/// The queue variables, one per listener, documented as one pattern.
const QUEUE_PATTERN: &str = "CLINIC_SQS_QUEUE_URL_<LISTENER>";

/// Documented but read by a library the binaries link, not by the settings: the OpenTelemetry
/// exporter's own variables.
const READ_BY_LIBRARIES: [&str; 3] =
    ["OTEL_SERVICE_NAME", "OTEL_RESOURCE_ATTRIBUTES", "OTEL_EXPORTER_OTLP_TIMEOUT"];

fn normalise(name: &str) -> String {
    if name.starts_with("CLINIC_SQS_QUEUE_URL_") {
        QUEUE_PATTERN.to_owned()
    } else {
        name.to_owned()
    }
}

/// Every `` `NAME` `` of docs/configuration.md that names a variable (capitals, digits, `_`; the
/// queue pattern).
fn documented() -> BTreeSet<String> {
    let text = include_str!("../../../docs/configuration.md");
    text.split('`')
        .skip(1)
        .step_by(2)
        .filter(|token| {
            *token == QUEUE_PATTERN
                || (token.len() > 2
                    && token.starts_with(|c: char| c.is_ascii_uppercase())
                    && token.chars().all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_'))
        })
        .map(normalise)
        .collect()
}

/// What a start needs: the required variables and every listener's queue.
fn base() -> Env {
    let mut env = Env::from_pairs([
        ("DATABASE_URL", "postgres://clinic@127.0.0.1/clinic"),
        ("CLINIC_CURSOR_KEY_SECRET_ARN", "arn:aws:secretsmanager:us-east-1:000000000000:secret:cursor"),
    ]);
    for listener in clinic_core::listeners::Listener::ALL {
        env = env.with(clinic_sqs::queue_url_var(*listener), "http://127.0.0.1:5000/queue");
    }
    env
}

/// The names each binary's settings read, over the variants that enable conditional reads.
fn read() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    let mut collect = |env: Env, build: &dyn Fn(&Env)| {
        build(&env);
        names.extend(env.names_read().iter().map(|name| normalise(name)));
    };
    for variant in [base(), base().with("CLINIC_NOTIFIER", "ses")] {
        collect(variant, &|env| drop(clinic_api::Settings::read(env).expect("api settings")));
    }
    for variant in [base(), base().with("CLINIC_NOTIFIER", "ses")] {
        collect(variant, &|env| drop(clinic_dispatcher::Settings::read(env).expect("dispatcher settings")));
    }
    for variant in [base(), base().with("CLINIC_NOTIFIER", "ses")] {
        collect(variant, &|env| drop(clinic_listener::Settings::read(env).expect("listener settings")));
    }
    for variant in [base(), base().with("CLINIC_TRANSPORT", "sqs")] {
        collect(variant, &|env| drop(clinic::settings::Settings::read(env).expect("clinic settings")));
    }
    // `clinic dev`'s flags with an environment fallback (clap reads those in `main`).
    let dev = <clinic::commands::dev::DevArgs as clap::Args>::augment_args(clap::Command::new("dev"));
    names.extend(
        dev.get_arguments().filter_map(|arg| arg.get_env()).map(|name| name.to_string_lossy().into_owned()),
    );
    names
}

#[test]
fn every_variable_read_is_documented_and_every_documented_one_is_read() {
    let documented = documented();
    let read = read();
    let undocumented: Vec<_> = read.difference(&documented).collect();
    assert!(undocumented.is_empty(), "read but not in docs/configuration.md: {undocumented:?}");
    let unread: Vec<_> =
        documented.difference(&read).filter(|name| !READ_BY_LIBRARIES.contains(&name.as_str())).collect();
    assert!(unread.is_empty(), "in docs/configuration.md but read by no settings: {unread:?}");
}

#[test]
fn a_bad_value_stops_start_up_naming_the_variable() {
    for (name, value) in [
        ("CLINIC_DISPATCH_BATCH", "0"),
        ("CLINIC_SCHEMA_BASE_URL", "ftp://x"),
        ("CLINIC_METRICS", "loud"),
        ("CLINIC_DB_STATEMENT_TIMEOUT_MS", "soon"),
    ] {
        let error = clinic_dispatcher::Settings::read(&base().with(name, value)).unwrap_err().to_string();
        assert!(error.contains(name), "{name}={value}: {error}");
    }
    let error = clinic_listener::Settings::read(&base().with("CLINIC_LISTENER_DEADLINE_MARGIN_MS", "60001"))
        .unwrap_err()
        .to_string();
    assert!(error.contains("CLINIC_LISTENER_DEADLINE_MARGIN_MS"), "{error}");
    let error = clinic_api::Settings::read(&Env::from_pairs([("DATABASE_URL", "postgres://x")])).unwrap_err();
    assert!(error.to_string().contains("CLINIC_CURSOR_KEY_SECRET_ARN"), "{error}");
    let error = clinic::settings::Settings::read(&base().with("CLINIC_PG_EPHEMERAL", "maybe")).unwrap_err();
    assert!(error.to_string().contains("CLINIC_PG_EPHEMERAL"), "{error}");
}
