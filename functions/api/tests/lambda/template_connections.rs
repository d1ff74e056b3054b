//! The connection budget of `docs/connections.md` against `template.yaml`: the template bounds every
//! function's concurrency (reserved API concurrency by default, stage throttling, the listeners'
//! event-source `MaximumConcurrency`), exposes `/readyz` without an authorizer, and its defaults add up
//! to exactly the total the document states.

const TEMPLATE: &str = include_str!("../../../../template.yaml");
const BUDGET_DOC: &str = include_str!("../../../../docs/connections.md");

/// The indented block of the top-level template entry `name` (a parameter or a resource).
fn entry(name: &str) -> String {
    let header = format!("\n  {name}:\n");
    let start =
        TEMPLATE.find(&header).unwrap_or_else(|| panic!("template.yaml has no {name}")) + header.len();
    TEMPLATE[start..]
        .lines()
        .take_while(|line| line.is_empty() || line.starts_with("    "))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The whole number after `key` in `block`.
fn number(block: &str, key: &str) -> u64 {
    let at = block.find(key).unwrap_or_else(|| panic!("no {key} in {block}")) + key.len();
    let digits: String =
        block[at..].trim_start_matches(['"', ' ']).chars().take_while(char::is_ascii_digit).collect();
    digits.parse().unwrap_or_else(|_| panic!("{key} is not a number in {block}"))
}

#[test]
fn the_template_bounds_every_function_and_matches_the_documented_budget() {
    let api_instances = number(&entry("ApiReservedConcurrency"), "Default: ");
    assert!(api_instances > 0, "API concurrency is reserved by default");
    let api = entry("ApiFunction");
    assert!(api
        .contains("ReservedConcurrentExecutions: !If [HasApiConcurrencyLimit, !Ref ApiReservedConcurrency"));
    let api_pool = number(&api, "CLINIC_DB_POOL_SIZE: ");

    let http_api = entry("HttpApi");
    assert!(http_api.contains("ThrottlingRateLimit: !Ref ApiThrottlingRateLimit"), "stage throttling");
    assert!(http_api.contains("ThrottlingBurstLimit: !Ref ApiThrottlingBurstLimit"), "stage throttling");
    assert!(http_api.contains("\"GET /readyz\":"), "the readiness probe has limits of its own");
    let readyz = &api[api.find("Readyz:").expect("a /readyz route")..];
    assert!(readyz.contains("Path: /readyz") && readyz.contains("Authorizer: NONE"));

    let dispatcher = entry("DispatcherFunction");
    // Overlapping windows: up to this many dispatchers drain at once (template.yaml).
    let dispatchers = number(&dispatcher, "ReservedConcurrentExecutions: ");
    let dispatcher_connections = dispatchers * (number(&dispatcher, "CLINIC_DB_POOL_SIZE: ") + 1); // + LISTEN
    let housekeeping = entry("HousekeepingFunction");
    assert_eq!(number(&housekeeping, "ReservedConcurrentExecutions: "), 1);
    let housekeeping_connections = number(&housekeeping, "CLINIC_DB_POOL_SIZE: ");
    let webhook_sender = entry("WebhookSenderFunction");
    assert_eq!(number(&webhook_sender, "ReservedConcurrentExecutions: "), 1);
    let webhook_sender_connections = number(&webhook_sender, "CLINIC_DB_POOL_SIZE: ");

    let per_queue = number(&entry("ListenerMaxConcurrency"), "Default: ");
    let listeners: Vec<String> = clinic_core::listeners::Listener::ALL
        .iter()
        .map(|listener| {
            let stem: String = listener
                .as_str()
                .split('_')
                .map(|word| word[..1].to_ascii_uppercase() + &word[1..])
                .collect();
            entry(&format!("{stem}Function"))
        })
        .collect();
    let mut listener_connections = 0;
    for function in &listeners {
        assert!(function.contains("MaximumConcurrency: !Ref ListenerMaxConcurrency"), "{function}");
        listener_connections += per_queue * number(function, "CLINIC_DB_POOL_SIZE: ");
    }

    let total = api_instances * api_pool
        + dispatcher_connections
        + housekeeping_connections
        + webhook_sender_connections
        + listener_connections;
    let stated = format!("| **total** | | | **{total}** |");
    assert!(BUDGET_DOC.contains(&stated), "docs/connections.md states the defaults' total {total}: {stated}");
}
