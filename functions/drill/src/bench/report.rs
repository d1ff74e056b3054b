//! The printed result: the machine, then one markdown table row per figure, each beside its baseline
//! from the same run and its target.

use std::fmt::Write;

/// One row of the table.
#[derive(Debug, Clone)]
pub struct Row {
    pub measure: String,
    pub figure: String,
    pub baseline: String,
    pub ratio: String,
    pub target: String,
    /// `Some(true)` met, `Some(false)` missed, `None` informational.
    pub met: Option<bool>,
}

/// Where the bench's sessions reach the server, as the server sees it: `host:port` over TCP, or the
/// Unix socket (whose sessions have no server address), so a run over either says which it was.
const SERVER_ADDRESS: &str = "SELECT coalesce(host(inet_server_addr()) || ':' || inet_server_port(), \
     'a Unix socket, port ' || current_setting('port'))";

#[derive(Debug)]
pub struct Report {
    machine: Vec<(String, String)>,
    rows: Vec<Row>,
    notes: Vec<String>,
    smoke: bool,
}

impl Report {
    /// Describes the machine and the PostgreSQL server behind `admin_url`.
    pub async fn new(admin_url: &str, smoke: bool) -> anyhow::Result<Self> {
        let client = super::db::connect(admin_url).await?;
        // One text answer of the server, or `?` when it does not give one.
        let answer = |sql: String| {
            let client = &client;
            async move {
                client
                    .query_one(&sql, &[])
                    .await
                    .map(|row| row.get::<_, String>(0))
                    .unwrap_or_else(|_| "?".into())
            }
        };
        let setting = |name: &'static str| answer(format!("SHOW {name}"));
        let version = setting("server_version").await;
        let autovacuum = setting("autovacuum").await;
        let naptime = setting("autovacuum_naptime").await;
        let sync = setting("synchronous_commit").await;
        let shared_buffers = setting("shared_buffers").await;
        let server = answer(SERVER_ADDRESS.to_owned()).await;
        let cpus = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(0);
        let cpu_model = std::fs::read_to_string("/proc/cpuinfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("model name"))
                    .map(|rest| rest.trim_start_matches([' ', '\t', ':']).trim().to_owned())
            })
            .unwrap_or_else(|| "unknown".into());
        let memory = std::fs::read_to_string("/proc/meminfo")
            .ok()
            .and_then(|info| {
                info.lines()
                    .find_map(|line| line.strip_prefix("MemTotal:"))
                    .and_then(|rest| rest.split_whitespace().next()?.parse::<u64>().ok())
            })
            .map_or_else(|| "unknown".into(), |kib| format!("{:.1} GiB", kib as f64 / 1024.0 / 1024.0));
        let machine = vec![
            ("date".into(), chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string()),
            ("CPUs (nproc)".into(), cpus.to_string()),
            ("CPU model".into(), cpu_model),
            ("memory".into(), memory),
            ("PostgreSQL".into(), format!("{version} on {server} (shared_buffers {shared_buffers}, synchronous_commit {sync}, autovacuum {autovacuum}, naptime {naptime})")),
            ("build".into(), if cfg!(debug_assertions) { "debug".into() } else { "release".into() }),
        ];
        Ok(Self { machine, rows: Vec::new(), notes: Vec::new(), smoke })
    }

    pub fn push(&mut self, row: Row) {
        self.rows.push(row);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        self.notes.push(note.into());
    }

    pub fn render(&self) -> String {
        let mut out = String::new();
        let title = if self.smoke { "clinic bench (smoke: figures mean nothing)" } else { "clinic bench" };
        let _ = writeln!(out, "## {title}\n");
        for (key, value) in &self.machine {
            let _ = writeln!(out, "- {key}: {value}");
        }
        let _ = writeln!(out, "\n| Measure | Figure | Baseline (same run) | Ratio | Target | Met |");
        let _ = writeln!(out, "|---|---|---|---|---|---|");
        for row in &self.rows {
            let met = match row.met {
                Some(true) => "yes",
                Some(false) => "**no**",
                None => "—",
            };
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} |",
                row.measure, row.figure, row.baseline, row.ratio, row.target, met
            );
        }
        if !self.notes.is_empty() {
            let _ = writeln!(out);
            for note in &self.notes {
                let _ = writeln!(out, "- {note}");
            }
        }
        out
    }
}

/// `12,345` style thousands separators.
pub fn thousands(value: f64) -> String {
    let rounded = value.round() as i64;
    let digits = rounded.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if rounded < 0 {
        out.insert(0, '-');
    }
    out
}

/// A ratio as `0.87×`.
pub fn ratio(figure: f64, baseline: f64) -> (f64, String) {
    if baseline <= 0.0 {
        return (0.0, "n/a".into());
    }
    let r = figure / baseline;
    (r, format!("{r:.2}×"))
}

/// Milliseconds with sensible precision, or `n/a`.
pub fn ms(value: Option<f64>) -> String {
    match value {
        Some(v) if v < 10.0 => format!("{v:.2} ms"),
        Some(v) => format!("{v:.1} ms"),
        None => "n/a".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thousands_separators() {
        assert_eq!(thousands(0.0), "0");
        assert_eq!(thousands(999.4), "999");
        assert_eq!(thousands(1234.0), "1,234");
        assert_eq!(thousands(1234567.0), "1,234,567");
    }

    #[tokio::test]
    async fn the_header_names_the_address_the_sessions_reach_the_server_at() {
        let admin_url = clinic_testkit::admin_url();
        let config: tokio_postgres::Config = admin_url.parse().expect("the test server's URL parses");
        let port = config.get_ports().first().copied().unwrap_or(5432);
        let report = Report::new(&admin_url, true).await.expect("the test server answers");
        let (_, server) =
            report.machine.iter().find(|(key, _)| key == "PostgreSQL").expect("a PostgreSQL line");
        let over_tcp = server.contains(&format!(":{port} ("));
        let over_socket = server.contains(&format!("on a Unix socket, port {port} ("));
        assert!(over_tcp || over_socket, "{server}");
        assert!(!server.contains(" on ? "), "{server}");
    }
}
