#!/usr/bin/env python3
"""A webhook receiver for the tests: verifies every delivery with the PyPI `standardwebhooks`
package (an implementation not written here) and records what it saw.

    receiver.py PORT SECRET [SECRET ...]

Listens on 127.0.0.1:PORT (0: any free port; the chosen port is printed as the first line).
A body that is a FHIR resource (`resourceType`) is validated with the PyPI `fhir.resources` R5
models (another implementation not written here); the record says "valid" or the validation error.
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
from http.server import ThreadingHTTPServer

from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from json_handler import JsonHandler

STATE = {"received": [], "status": 204, "retry_after": None, "secrets": sys.argv[2:]}
LOCK = threading.Lock()


class Handler(JsonHandler):

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
        body = json.loads(raw) if raw else None
        record = {
            "id": headers.get("webhook-id"),
            "contentType": headers.get("content-type"),
            "fhir": fhir_check(body),
            "timestamp": headers.get("webhook-timestamp"),
            "signatures": len(headers.get("webhook-signature", "").split(" ")),
            "verified": verified,
            "status": status,
            "receivedAt": time.time(),
            "body": body,
        }
        with LOCK:
            STATE["received"].append(record)
        self.send_response(status)
        if retry_after is not None:
            self.send_header("retry-after", retry_after)
        self.send_header("content-length", "0")
        self.end_headers()


def fhir_check(body):
    """None for a body that is not a FHIR resource, else "valid" or the validator's complaint."""
    if not isinstance(body, dict) or "resourceType" not in body:
        return None
    try:
        from fhir.resources import get_fhir_model_class  # R5 models (fhir.resources >= 8)
    except ImportError as error:
        return f"fhir.resources is not installed: {error}"
    try:
        model = get_fhir_model_class(body["resourceType"])
        model.model_validate(body)
        return "valid"
    except Exception as error:  # the validator's own message
        return f"invalid: {error}"


def main():
    server = ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print(server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
