"""A small in-process HTTP server that answers as a ``serve`` node does for a pool's placement and
loss logic: health, capacity, holds, creates, sandbox lookups, deletes and exec. It is for the
pool's pure logic only (placement order, moving past full or dead nodes, NodeLost, the monitor);
what a pool does against real nodes is tested against real ``serve`` processes
(test_pool_over_real_nodes.py, test_pool_over_hosts_in_network_namespaces.py).

A node can be made full (429), killed (every connection and the listening socket closed: a
connect is refused, as of a process killed with -9), frozen (it accepts connections and answers
nothing, as a process stopped with SIGSTOP) and restarted (a new start time; the ids it made
before answer 410 NODE_RESTARTED)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List, Optional, Set, Tuple


class FakeNode:
    def __init__(self, name: Optional[str], *, max_sandboxes: int = 8, holds: Optional[Dict[str, Tuple[bool, int, int]]] = None,
                 has_holds_route: bool = True) -> None:
        self.name = name
        self.max = max_sandboxes
        # ref -> (present, layers_present, layers)
        self.holds = dict(holds or {})
        self.has_holds_route = has_holds_route
        self.sandboxes: Set[str] = set()
        self.requests: List[Tuple[str, str]] = []
        self.full = False
        self.started_at = "2024-01-01T00:00:00.000Z"
        self._restarts = 0
        self._lost: Set[str] = set()
        self._seq = 0
        self._thaw = threading.Event()
        self._thaw.set()
        self._release = threading.Event()
        self._conns: Set[socket.socket] = set()
        self._lock = threading.Lock()
        self._start_server()

    # -- process life ---------------------------------------------------------------------------

    def _start_server(self, port: int = 0) -> None:
        node = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                with node._lock:
                    node._conns.add(self.connection)

            def finish(self) -> None:
                with node._lock:
                    node._conns.discard(self.connection)
                try:
                    super().finish()
                except OSError:
                    pass

            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, body: Any = None, headers: Optional[Dict[str, str]] = None) -> None:
                data = b"" if body is None else json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (headers or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _handle(self) -> None:
                n = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(n) if n else b""
                node._thaw.wait()  # frozen: the request is taken and never answered (until thawed)
                with node._lock:
                    node.requests.append((self.command, self.path))
                status, body, headers = node.route(self.command, self.path, json.loads(raw) if raw else None)
                if status == -1:  # exec that waits to be released
                    node._release.wait()
                    status, body, headers = 200, node.outcome(), {}
                self._answer(status, body, headers)

            do_GET = do_POST = do_DELETE = _handle

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def kill(self) -> None:
        """As kill -9: the listening socket and every connection close; connects are refused."""
        self.server.shutdown()
        self.server.server_close()
        with self._lock:
            conns = list(self._conns)
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._release.set()

    def restart(self) -> None:
        """Back on the same port with a new start time; what it held is lost."""
        self._restarts += 1
        self.started_at = f"2024-01-01T00:00:{self._restarts:02d}.000Z"
        self._lost |= self.sandboxes
        self.sandboxes = set()
        self._release = threading.Event()
        self._start_server(self.port)

    def freeze(self) -> None:
        self._thaw.clear()

    def thaw(self) -> None:
        self._thaw.set()

    def close(self) -> None:
        self.thaw()
        self._release.set()
        try:
            self.server.shutdown()
            self.server.server_close()
        except OSError:
            pass

    def count(self, method: str, prefix: str) -> int:
        with self._lock:
            return sum(1 for m, p in self.requests if m == method and p.startswith(prefix))

    # -- routes ---------------------------------------------------------------------------------

    @staticmethod
    def outcome() -> Dict[str, Any]:
        return {"stdout": "ok\n", "stderr": "", "exit_code": 0, "outcome": "ok", "signal": None, "stdout_truncated": False,
                "stderr_truncated": False, "duration_ms": 1.0}

    def route(self, method: str, path: str, body: Any) -> Tuple[int, Any, Dict[str, str]]:
        parts = path.split("?")[0].strip("/").split("/")
        if path == "/v1/health":
            return 200, {"ok": True, "node": self.name, "started_at": self.started_at, "version": "fake", "ready": True}, {}
        if path == "/v1/capacity":
            live = len(self.sandboxes)
            return 200, {"node": self.name, "live": live, "max": self.max, "free": max(0, self.max - live),
                         "memory": {"total_bytes": 1, "available_bytes": 1, "sandboxes_bytes": 0}}, {}
        if path == "/v1/holds" and method == "POST":
            if not self.has_holds_route:
                return 404, {"error": {"code": "NOT_FOUND", "message": "no route POST /v1/holds"}}, {}
            refs = body.get("refs") or [f"{body['dataset']}/{i}" for i in body.get("instance_ids", [])]
            out = []
            for r in refs:
                present, have, layers = self.holds.get(r, (False, 0, 3))
                out.append({"ref": r, "env": "sha256:x", "present": present, "layers_present": have, "layers": layers})
            return 200, {"node": self.name, "holds": out}, {}
        if parts[:2] == ["v1", "sandboxes"] and len(parts) == 2:
            if method == "GET":
                return 200, {"sandboxes": [self.info(s) for s in sorted(self.sandboxes)]}, {}
            if self.full or len(self.sandboxes) >= self.max:
                return 429, {"error": {"code": "CAPACITY", "message": "full", "hint": "later"}}, {"Retry-After": "1"}
            self._seq += 1
            sid = f"sb-{int(time.time() * 1000):x}-{self._seq:08x}" + (f".{self.name}" if self.name else "")
            self.sandboxes.add(sid)
            return 201, self.info(sid), {}
        if parts[:2] == ["v1", "sandboxes"] and len(parts) >= 3:
            sid = parts[2]
            if sid not in self.sandboxes:
                if sid in self._lost:
                    return 410, {"error": {"code": "NODE_RESTARTED", "message": f"sandbox {sid} was lost when node {self.name} restarted at "
                                           f"{self.started_at}", "hint": "start it again"}}, {}
                return 404, {"error": {"code": "NOT_FOUND", "message": f"sandbox {sid} not found"}}, {}
            if len(parts) == 3 and method == "DELETE":
                self.sandboxes.discard(sid)
                return 204, None, {}
            if len(parts) == 3:
                return 200, self.info(sid), {}
            if parts[3] == "exec":
                if (body or {}).get("command") == "hang":
                    return -1, None, {}
                return 200, self.outcome(), {}
        return 404, {"error": {"code": "NOT_FOUND", "message": f"no route {method} {path}"}}, {}

    def info(self, sid: str) -> Dict[str, Any]:
        return {"id": sid, "ref": "x", "created_at": "now", "expires_at": "later", "idle_since": None, "sessions": []}
