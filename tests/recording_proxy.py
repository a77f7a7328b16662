"""An HTTP proxy on 127.0.0.1 in front of a real OpenAI-compatible server: it forwards every request as it
came and keeps each chat request's JSON body with the JSON reply, so a test sees exactly what a client sent."""
from __future__ import annotations

import json
import threading
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


class RecordingProxy:
    def __init__(self, upstream: str):
        self.upstream = upstream.rstrip("/").removesuffix("/v1")
        self.exchanges: list[tuple[dict, dict]] = []  # (request body, reply body) of each chat completion
        self._lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.httpd.daemon_threads = True
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)

    @property
    def api_base(self) -> str:
        return f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"

    def requests(self) -> list[dict]:
        with self._lock:
            return [request for request, _ in self.exchanges]

    def clear(self) -> None:
        with self._lock:
            self.exchanges.clear()

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()

    def _handler(self):
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):  # quiet
                pass

            def _forward(self, body: bytes | None) -> None:
                request = urllib.request.Request(proxy.upstream + self.path, data=body, method=self.command,
                                                 headers={"Content-Type": "application/json"})
                try:
                    with urllib.request.urlopen(request, timeout=120) as reply:
                        status, payload = reply.status, reply.read()
                except urllib.error.HTTPError as error:
                    status, payload = error.code, error.read()
                if body is not None and self.path.endswith("/chat/completions"):
                    with proxy._lock:
                        proxy.exchanges.append((json.loads(body), json.loads(payload)))
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def do_GET(self):
                self._forward(None)

            def do_POST(self):
                self._forward(self.rfile.read(int(self.headers.get("Content-Length") or 0)))

        return Handler
