//! Latency samples and their percentiles.

use std::time::Duration;

/// Latency samples in microseconds.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    micros: Vec<u64>,
    sorted: bool,
}

impl Samples {
    pub fn with_capacity(capacity: usize) -> Self {
        Self { micros: Vec::with_capacity(capacity), sorted: false }
    }

    pub fn push(&mut self, latency: Duration) {
        self.push_micros(latency.as_micros().min(u128::from(u64::MAX)) as u64);
    }

    pub fn push_micros(&mut self, micros: u64) {
        self.micros.push(micros);
        self.sorted = false;
    }

    pub fn extend(&mut self, other: Samples) {
        self.micros.extend(other.micros);
        self.sorted = false;
    }

    pub fn len(&self) -> usize {
        self.micros.len()
    }

    /// The `q` quantile (0–1) in milliseconds, nearest-rank; `None` without samples.
    pub fn quantile_ms(&mut self, q: f64) -> Option<f64> {
        if self.micros.is_empty() {
            return None;
        }
        if !self.sorted {
            self.micros.sort_unstable();
            self.sorted = true;
        }
        let rank = ((q * self.micros.len() as f64).ceil() as usize).clamp(1, self.micros.len());
        Some(self.micros[rank - 1] as f64 / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_quantiles() {
        let mut samples = Samples::default();
        for micros in (1..=100).rev() {
            samples.push_micros(micros * 1000);
        }
        assert_eq!(samples.quantile_ms(0.5), Some(50.0));
        assert_eq!(samples.quantile_ms(0.99), Some(99.0));
        assert_eq!(samples.quantile_ms(1.0), Some(100.0));
        assert_eq!(Samples::default().quantile_ms(0.5), None);
    }
}

/// The whole machine's CPU over a run, from `/proc/stat` (all cores): how busy it was, so a latency
/// figure can be read beside the load that shaped it.
#[derive(Debug, Clone, Copy)]
pub struct MachineCpu {
    busy: u64,
    total: u64,
}

impl MachineCpu {
    /// The counters now (zeros where `/proc/stat` cannot be read).
    pub fn now() -> Self {
        let line = std::fs::read_to_string("/proc/stat")
            .ok()
            .and_then(|stat| stat.lines().next().map(str::to_owned))
            .unwrap_or_default();
        // cpu user nice system idle iowait irq softirq steal …
        let fields: Vec<u64> = line.split_whitespace().skip(1).filter_map(|f| f.parse().ok()).collect();
        let total: u64 = fields.iter().take(8).sum();
        let idle = fields.get(3).copied().unwrap_or(0) + fields.get(4).copied().unwrap_or(0);
        Self { busy: total.saturating_sub(idle), total }
    }

    /// The share of all cores that was busy since `self` ("n/a" when unknown), e.g. "83% of 2 cores".
    pub fn busy_since(self) -> String {
        let now = Self::now();
        let (busy, total) = (now.busy.saturating_sub(self.busy), now.total.saturating_sub(self.total));
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        if total == 0 {
            return "n/a".into();
        }
        format!("{:.0}% of {cores} cores", 100.0 * busy as f64 / total as f64)
    }
}
