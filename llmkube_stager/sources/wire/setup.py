"""One bound on the whole connection set-up: TCP, the proxy's CONNECT, TLS
(#29 item 4), as `curl --connect-timeout` bounds it.

Every client the agent uses (http.client on the data path, urllib3 under
botocore, httpcore under the hub API's httpx) applies its connect timeout
to each socket operation: a proxy that answers CONNECT one byte a second,
or a TLS peer that dribbles its handshake, gives every read a byte in time
and holds the pod for ever. None of them can take a deadline for the set-up
as a whole, so the deadline is kept here: once the socket exists, a timer
shuts it down when `LLMKUBE_CONNECT_TIMEOUT` has passed since the set-up
began, unless the set-up finished first. The blocked read then returns
(EOF), the client raises whatever it raises for a vanished peer, and the
caller, seeing `expired`, reports a connect timeout instead (`SetupTimeout`).

A shut-down socket is never reused: the deadline is only ever armed on a
connection that is still being set up, and `done` disarms it under the same
lock the timer takes.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator


class SetupTimeout(TimeoutError):
    """The set-up did not finish within the connect timeout."""

    def __init__(self, limit_s: float) -> None:
        super().__init__(f"connection set-up (TCP, CONNECT, TLS) longer than {limit_s:g}s")


class SetupDeadline:
    """The end of one connection's set-up, `limit_s` from now."""

    def __init__(self, limit_s: float) -> None:
        self.limit_s = limit_s
        self._ends = time.monotonic() + limit_s
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._watched: socket.socket | None = None
        self._done = False
        self.expired = False

    def watch(self, sock: socket.socket) -> None:
        """Shut `sock`'s connection down at the deadline, unless `done`
        comes first. Through a duplicate descriptor: TLS detaches the
        socket object it wraps (its own descriptor becomes -1), and the
        duplicate's number cannot be reused by another connection before
        `done` closes it."""
        with self._lock:
            if self._done or self._watched is not None:
                return
            self._watched = sock.dup()
            remaining_s = max(0.0, self._ends - time.monotonic())
            self._timer = threading.Timer(remaining_s, self._expire)
            self._timer.daemon = True
            self._timer.start()

    def _expire(self) -> None:
        with self._lock:
            if self._done or self._watched is None:
                return
            self.expired = True
            # shutdown, not close: the client still owns its descriptor, and
            # its blocked recv (or handshake) returns at once with EOF.
            with contextlib.suppress(OSError):
                self._watched.shutdown(socket.SHUT_RDWR)

    def done(self) -> None:
        """The set-up finished (or failed): the connection is the client's."""
        with self._lock:
            self._done = True
            timer, watched, self._watched = self._timer, self._watched, None
        if timer is not None:
            timer.cancel()
        if watched is not None:
            watched.close()


@contextlib.contextmanager
def bounded_setup(limit_s: float) -> Iterator[SetupDeadline]:
    """`with bounded_setup(connect_s) as deadline:` set up a connection,
    `deadline.watch(sock)` as soon as the socket exists. A failure after
    the deadline expired is a `SetupTimeout`."""
    deadline = SetupDeadline(limit_s)
    try:
        yield deadline
    except Exception as exc:
        if deadline.expired:
            raise SetupTimeout(limit_s) from exc
        raise
    finally:
        deadline.done()
