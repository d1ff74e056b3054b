//! A small deterministic generator (xorshift64*), so a seed repeats a run's choices.

use std::time::Duration;

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed.max(1))
    }

    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, bound: u64) -> u64 {
        self.next() % bound.max(1)
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_generator_repeats_and_stays_in_range() {
        let (mut a, mut b) = (Rng::new(42), Rng::new(42));
        assert_eq!(
            (0..5).map(|_| a.below(100)).collect::<Vec<_>>(),
            (0..5).map(|_| b.below(100)).collect::<Vec<_>>()
        );
        let pause = Rng::new(7).millis(1000, 5000);
        assert!((1000..=5000).contains(&pause.as_millis()));
    }
}
