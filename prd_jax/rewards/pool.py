"""Shared subprocess machinery of the reward functions (math and code).

Two pieces, used by both `rewards.math` and `rewards.code`:

* :func:`parallel_map`: ``fn`` over items on a bounded thread pool, results in input
  order. The threads only drive subprocesses (a math_verify worker, a code sandbox), so
  the GIL is not the limit; ``workers`` bounds how many subprocesses run at once. A batch
  of 256 programs is never run one after another.
* :class:`WorkerPool`: persistent helper processes (``python -c <src> *args``) that answer
  one JSON request per line with one JSON reply per line. A call waits with ``poll`` for
  ``timeout_s``; on expiry the worker is SIGKILLed (its whole session) and the call returns
  None, so a stuck C-level computation never blocks the caller. The first line a worker
  writes is ``{"ready": bool}`` (start-up is not charged to ``timeout_s``). Idle workers
  are reused (at most ``max_idle``), dropped in a forked child (they belong to the parent)
  and closed at exit.

Ours: neither paper specifies the reward infrastructure.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Iterable, Optional, Sequence

__all__ = ["WorkerUnavailable", "WorkerPool", "default_workers", "parallel_map"]

MAX_WORKERS = 16


def default_workers(n_items: int, cap: int = MAX_WORKERS) -> int:
    """Parallelism for ``n_items`` subprocess jobs: min(items, CPUs, cap), at least 1."""
    return max(1, min(n_items, os.cpu_count() or 1, cap))


def parallel_map(fn: Callable[[Any], Any], items: Iterable[Any], workers: Optional[int] = None) -> list:
    """``[fn(x) for x in items]`` on at most ``workers`` threads (default :func:`default_workers`),
    in input order. ``workers=1`` runs inline. Exceptions propagate."""
    items = list(items)
    if not items:
        return []
    if workers is not None and (not isinstance(workers, int) or workers < 1):
        raise ValueError(f"workers={workers!r}; allowed: None or an int >= 1")
    n = min(workers or default_workers(len(items)), len(items))
    if n == 1:
        return [fn(x) for x in items]

    with ThreadPoolExecutor(max_workers=n) as pool:
        return list(pool.map(fn, items))


class WorkerUnavailable(Exception):
    """The worker process cannot be started, or reported ``{"ready": false}``."""


class _Worker:
    """One persistent helper process (JSON lines over pipes)."""

    def __init__(self, src: str, args: Sequence[str], startup_timeout_s: float):
        if os.name != "posix" or not hasattr(select, "poll") or not sys.executable:
            raise WorkerUnavailable("needs POSIX poll() and sys.executable")
        self.owner_pid = os.getpid()
        self.startup_timeout_s = startup_timeout_s
        try:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", src, *map(str, args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL, close_fds=True, start_new_session=True)
        except OSError as e:
            raise WorkerUnavailable(str(e)) from e
        self.ready = False
        self.dead = False
        self._buf = b""

    def _readline(self, deadline: float) -> Optional[bytes]:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            poller = select.poll()  # not select(): no FD_SETSIZE limit
            poller.register(fd, select.POLLIN | select.POLLHUP | select.POLLERR)
            if not poller.poll(max(1, int(remaining * 1000))):
                return None
            chunk = os.read(fd, 65536)
            if not chunk:
                self.dead = True
                return None
            self._buf += chunk
        line, self._buf = self._buf.split(b"\n", 1)
        return line

    def call(self, request: dict, timeout_s: float) -> Optional[dict]:
        """The worker's reply to ``request``; None on timeout or worker death (then it is killed)."""
        if not self.ready:
            line = self._readline(time.monotonic() + self.startup_timeout_s)
            if line is None or not json.loads(line).get("ready"):
                self.kill()
                raise WorkerUnavailable("worker failed to start")
            self.ready = True
        try:
            os.write(self.proc.stdin.fileno(), (json.dumps(request) + "\n").encode())
        except OSError:
            self.kill()
            return None
        line = self._readline(time.monotonic() + timeout_s)
        if line is None:
            self.kill()
            return None
        try:
            reply = json.loads(line)
        except ValueError:
            self.kill()
            return None
        return reply if isinstance(reply, dict) else None

    def kill(self) -> None:
        self.dead = True
        try:
            os.killpg(self.proc.pid, 9)
        except (ProcessLookupError, PermissionError, OSError):
            pass
        try:
            self.proc.kill()
            self.proc.wait(timeout=5)
        except Exception:  # noqa: BLE001
            pass
        self._close_pipes()

    def close(self) -> None:
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=1)
        except Exception:  # noqa: BLE001
            self.kill()
        self._close_pipes()

    def _close_pipes(self) -> None:
        for f in (self.proc.stdin, self.proc.stdout):
            try:
                f.close()
            except Exception:  # noqa: BLE001
                pass


_POOLS: "weakref.WeakSet[WorkerPool]" = weakref.WeakSet()


class WorkerPool:
    """Persistent JSON-line helper processes running ``src`` (see the module docstring)."""

    def __init__(self, src: str, args: Sequence[Any] = (), *, max_idle: int = 8,
                 startup_timeout_s: float = 60.0):
        self.src, self.args = src, tuple(str(a) for a in args)
        self.max_idle, self.startup_timeout_s = max_idle, startup_timeout_s
        self._lock = threading.Lock()
        self._idle: list[_Worker] = []
        self._pid = os.getpid()
        _POOLS.add(self)

    def _new(self) -> _Worker:
        return _Worker(self.src, self.args, self.startup_timeout_s)

    def _acquire(self) -> _Worker:
        with self._lock:
            if os.getpid() != self._pid:  # forked child: the idle workers are the parent's
                self._idle.clear()
                self._pid = os.getpid()
            if self._idle:
                return self._idle.pop()
        return self._new()

    def _release(self, w: _Worker) -> None:
        with self._lock:
            if not w.dead and w.owner_pid == os.getpid() and len(self._idle) < self.max_idle:
                self._idle.append(w)
                return
        if not w.dead:
            w.close()

    def call(self, request: dict, timeout_s: float) -> Optional[dict]:
        """One request to an idle (or new) worker; None on timeout (the worker is replaced in
        the background). Raises WorkerUnavailable when no worker can start."""
        w = self._acquire()
        reply = w.call(request, timeout_s)
        if w.dead:
            try:  # start a replacement now so the next call is warm
                self._release(self._new())
            except WorkerUnavailable:
                pass
        else:
            self._release(w)
        return reply

    @property
    def idle(self) -> int:
        """Number of idle workers held."""
        with self._lock:
            return len(self._idle)

    def shutdown(self) -> None:
        """Close every idle worker (this process's only)."""
        with self._lock:
            workers = list(self._idle) if os.getpid() == self._pid else []
            self._idle.clear()
        for w in workers:
            w.close()


@atexit.register
def _shutdown_all() -> None:
    for pool in list(_POOLS):
        pool.shutdown()
