"""Schemathesis hooks for tests/fuzz-api: the one documented exclusion from positive_data_acceptance.

positive_data_acceptance (ST202) fails when the API refuses a request its own OpenAPI document calls
valid. The document states every rule JSON Schema can state (lengths, patterns, formats, ranges, enums,
required fields, closed objects). The rules below are the ones it cannot, because they relate two
fields, depend on today's date, or depend on what the server issued or stored before (an id in a body
must name an existing resource). A refusal is
dropped here only when it is exactly one of these: the operation, the problem's `field` and its
`detail` must all match. Any other refusal of schema-valid data still fails the run.
"""

import datetime
import os

import schemathesis
from hypothesis import strategies as st

# Set CLINIC_FUZZ_DROPPED to a file to get one line per dropped refusal (operation, field, detail).
DROPPED_LOG = os.environ.get("CLINIC_FUZZ_DROPPED")


def dropped(case, reason):
    if DROPPED_LOG:
        with open(DROPPED_LOG, "a", encoding="utf-8") as log:
            log.write(f"{case.operation.label}\t{reason}\n")
    return False

SLOT = (
    "endsAt",
    ("endsAt: must be after startsAt", "endsAt: must be at most 24 hours after startsAt"),
    "endsAt after startsAt, at most 24 hours later: two fields",
)
WINDOW = (
    "to",
    ("to: must be after from", "to: must be at most 31 days after from"),
    "to after from, at most 31 days later: two parameters",
)
FILTER_WINDOW = ("filter.to", ("filter.to: must be after from",), "filter.to after filter.from: two fields")
OUTBOX_WINDOW = ("to", ("to: must be after from",), "to after from: two parameters")
PAST_DATE = (
    "dateOfBirth",
    ("dateOfBirth: must be a past date after 1900-01-01",),
    "not in the future: depends on today's date",
)

# The zone names of the tz database this build carries (chrono-tz): a list, not a pattern, and one
# that changes with the database's releases.
TIME_ZONE = (
    "timeZone",
    ("timeZone: must be an IANA time zone name such as Europe/Lisbon or UTC",),
    "a zone of the tz database of this build",
)

REFERENCES = [
    ("patientId", ("patientId: no such patient",), "the patient must exist: stored data"),
    ("practitionerId", ("practitionerId: no such practitioner",), "the practitioner must exist: stored data"),
]

# A webhook URL's host is resolved when it is saved (the SSRF guard, docs/webhooks.md): whether it
# resolves, and to which addresses, is the DNS's answer at that moment, not the document's. A literal
# address is named with its class; a host name is not told what it resolved to. The classes of
# shared/core/src/webhooks/guard.rs (`forbidden`).
FORBIDDEN_KINDS = ("metadata", "unspecified", "loopback", "private", "link_local", "cgnat", "multicast",
                   "reserved", "documentation", "ipv4_mapped", "ipv4_translated", "ipv4_compatible",
                   "nat64", "6to4", "discard", "site_local", "not_global_unicast", "teredo")
WEBHOOK_HOST = (
    "url",
    ("url: the host does not resolve",
     "url: the host did not resolve in time",
     "url: the host name must resolve only to public unicast addresses")
    + tuple(f"url: the address is not a public unicast address ({kind})" for kind in FORBIDDEN_KINDS),
    "where the host resolves: the DNS's answer at save time",
)

