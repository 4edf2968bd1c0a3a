"""A fault-injecting proxy in front of the local API server: clients talk plain HTTP to it, it
talks HTTPS to the API server (verified against the cluster's CA) and passes every answer back
unchanged, except for the requests it was told to fail. Those get an HTTP 500 carrying a
``Status`` (what an API server in trouble answers) or a connection reset without any answer
(what a restarting one does), and never reach the API server.
"""

from __future__ import annotations

import http.client
import json
import socket
import ssl
import struct
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

Fault = str  # "500" or "reset"
# Per-hop headers (RFC 9110, 7.6.1) stay on their hop; Content-Length is set again for the
# body sent, and the proxy's own server sends Date and Server.
_NOT_FORWARDED = {"connection", "keep-alive", "proxy-connection", "transfer-encoding", "te",
                  "trailer", "upgrade", "host", "content-length", "date", "server"}


@dataclass
class Seen:
    """A request the proxy saw: how it was answered (a status, or "reset")."""

    method: str
    path: str
    body: bytes
    answer: str


class FaultProxy:
    """See the module docstring. `fail` arms the faults; `seen` lists every request."""

    def __init__(self, upstream: str, ca_cert: Path):
        target = urlsplit(upstream)
        self._upstream = (target.hostname, target.port or 443)
        self._tls = ssl.create_default_context(cafile=str(ca_cert))
        self._lock = threading.Lock()
        self._faults: list[tuple[Callable[[str, bytes], bool], list[Fault] | None, Fault]] = []
        self.seen: list[Seen] = []
        proxy = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"  # keep-alive, as the API server serves it

            def do_GET(self):
                proxy._handle(self)

            do_POST = do_PUT = do_PATCH = do_DELETE = do_GET

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True,
                                        name="apiserver-proxy")
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def fail(self, when: Callable[[str, bytes], bool], faults: list[Fault] | None,
             always: Fault = "500") -> None:
        """Fail the requests ``when(method, body)`` picks: the first ones with ``faults`` in
        turn, every one with ``always`` when ``faults`` is None."""
        with self._lock:
            self._faults.append((when, None if faults is None else list(faults), always))

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(5)

    def _fault_for(self, method: str, body: bytes) -> Fault | None:
        with self._lock:
            for when, pending, always in self._faults:
                if not when(method, body):
                    continue
                if pending is None:
                    return always
                if pending:
                    return pending.pop(0)
        return None

    def _handle(self, h: BaseHTTPRequestHandler) -> None:
        body = h.rfile.read(int(h.headers.get("Content-Length") or 0))
        fault = self._fault_for(h.command, body)
        if fault == "reset":
            self._record(h, body, "reset")
            # SO_LINGER 0: closing sends a TCP RST instead of a clean FIN.
            h.connection.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            h.close_connection = True
            return
        if fault is not None:
            status = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                 "message": "injected fault", "reason": "InternalError",
                                 "code": 500}).encode()
            self._record(h, body, "500")
            self._answer(h, 500, [("Content-Type", "application/json")], status)
            return
        upstream = http.client.HTTPSConnection(*self._upstream, context=self._tls, timeout=30)
        try:
            headers = {k: v for k, v in h.headers.items() if k.lower() not in _NOT_FORWARDED}
            upstream.request(h.command, h.path, body=body or None, headers=headers)
            reply = upstream.getresponse()
            data = reply.read()
            kept = [(k, v) for k, v in reply.getheaders() if k.lower() not in _NOT_FORWARDED]
        finally:
            upstream.close()
        self._record(h, body, str(reply.status))
        self._answer(h, reply.status, kept, data)

    def _record(self, h: BaseHTTPRequestHandler, body: bytes, answer: str) -> None:
        with self._lock:
            self.seen.append(Seen(h.command, h.path, body, answer))

    @staticmethod
    def _answer(h: BaseHTTPRequestHandler, status: int, headers, data: bytes) -> None:
        h.send_response(status)
        for key, value in headers:
            h.send_header(key, value)
        h.send_header("Content-Length", str(len(data)))
        h.end_headers()
        h.wfile.write(data)
