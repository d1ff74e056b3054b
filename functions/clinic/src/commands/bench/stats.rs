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
