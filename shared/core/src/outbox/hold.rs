//! Holding a claimed row for a paused listener (see [`crate::operator::pause`]): the dispatcher marks
//! it with [`super::Failure::Hold`] (back to `retry`, its attempt given back — a pause never spends
//! the attempt budget) under the code [`HELD_CODE`], due again only after [`HOLD_RECHECK`] — or at
//! once, in event order, when the listener is resumed. Fenced by the claim token like every mark.

use std::time::Duration;

/// The `last_error_code` of a row held for a paused listener (also read by [`crate::operator::pause`]).
pub const HELD_CODE: &str = "listener_paused";

/// How long a held row waits before the claim looks at it again (a safety net: resume releases
/// held rows at once).
pub const HOLD_RECHECK: Duration = Duration::from_secs(300);
