//! A delivery's number in its endpoint's sequence (DESIGN.md §5f).
//!
//! Invariants:
//! - Each endpoint numbers its deliveries 1, 2, 3 … densely: no gap, no reuse. The number is taken
//!   in the fan-out's transaction ([`super::fanout`]) and never changes, so every attempt, recover
//!   and replay of a delivery carries the same one.
//! - On the wire it is the CloudEvents `sequence` extension, which must be a lexicographically
//!   orderable string: the decimal number zero-padded to [`Sequence::WIRE_DIGITS`] digits, so string
//!   order is number order ([`Sequence::to_wire`]). Receivers parse it as an integer. The FHIR
//!   payload carries it as an `integer64` (a decimal string, no padding).

/// A delivery number (≥ 1; 0 only as "nothing numbered yet" in an endpoint's `last_sequence`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Sequence(pub i64);

impl Sequence {
    /// Digits of the wire form: every non-negative `bigint` fits.
    pub const WIRE_DIGITS: usize = 19;

    /// The CloudEvents `sequence` attribute.
    pub fn to_wire(self) -> String {
        format!("{:0width$}", self.0, width = Self::WIRE_DIGITS)
    }

    /// Reads the wire form back (any decimal form of a non-negative number).
    pub fn parse_wire(text: &str) -> Option<Sequence> {
        if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        text.parse().ok().map(Sequence)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wire_form_orders_as_strings_like_the_numbers() {
        let numbers = [1_i64, 2, 9, 10, 11, 99, 100, 12_345, i64::MAX];
        let wire: Vec<String> = numbers.iter().map(|n| Sequence(*n).to_wire()).collect();
        let mut sorted = wire.clone();
        sorted.sort();
        assert_eq!(wire, sorted);
        assert!(wire.iter().all(|w| w.len() == Sequence::WIRE_DIGITS));
        for n in numbers {
            assert_eq!(Sequence::parse_wire(&Sequence(n).to_wire()), Some(Sequence(n)));
        }
        assert_eq!(Sequence::parse_wire("42"), Some(Sequence(42)));
        assert_eq!(Sequence::parse_wire("-1"), None);
        assert_eq!(Sequence::parse_wire(""), None);
    }
}
