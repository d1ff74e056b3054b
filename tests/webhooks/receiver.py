#!/usr/bin/env python3
"""A webhook receiver for the tests: verifies every delivery with the PyPI `standardwebhooks`
package (an implementation not written here) and records what it saw.

    receiver.py PORT SECRET [SECRET ...]

Listens on 127.0.0.1:PORT (0: any free port; the chosen port is printed as the first line).
Every POST is checked against each SECRET on its own (`Webhook(secret).verify`), so a test can
prove that during a rotation both the new and the old secret verify. Control routes:
  GET  /_received          -> [{"id", "verified": [bool per secret], "body", "timestamp"}]
  POST /_answer            {"status": 503, "retryAfter": "2"} -> the next POSTs answer that
  POST /_secrets           {"secrets": [...]} -> replaces the secrets checked
"""
import json
import sys
import time
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

STATE = {"received": [], "status": 204, "retry_after": None, "secrets": sys.argv[2:]}
LOCK = threading.Lock()


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet
        pass

    def _json(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/_received":
            with LOCK:
                return self._json(200, STATE["received"])
        self._json(404, {})

    def do_POST(self):
        length = int(self.headers.get("content-length", "0"))
        raw = self.rfile.read(length)
        if self.path == "/_answer":
            answer = json.loads(raw)
            with LOCK:
                STATE["status"] = answer["status"]
                STATE["retry_after"] = answer.get("retryAfter")
            return self._json(200, {})
        if self.path == "/_secrets":
            with LOCK:
                STATE["secrets"] = json.loads(raw)["secrets"]
            return self._json(200, {})
        headers = {k.lower(): v for k, v in self.headers.items()}
        with LOCK:
            secrets = list(STATE["secrets"])
            status, retry_after = STATE["status"], STATE["retry_after"]
        verified = []
        for secret in secrets:
            try:
                Webhook(secret).verify(raw, headers)
                verified.append(True)
            except WebhookVerificationError:
                verified.append(False)
        record = {
            "id": headers.get("webhook-id"),
            "timestamp": headers.get("webhook-timestamp"),
            "signatures": len(headers.get("webhook-signature", "").split(" ")),
            "verified": verified,
            "status": status,
            "receivedAt": time.time(),
            "body": json.loads(raw) if raw else None,
        }
        with LOCK:
            STATE["received"].append(record)
        self.send_response(status)
        if retry_after is not None:
            self.send_header("retry-after", retry_after)
        self.send_header("content-length", "0")
        self.end_headers()


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
