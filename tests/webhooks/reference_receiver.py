#!/usr/bin/env python3
"""The reference receiver (issue 42): what a partner system does to end with every event exactly
once — verify, deduplicate by number, notice gaps (from a delivery's number or a heartbeat's last
number) and backfill them through the replay route. Its loop, as docs/webhooks.md shows it:

    on POST: verify the signature (standardwebhooks) or answer 401
             heartbeat -> last = data.lastSequence          (0 when nothing was ever numbered)
             delivery  -> apply(sequence, event) once; last = sequence
             if last > contiguous: backfill()            (a gap: some numbers never arrived)
    backfill: GET {api}/v1/webhooks/endpoints/{id}/events?after=contiguous (integration token),
              apply each item not yet applied, follow nextAfter until null

    reference_receiver.py PORT SECRET API_BASE ENDPOINT_ID TOKEN

Prints the chosen port first. Control routes for the test:
  POST /_answer {"status": 500}  -> deliveries are refused (not applied) with that status
  GET  /_state                   -> what it applied and the figures (gaps, detection times, ...)
"""
import json
import sys
import threading
import time
import urllib.request
from http.server import ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from json_handler import JsonHandler

PORT, SECRET, API, ENDPOINT, TOKEN = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5]
LOCK = threading.RLock()
STATE = {
    "status": 204,
    "applied": {},  # number -> event id
    "pushed": 0,  # deliveries applied from a push
    "backfilled": 0,  # applied from the replay route
    "redelivered": 0,  # a number that arrived again (ignored: deduplicated)
    "heartbeats": 0,
    "unverified": 0,
    "gaps": [],  # {"detectedAt", "by", "missing": [numbers]}
    "answerChangedAt": time.time(),
}


def contiguous():
    n = 0
    while n + 1 in STATE["applied"]:
        n += 1
    return n


def apply(number, event_id, how):
    if number in STATE["applied"]:
        STATE["redelivered"] += 1
        return
    STATE["applied"][number] = event_id
    STATE[how] += 1


def backfill():
    after = contiguous()
    while after is not None:
        request = urllib.request.Request(
            f"{API}/v1/webhooks/endpoints/{ENDPOINT}/events?after={after}&limit=100",
            headers={"authorization": f"Bearer {TOKEN}"},
        )
        with urllib.request.urlopen(request, timeout=10) as answer:
            page = json.load(answer)
        for item in page["items"]:
            apply(item["sequence"], item["eventId"], "backfilled")
        after = page["nextAfter"]


def seen(last, by):
    """A number the sender says exists: a gap when it is past what arrived without holes."""
    have = contiguous()
    missing = [n for n in range(have + 1, last + 1) if n not in STATE["applied"]]
    if missing:
        STATE["gaps"].append({"detectedAt": time.time(), "by": by, "missing": missing})
        backfill()


class Handler(JsonHandler):

    def do_GET(self):
        if self.path == "/_state":
            with LOCK:
                state = dict(STATE, contiguous=contiguous())
                state["applied"] = {str(k): v for k, v in STATE["applied"].items()}
                return self._json(200, state)
        self._json(404, {})

    def do_POST(self):
        raw = self.rfile.read(int(self.headers.get("content-length", "0")))
        if self.path == "/_answer":
            with LOCK:
                STATE["status"] = json.loads(raw)["status"]
                STATE["answerChangedAt"] = time.time()
            return self._json(200, {})
        headers = {k.lower(): v for k, v in self.headers.items()}
        try:
            Webhook(SECRET).verify(raw, headers)
        except WebhookVerificationError:
            with LOCK:
                STATE["unverified"] += 1
            return self._json(401, {})
        with LOCK:
            status = STATE["status"]
            if status >= 300:  # the receiver is failing: nothing is applied
                return self._json(status, {})
            body = json.loads(raw)
            if body["type"] == "clinic.webhook.heartbeat.v1":
                STATE["heartbeats"] += 1
                seen(body["data"]["lastSequence"], "heartbeat")
            else:
                number = int(body["sequence"])
                apply(number, body["id"], "pushed")
                seen(number, "delivery")
        self._json(204, {})


def main():
    server = ThreadingHTTPServer(("127.0.0.1", PORT), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
