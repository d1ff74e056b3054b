//! The W3C trace context (`traceparent`) an event is committed in: parsed strictly, stored with the
//! event (`events.traceparent`), carried on every message and webhook body (the CloudEvents
//! distributed-tracing extension) and linked to by every span that handles the event.
//!
//! Invariants:
//! - A [`TraceParent`] is only ever built by [`TraceParent::parse`] (version `00`, exactly
//!   `00-<32 hex>-<16 hex>-<2 hex>` in lower case, neither id all zeros), by
//!   [`TraceParent::from_amzn`] (an X-Ray `Root=1-<8 hex>-<24 hex>` header), or generated here. So
//!   what is stored and sent is 55 characters of hex and dashes: it cannot carry a name or a token.
//! - A client's header that does not parse is ignored (a fresh trace is started), never answered 4xx.
//! - Generated trace ids start with the Unix time in seconds (4 bytes), then 12 random bytes: the
//!   X-Ray id format, which is also a valid W3C id, so one scheme serves OTLP and X-Ray alike.

use std::fmt;

use rand::RngCore;

/// A W3C `traceparent`: trace id, parent (span) id and flags.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct TraceParent {
    trace_id: [u8; 16],
    parent_id: [u8; 8],
    flags: u8,
}

/// The `sampled` bit of the trace flags.
const SAMPLED: u8 = 0x01;

impl TraceParent {
    /// The header value when it is a valid version-00 `traceparent`; `None` for anything else.
    pub fn parse(text: &str) -> Option<TraceParent> {
        let bytes = text.as_bytes();
        if bytes.len() != 55 || bytes[2] != b'-' || bytes[35] != b'-' || bytes[52] != b'-' {
            return None;
        }
        if &text[..2] != "00" {
            return None;
        }
        let trace_id: [u8; 16] = hex(&text[3..35])?.try_into().ok()?;
        let parent_id: [u8; 8] = hex(&text[36..52])?.try_into().ok()?;
        let flags = hex(&text[53..55])?[0];
        TraceParent::from_parts(trace_id, parent_id, flags)
    }

    /// The trace of an X-Ray header (`X-Amzn-Trace-Id`, Lambda's `_X_AMZN_TRACE_ID`):
    /// `Root=1-<8 hex>-<24 hex>[;Parent=<16 hex>][;Sampled=0|1]`. Without a parent a fresh parent id
    /// is drawn (the trace is kept).
    pub fn from_amzn(header: &str) -> Option<TraceParent> {
        let (mut root, mut parent, mut sampled) = (None, None, true);
        for part in header.split(';') {
            match part.trim().split_once('=') {
                Some(("Root", value)) => root = Some(value),
                Some(("Parent", value)) => parent = Some(value),
                Some(("Sampled", value)) => sampled = value != "0",
                _ => {}
            }
        }
        let root = root?;
        let rest = root.strip_prefix("1-")?;
        let (time, random) = rest.split_once('-')?;
        if time.len() != 8 || random.len() != 24 {
            return None;
        }
        let trace_id: [u8; 16] = hex(&format!("{time}{random}"))?.try_into().ok()?;
        let parent_id: [u8; 8] = match parent {
            Some(parent) if parent.len() == 16 => hex(parent)?.try_into().ok()?,
            Some(_) => return None,
            None => random_span_id(),
        };
        TraceParent::from_parts(trace_id, parent_id, if sampled { SAMPLED } else { 0 })
    }

    /// A valid trace context from its parts (`None` when an id is all zeros).
    pub fn from_parts(trace_id: [u8; 16], parent_id: [u8; 8], flags: u8) -> Option<TraceParent> {
        if trace_id == [0; 16] || parent_id == [0; 8] {
            return None;
        }
        Some(TraceParent { trace_id, parent_id, flags })
    }

    /// A new sampled trace (X-Ray id format, see the module docs).
    pub fn generate() -> TraceParent {
        TraceParent { trace_id: new_trace_id(), parent_id: random_span_id(), flags: SAMPLED }
    }

    /// The same trace and flags under a new parent id (this service's own hop).
    pub fn child(self) -> TraceParent {
        TraceParent { parent_id: random_span_id(), ..self }
    }

