#!/usr/bin/env python3
"""Measures the init time of each Lambda binary against a fake Lambda Runtime API on 127.0.0.1.

    infra/measure-cold-start.py [--runs N] [--bin-dir DIR]

For each function binary (clinic-api, clinic-dispatcher, clinic-listener) it starts the process N
times with the environment Lambda would give it and reports, as medians:

  init   process start -> the runtime's first `GET /runtime/invocation/next`: everything `main` does
         before it can take an invocation (telemetry, configuration, pool, SQS client). This is
         what Lambda bills as the Init phase.
  first  process start -> the response to a first invocation fed from tests/fixtures/ (API: GET
         /readyz, which opens the first database connection; listener: an SQS batch whose only
         message is unreadable, so no database work; dispatcher: not invoked, its tick runs for the
         whole drain window).

DATABASE_URL must name a reachable PostgreSQL (the API's /readyz connects); the default is the local
server `tests/run` uses. Nothing is sent to AWS: the dispatcher gets dummy credentials and queue URLs
and is never invoked. Build the binaries first, e.g.

    cargo lambda build --release --compiler cargo --bin clinic-api --bin clinic-dispatcher \
        --bin clinic-listener

(default --bin-dir: target/lambda, where cargo-lambda puts `<bin>/bootstrap`).
"""

import argparse
import http.server
import json
import os
import pathlib
import socketserver
import statistics
import subprocess
import threading
import time

ROOT = pathlib.Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"


class FakeRuntime:
    """The three Runtime API routes a function uses, recording when each was first called."""

    def __init__(self, event):
        self.event = event
        self.next_at = None
        self.response_at = None
        self.response_body = None
        self.lock = threading.Lock()
        self.served = False
        runtime = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):
                now = time.monotonic()
                with runtime.lock:
                    if runtime.next_at is None:
                        runtime.next_at = now
                    serve = runtime.event is not None and not runtime.served
                    runtime.served = runtime.served or serve
                if not serve:
                    # Hold the long poll, as Lambda does while no event is queued.
                    time.sleep(30)
                    self.send_error(500)
                    return
                body = json.dumps(runtime.event).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Lambda-Runtime-Aws-Request-Id", "8476a536-e9f4-11e8-9739-2dfe598c3fcd")
                self.send_header("Lambda-Runtime-Deadline-Ms", str(int(time.time() * 1000) + 30_000))
                self.send_header(
                    "Lambda-Runtime-Invoked-Function-Arn",
                    "arn:aws:lambda:eu-central-1:123456789012:function:clinic-measure",
                )
                self.send_header("Lambda-Runtime-Trace-Id", "Root=1-5bef4de7-ad49b0e87f6ef6c87fc2e700")
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                payload = self.rfile.read(length) if length else b""
                with runtime.lock:
                    if runtime.response_at is None:
                        runtime.response_at = time.monotonic()
                        runtime.response_body = payload
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()

        class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
            daemon_threads = True

            def handle_error(self, request, client_address):
                pass  # the measured process is killed mid-poll; its connection resets

        self.server = Server(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


def aws_endpoint():
    """The Secrets Manager emulator (moto) the API reads its cursor key from, as in AWS."""
    return os.environ.get("CLINIC_TEST_AWS_ENDPOINT", "http://127.0.0.1:5001")


def cursor_key_secret():
    """Creates the API's cursor key secret in the emulator and returns its ARN (the API reads keys by
    ARN at start-up, never from its environment)."""
    import urllib.request

    body = json.dumps(
        {"Name": f"measure-cursor-key-{os.getpid()}", "SecretString": "measure-cursor-key-0123456789abcdef"}
    ).encode()
    request = urllib.request.Request(
        aws_endpoint(),
        data=body,
        headers={
            "X-Amz-Target": "secretsmanager.CreateSecret",
            "Content-Type": "application/x-amz-json-1.1",
            "Authorization": "AWS4-HMAC-SHA256 Credential=measure/20260101/eu-central-1/"
            "secretsmanager/aws4_request, SignedHeaders=host, Signature=measure",
        },
    )
    with urllib.request.urlopen(request, timeout=10) as answer:
        return json.load(answer)["ARN"]


CURSOR_KEY_ARN = None


def lambda_env(port, name):
    global CURSOR_KEY_ARN
    if CURSOR_KEY_ARN is None:
        CURSOR_KEY_ARN = cursor_key_secret()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "AWS_LAMBDA_RUNTIME_API": f"127.0.0.1:{port}",
        "AWS_LAMBDA_FUNCTION_NAME": name,
        "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
        "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
        "AWS_LAMBDA_LOG_GROUP_NAME": f"/clinic/measure/{name}",
        "AWS_LAMBDA_LOG_STREAM_NAME": "2026/11/30/[$LATEST]measure",
        "AWS_REGION": "eu-central-1",
        "AWS_ACCESS_KEY_ID": "measure",
        "AWS_SECRET_ACCESS_KEY": "measure",
        "DATABASE_URL": os.environ.get(
            "DATABASE_URL", "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
        ),
        "CLINIC_DB_POOL_SIZE": "2",
        "CLINIC_CURSOR_KEY_SECRET_ARN": CURSOR_KEY_ARN,
        "CLINIC_AWS_ENDPOINT": aws_endpoint(),
        "RUST_LOG": "warn",
    }
    for listener in [
        "patient_booking_confirmation",
        "practitioner_schedule_change",
        "patient_reschedule_notice",
        "patient_cancellation_notice",
        "patient_reminder",
        "cancel_future_appointments",
        "webhook_fan_out",
    ]:
        env[f"CLINIC_SQS_QUEUE_URL_{listener.upper()}"] = (
            f"https://sqs.eu-central-1.amazonaws.com/123456789012/measure-{listener}"
        )
    return env


