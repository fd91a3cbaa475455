"""HTTP over keep-alive connections (http.client), shared safely between threads.

Connections are pooled per client: a request takes an idle one (or opens one) and gives it back
once the response is read to its end, so sequential calls reuse one TCP connection and the asyncio
client's worker threads each get their own. A reused connection the server closed while idle fails
on its first use; that request is sent again once on a fresh connection.
"""

from __future__ import annotations

import http.client
import json
import os
import socket
import threading
import time
import urllib.parse
from typing import IO, Any, Callable, Dict, List, Mapping, Optional, Set, Tuple, Union

from .errors import CapacityError, MinisandboxError, TransportError, error_from_response

DEFAULT_BASE_URL = "http://127.0.0.1:7000"
USER_AGENT = "minisandbox-python/0.1.0"

Body = Union[None, bytes, IO[bytes]]

# errors of a connection the server had already closed (idle keep-alive timeout)
_STALE = (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError, ConnectionAbortedError, http.client.CannotSendRequest)


def resolve_token(token: Optional[str], token_file: Optional[str]) -> Optional[str]:
    """The token: the argument, else $MINISANDBOX_TOKEN, else the file (argument or $MINISANDBOX_TOKEN_FILE)."""
    if token:
        return token
    env = os.environ.get("MINISANDBOX_TOKEN")
    if env:
        return env.strip()
    path = token_file or os.environ.get("MINISANDBOX_TOKEN_FILE")
    if path:
        with open(path, encoding="utf-8") as f:
            return f.read().strip()
    return None


class Response:
    """A fully read response: status, headers (lower-case names) and body bytes."""

    def __init__(self, status: int, headers: Dict[str, str], body: bytes) -> None:
        self.status = status
        self.headers = headers
        self.body = body
        # what a ``stream`` reader returned for a streamed response
        self.streamed: Any = None

    def json(self) -> Any:
        return json.loads(self.body.decode("utf-8")) if self.body else None

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", errors="replace")