# Operation label -> the rules JSON Schema cannot state that the operation enforces.
UNSTATABLE = {
    "POST /v1/appointments": [SLOT] + REFERENCES,
    "POST /v1/appointments/{id}/reschedule": [SLOT],
    "GET /v1/appointments": [WINDOW],
    "GET /v1/system/outbox": [OUTBOX_WINDOW],
    "GET /v1/system/deliveries": [OUTBOX_WINDOW],
    "GET /v1/webhooks/deliveries": [OUTBOX_WINDOW],
    "POST /v1/system/outbox/bulk/retry": [FILTER_WINDOW],
    "POST /v1/system/outbox/bulk/replay": [FILTER_WINDOW],
    "POST /v1/system/outbox/bulk/discard": [FILTER_WINDOW],
    "POST /v1/system/deliveries/bulk/retry": [FILTER_WINDOW],
    "POST /v1/system/deliveries/bulk/discard": [FILTER_WINDOW],
    "POST /v1/system/webhook-deliveries/bulk/retry": [FILTER_WINDOW],
    "POST /v1/system/webhook-deliveries/bulk/discard": [FILTER_WINDOW],
    "POST /v1/patients": [PAST_DATE],
    "PATCH /v1/patients/{id}": [PAST_DATE, TIME_ZONE],
    "GET /v1/patients": [PAST_DATE],
    "POST /v1/webhooks/endpoints": [WEBHOOK_HOST],
    "PATCH /v1/webhooks/endpoints/{id}": [WEBHOOK_HOST],
}
# On every operation that takes them:
# - a cursor is sealed by the server (opaque; a fuzzer cannot mint one, so any it makes up answers 400);
# - an Idempotency-Key is bound to the first request that used it: the fuzzer reuses short keys with
#   other bodies, which the API must refuse (422) rather than replay a different request's answer;
# - an unsubscribe token is signed by the server, like a cursor.
EVERYWHERE = [
    ("cursor", ("cursor: is not a cursor this server issued",), "server-issued"),
    ("Idempotency-Key", ("This Idempotency-Key was used with a different request.",), "bound to its first use"),
    # An unsubscribe token is signed by the server (docs/delivery.md): a fuzzer cannot mint one.
    ("token", ("token: is not a token this service issued", "token: is not an unsubscribe token"), "server-signed"),
]


@schemathesis.hook
def filter_failure(context, failure, case, response):
    if getattr(failure, "code", None) != "ST202":
        return True
    # The stateful phase feeds values from earlier answers into paths; a null one (a nullable id such
    # as a disclosure's eventId) arrives as the text "None", which is not schema-valid data at all.
    if any(value is None for value in (case.path_parameters or {}).values()):
        return dropped(case, "null path parameter from a stateful link")
    try:
        problem = response.json()
    except Exception:
        return True
    if not isinstance(problem, dict):
        return True
    field, detail = problem.get("field"), problem.get("detail")
    for name, details, _why in UNSTATABLE.get(case.operation.label, []) + EVERYWHERE:
        if field == name and detail in details:
            return dropped(case, detail)
    return True


# Generators for the two formats, drawing only what the document's patterns admit (UTC date-times in
# the years 1900-9999; dates in 1900-2099), so that a value is not drawn from the whole RFC 3339 range
# and then mostly filtered out by the pattern (which fails hypothesis' filter_too_much health check on
# GET /v1/appointments, whose two required times both carry the pattern). The outbox filters' from/to
# accept any offset; they are drawn in UTC too.
def _utc_date_times():
    dates = st.dates(min_value=datetime.date(1900, 1, 1), max_value=datetime.date(9999, 12, 31))
    clock = st.tuples(st.integers(0, 23), st.integers(0, 59), st.integers(0, 59))
    fraction = st.one_of(st.just(""), st.integers(0, 999_999).map(lambda micros: f".{micros:06d}"))
    offset = st.sampled_from(["Z", "+00:00"])
    return st.builds(
        lambda day, hms, frac, zone: f"{day.isoformat()}T{hms[0]:02d}:{hms[1]:02d}:{hms[2]:02d}{frac}{zone}",
        dates,
        clock,
        fraction,
        offset,
    )


schemathesis.openapi.format("date-time", _utc_date_times())
schemathesis.openapi.format(
    "date",
    st.dates(min_value=datetime.date(1900, 1, 1), max_value=datetime.date(2099, 12, 31)).map(datetime.date.isoformat),
)
