"""The HTTP handler base of the test receivers (receiver.py, reference_receiver.py): quiet, and
answers JSON. Each receiver subclasses it with its own routes."""
import json
from http.server import BaseHTTPRequestHandler


class JsonHandler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # quiet: the tests read the receivers' state, not their logs
        pass

    def _json(self, status, value):
        body = json.dumps(value).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