class Transport:
    def __init__(
        self,
        base_url: Optional[str] = None,
        token: Optional[str] = None,
        token_file: Optional[str] = None,
        timeout: float = 600.0,
        retry_on_capacity: float = 0.0,
        max_idle_connections: int = 64,
        connect_timeout: Optional[float] = None,
    ) -> None:
        url = base_url or os.environ.get("MINISANDBOX_URL") or DEFAULT_BASE_URL
        u = urllib.parse.urlsplit(url)
        if u.scheme not in ("http", "https") or not u.hostname:
            raise ValueError(f"base_url must be http(s)://host[:port][/prefix], got {url!r}")
        self.base_url = url.rstrip("/")
        self._https = u.scheme == "https"
        self._host = u.hostname
        self._port = u.port or (443 if self._https else 80)
        self._prefix = u.path.rstrip("/")
        self.token = resolve_token(token, token_file)
        self.timeout = timeout
        # a connect waits this long (None: the request's timeout); a node that is gone is said so
        # in seconds, while a long command's answer may take its whole timeout
        self.connect_timeout = connect_timeout
        self.retry_on_capacity = retry_on_capacity
        self._idle: List[http.client.HTTPConnection] = []
        # connections with a request on them, for abort_busy
        self._busy: Set[http.client.HTTPConnection] = set()
        self._lock = threading.Lock()
        self._max_idle = max_idle_connections
        self._closed = False

    # -- connections ---------------------------------------------------------------------------

    def _new_conn(self, timeout: Optional[float]) -> http.client.HTTPConnection:
        cls = http.client.HTTPSConnection if self._https else http.client.HTTPConnection
        c = cls(self._host, self._port, timeout=timeout)
        return c

    def _take(self, timeout: Optional[float]) -> Tuple[http.client.HTTPConnection, bool]:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            return self._new_conn(timeout), False
        conn.timeout = timeout
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn, True

    def _give_back(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            if not self._closed and len(self._idle) < self._max_idle:
                self._idle.append(conn)
                return
        conn.close()

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for c in idle:
            c.close()

    def abort_busy(self) -> int:
        """Breaks the connection of every request in flight (their callers get a TransportError at
        once, whatever their timeout) and returns how many there were: for a pool whose node stopped
        answering, so that a call waiting on it does not wait out its socket timeout."""
        with self._lock:
            busy = list(self._busy)
        for c in busy:
            sock = c.sock
            if sock is not None:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass  # already closed
        return len(busy)

    @property
    def busy(self) -> int:
        """Requests in flight."""
        with self._lock:
            return len(self._busy)

    def _connect(self, conn: http.client.HTTPConnection, sock_timeout: Optional[float]) -> None:
        """Opens a new connection within ``connect_timeout``, then gives it the request's timeout."""
        if conn.sock is not None:
            return
        conn.timeout = self.connect_timeout if self.connect_timeout is not None else sock_timeout
        conn.connect()
        conn.timeout = sock_timeout
        if conn.sock is not None:
            conn.sock.settimeout(sock_timeout)

    # -- requests ------------------------------------------------------------------------------

    def url(self, path: str, query: Optional[Mapping[str, Any]] = None) -> str:
        q = {k: _query_value(v) for k, v in (query or {}).items() if v is not None}
        return self._prefix + path + (("?" + urllib.parse.urlencode(q)) if q else "")

    def headers(self, extra: Optional[Mapping[str, str]] = None) -> Dict[str, str]:
        h = {"User-Agent": USER_AGENT, "Accept": "application/json"}
        if self.token:
            h["Authorization"] = f"Bearer {self.token}"
        h.update(extra or {})
        return h

    def request(
        self,
        method: str,
        path: str,
        *,
        query: Optional[Mapping[str, Any]] = None,
        json_body: Any = None,
        body: Body = None,
        content_type: Optional[str] = None,
        timeout: Optional[float] = None,
        retry_capacity: Optional[bool] = None,
        stream: Optional[Callable[[http.client.HTTPResponse], Any]] = None,
    ) -> Response:
        """Sends one request and returns the response read to its end; any status >= 400 raises its
        typed error. With ``stream``, a 2xx response is handed to it unread and its return value is
        the (body-less) Response's ``streamed``. A 429 is retried after its Retry-After for up to
        ``retry_on_capacity`` seconds (unless ``retry_capacity`` is False)."""
        deadline = time.monotonic() + (self.retry_on_capacity if retry_capacity is not False else 0.0)
        start = body.tell() if body is not None and not isinstance(body, bytes) else 0
        while True:
            if body is not None and not isinstance(body, bytes):
                body.seek(start)  # a retried request sends its file body from the same place
            try:
                return self._once(method, path, query, json_body, body, content_type, timeout, stream)
            except CapacityError as e:
                wait = e.retry_after if e.retry_after is not None else 1.0
                if retry_capacity is False or time.monotonic() + wait > deadline:
                    raise
                time.sleep(wait)

    def _once(
        self,
        method: str,
        path: str,
        query: Optional[Mapping[str, Any]],
        json_body: Any,
        body: Body,
        content_type: Optional[str],
        timeout: Optional[float],
        stream: Optional[Callable[[http.client.HTTPResponse], Any]],
    ) -> Response:
        extra: Dict[str, str] = {}
        payload: Body = body
        if json_body is not None:
            payload = json.dumps(json_body).encode("utf-8")
            extra["Content-Type"] = "application/json"
        elif content_type is not None:
            extra["Content-Type"] = content_type
        if payload is not None and not isinstance(payload, bytes):
            # a file body: http.client sends it in blocks; the server wants its length up front
            pos = payload.tell()
            payload.seek(0, os.SEEK_END)
            extra["Content-Length"] = str(payload.tell() - pos)
            payload.seek(pos)
        start = payload.tell() if payload is not None and not isinstance(payload, bytes) else 0
        target = self.url(path, query)
        sock_timeout = timeout if timeout is not None else self.timeout
        for attempt in (0, 1):
            conn, reused = self._take(sock_timeout)
            with self._lock:
                self._busy.add(conn)
            try:
                if attempt == 1 and payload is not None and not isinstance(payload, bytes):
                    payload.seek(start)
                self._connect(conn, sock_timeout)
                conn.request(method, target, body=payload, headers=self.headers(extra))
                resp = conn.getresponse()
            except _STALE as e:
                self._drop(conn)
                if reused and attempt == 0:
                    continue
                raise _failed(f"{method} {self.base_url}{target}: connection failed: {e}", "TRANSPORT", True) from e
            except (OSError, http.client.HTTPException) as e:
                connected, waited = conn.sock is not None, conn.timeout
                self._drop(conn)
                if isinstance(e, socket.timeout):
                    what = "no answer" if connected else "no connection"
                    raise _failed(f"{method} {self.base_url}{target}: {what} within {waited}s", "TIMEOUT", connected) from e
                raise _failed(f"{method} {self.base_url}{target}: {e}", "TRANSPORT", connected) from e
            except BaseException:
                self._drop(conn)
                raise
            break
        try:
            headers = {k.lower(): v for k, v in resp.getheaders()}
            if resp.status < 400 and stream is not None:
                out = Response(resp.status, headers, b"")
                out.streamed = stream(resp)
                resp.read()  # what the reader left (tar padding): the connection must end clean
            else:
                out = Response(resp.status, headers, resp.read())
        except (OSError, http.client.HTTPException) as e:
            self._drop(conn)
            if isinstance(e, socket.timeout):
                raise _failed(f"{method} {self.base_url}{target}: no answer within {sock_timeout}s", "TIMEOUT", True) from e
            raise _failed(f"{method} {self.base_url}{target}: {e}", "TRANSPORT", True) from e
        except BaseException:
            self._drop(conn)
            raise
        with self._lock:
            self._busy.discard(conn)
        if resp.will_close:
            conn.close()
        else:
            self._give_back(conn)
        if out.status >= 400:
            raise self._error(out)
        return out

    def _drop(self, conn: http.client.HTTPConnection) -> None:
        with self._lock:
            self._busy.discard(conn)
        conn.close()

    @staticmethod
    def _error(r: Response) -> MinisandboxError:
        try:
            body = r.json()
        except ValueError:
            body = None
        ra = r.headers.get("retry-after")
        try:
            retry_after = float(ra) if ra is not None else None
        except ValueError:
            retry_after = None
        return error_from_response(r.status, body if isinstance(body, dict) else None, retry_after, r.text[:500])


def _failed(message: str, code: str, sent: bool) -> TransportError:
    """A transport failure; ``sent`` is False when no connection was made, so the server cannot
    have seen the request (sending it again is safe)."""
    e = TransportError(message, code=code)
    e.sent = sent
    return e


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)