    pub fn trace_id(&self) -> [u8; 16] {
        self.trace_id
    }

    pub fn parent_id(&self) -> [u8; 8] {
        self.parent_id
    }

    pub fn flags(&self) -> u8 {
        self.flags
    }

    pub fn sampled(&self) -> bool {
        self.flags & SAMPLED != 0
    }

    /// The trace id as 32 lower-case hex characters (what trace viewers search by).
    pub fn trace_id_hex(&self) -> String {
        to_hex(&self.trace_id)
    }
}

/// A trace id in the X-Ray format: 4 bytes of Unix seconds, 12 random bytes.
pub fn new_trace_id() -> [u8; 16] {
    let mut id = [0u8; 16];
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |elapsed| elapsed.as_secs() as u32);
    id[..4].copy_from_slice(&seconds.to_be_bytes());
    loop {
        rand::rng().fill_bytes(&mut id[4..]);
        if id[4..] != [0; 12] {
            return id;
        }
    }
}

/// A random, non-zero span id.
pub fn random_span_id() -> [u8; 8] {
    loop {
        let id = rand::rng().next_u64();
        if id != 0 {
            return id.to_be_bytes();
        }
    }
}

fn hex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 || !text.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return None;
    }
    (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok()).collect()
}

fn to_hex(bytes: &[u8]) -> String {
    bytes.iter().map(|byte| format!("{byte:02x}")).collect()
}

impl fmt::Display for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "00-{}-{}-{:02x}", to_hex(&self.trace_id), to_hex(&self.parent_id), self.flags)
    }
}

impl fmt::Debug for TraceParent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceParent({self})")
    }
}

impl std::str::FromStr for TraceParent {
    type Err = &'static str;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        TraceParent::parse(text).ok_or("not a version-00 W3C traceparent")
    }
}

impl serde::Serialize for TraceParent {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for TraceParent {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
        TraceParent::parse(&text).ok_or_else(|| serde::de::Error::custom("invalid traceparent"))
    }
}

crate::inline_schema!(TraceParent, |_: &mut schemars::SchemaGenerator| {
    schemars::json_schema!({
        "type": "string",
        "pattern": PATTERN,
        "description": "W3C trace context of the request that committed the event (CloudEvents distributed-tracing extension)"
    })
});

/// The pattern a stored or sent `traceparent` matches (also the `events.traceparent` CHECK).
pub const PATTERN: &str = "^00-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_w3c_example_and_round_trips() {
        let text = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let parsed = TraceParent::parse(text).unwrap();
        assert_eq!(parsed.to_string(), text);
        assert!(parsed.sampled());
        assert_eq!(parsed.trace_id_hex(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let child = parsed.child();
        assert_eq!(child.trace_id(), parsed.trace_id());
        assert_ne!(child.parent_id(), parsed.parent_id());
    }

    #[test]
    fn rejects_anything_not_strictly_version_00() {
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-",
            "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
            "00-Jane Doe, flu shot, +1 555 0100 555 0100 5-00f067aa",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-0é",
        ] {
            assert_eq!(TraceParent::parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn reads_the_xray_root_and_parent() {
        let header = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1";
        let parsed = TraceParent::from_amzn(header).unwrap();
        assert_eq!(parsed.to_string(), "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01");
        let unsampled = TraceParent::from_amzn("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=0").unwrap();
        assert!(!unsampled.sampled());
        assert_eq!(unsampled.trace_id_hex(), "5759e988bd862e3fe1be46a994272793");
        for bad in ["", "Root=2-5759e988-bd862e3fe1be46a994272793", "Root=1-5759e988-bd86", "Self=1-x"] {
            assert_eq!(TraceParent::from_amzn(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn generated_ids_are_valid_and_start_with_the_time() {
        let generated = TraceParent::generate();
        assert_eq!(TraceParent::parse(&generated.to_string()), Some(generated));
        let seconds = u32::from_be_bytes(generated.trace_id()[..4].try_into().unwrap());
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs();
        assert!((now as i64 - seconds as i64).abs() < 5);
    }
}