def first_events():
    sqs = json.loads((FIXTURES / "sqs_listener_batch.json").read_text())
    sqs["Records"] = [r for r in sqs["Records"] if not r["body"].lstrip().startswith('{"specversion"')]
    return {
        "clinic-api": json.loads((FIXTURES / "apigw_v2_readyz.json").read_text()),
        "clinic-listener": sqs,
        "clinic-dispatcher": None,
    }


def measure(binary, name, event, timeout=20.0):
    runtime = FakeRuntime(event)
    started = time.monotonic()
    process = subprocess.Popen(
        [str(binary)],
        env=lambda_env(runtime.port, name),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        deadline = started + timeout
        while time.monotonic() < deadline:
            done = runtime.next_at is not None and (event is None or runtime.response_at is not None)
            if done or process.poll() is not None:
                break
            time.sleep(0.0005)
        if runtime.next_at is None:
            process.kill()
            err = process.stderr.read().decode(errors="replace")
            raise SystemExit(f"{name}: no `next` request (exit {process.poll()}): {err[-2000:]}")
        init = (runtime.next_at - started) * 1000
        first = (runtime.response_at - started) * 1000 if runtime.response_at else None
        return init, first, runtime.response_body
    finally:
        if process.poll() is None:
            process.kill()
        process.wait()
        runtime.close()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--bin-dir", default=str(ROOT / "target" / "lambda"))
    args = parser.parse_args()
    events = first_events()
    print("| Function | Binary size | Init (median) | Init (max) | First response (median) |")
    print("| --- | --- | --- | --- | --- |")
    for name, event in events.items():
        binary = pathlib.Path(args.bin_dir) / name / "bootstrap"
        if not binary.exists():
            raise SystemExit(f"{binary} not found; build the functions first (see --help)")
        inits, firsts, body = [], [], None
        measure(binary, name, event)  # warm the page cache once
        for _ in range(args.runs):
            init, first, body = measure(binary, name, event)
            inits.append(init)
            if first is not None:
                firsts.append(first)
        size = binary.stat().st_size / (1024 * 1024)
        first_text = f"{statistics.median(firsts):.1f} ms" if firsts else "not invoked"
        print(
            f"| {name} | {size:.1f} MiB | {statistics.median(inits):.1f} ms | {max(inits):.1f} ms "
            f"| {first_text} |"
        )
        if body and os.environ.get("MEASURE_VERBOSE"):
            print(f"  first response: {body[:300]!r}")


if __name__ == "__main__":
    main()
