"""A tiny OpenAI-compatible HTTP server on 127.0.0.1 that answers every request the way it is told to:
a good completion, or one kind of failure (HTTP status, hang, bad JSON, no `choices`, empty body).

Tests point `lm.api_base` at it to see what a user sees when their server misbehaves."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

GOOD = {
    "id": "cmpl-1", "object": "chat.completion", "created": 0, "model": "served",
    "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "yes"}}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 1, "total_tokens": 8},
}

# mode -> (status, body bytes); "hang" sleeps instead of answering.
FAILURES = {
    "http_500": (500, b'{"error": {"message": "internal error"}}'),
    "http_502": (502, b"<html>502 Bad Gateway</html>"),
    "http_503": (503, b'{"error": {"message": "overloaded"}}'),
    "http_504": (504, b"<html>504 Gateway Time-out</html>"),
    "http_429": (429, b'{"error": {"message": "rate limited"}}'),
    "bad_json": (200, b'{"choices": [ this is not json'),
    "no_choices": (200, json.dumps({"id": "x", "object": "chat.completion", "model": "served"}).encode()),
    "empty_body": (200, b""),
    "http_429_retry_after": (429, b'{"error": {"message": "rate limited"}}'),
}
# Extra headers of a failure mode (the server says when to come back).
HEADERS = {"http_429_retry_after": {"Retry-After": "1"}}


class FaultServer:
    """`mode` is read per request, so a test can switch it (e.g. good, then 500s, then good again)."""

    def __init__(self, mode: str = "good", models: tuple[str, ...] = ("served",), script: list[str] | None = None,
                 port: int = 0, stop_after: int | None = None):
        self.mode, self.models = mode, models
        self.script = list(script or [])  # modes for the first chat requests, in arrival order; then `mode`
        self.stop_after = stop_after  # answer this many chat requests, then go away (connection refused)
        self._lock = threading.Lock()
        self.chat_requests = 0
        self.httpd = ThreadingHTTPServer(("127.0.0.1", port), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def __enter__(self) -> FaultServer:
        self.thread.start()
        return self

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet: the test output is the client's
                pass

            def _send(self, status: int, body: bytes, headers: dict | None = None) -> None:
                self.send_response(status)
                for name, value in (headers or {}).items():
                    self.send_header(name, value)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_GET(self):
                if self.path.rstrip("/") == "/v1/models":
                    if server.mode == "hang":
                        time.sleep(30)
                    data = [{"id": m, "object": "model", "owned_by": "test"} for m in server.models]
                    self._send(200, json.dumps({"object": "list", "data": data}).encode())
                else:
                    self._send(404, b'{"detail": "not found"}')

            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with server._lock:
                    server.chat_requests += 1
                    mode = server.script.pop(0) if server.script else server.mode
                    if server.stop_after is not None and server.chat_requests > server.stop_after:
                        mode = "gone"
                if mode == "gone":  # the server dies: this connection drops, later ones are refused
                    threading.Thread(target=server.__exit__, daemon=True).start()
                    self.close_connection = True
                    return
                if mode == "drop":  # the server closes the socket mid-request, with no answer at all
                    self.close_connection = True
                    return
                if mode == "hang":
                    time.sleep(30)
                    return
                if mode == "slow":
                    time.sleep(1.0)
                    mode = "good"
                if mode == "good":
                    self._send(200, json.dumps(GOOD).encode())
                else:
                    self._send(*FAILURES[mode], HEADERS.get(mode))

        return Handler
