"""Sandboxed execution rewards for code tasks (V1, arXiv 2603.04304: code rewards).

Public API: :func:`evaluate`, :func:`evaluate_many`, :func:`count_tests`, :class:`CodeResult`,
:func:`isolation`, :func:`available_isolations`, :data:`STATUSES`.

Kinds of tests
--------------
* ``kind="assert"`` (HumanEval / MBPP): ``tests`` is either a test module
  source defining ``check(candidate)`` (HumanEval ``test`` field; give
  ``entry_point``), a module source with top-level asserts, or a list of
  assert strings.  Every top-level statement of ``check``'s body that
  contains a non-constant ``assert`` (so ``assert True, "..."`` is skipped) is
  one test; other statements are set-up, run in order.  A list gives one test
  per string.
* ``kind="stdio"``: ``tests`` is a list of ``{"input": str, "output": str}``;
  the program runs once per case with ``input`` on stdin and passes the case
  when it exits with status 0 and stdout equals ``output`` up to line endings,
  trailing whitespace on each line and trailing blank lines.  Cases after a
  timed-out case are not run (they count as failed).
* The case kinds (contest problems; V1 arXiv 2603.04304 §4 evaluates on
  LiveCodeBench and CodeContests): one sandboxed runner process serves all
  cases of a problem, each case under its own ``timeout_s`` (a fresh runner
  starts only when one died).  ``kind="stdin"``: ``tests`` is a list of
  ``{"input": str, "output": str}``; each case re-runs the program as
  ``__main__`` with the input on fd 0 and compares stdout with
  :func:`outputs_match` (``compare="lines"``, LiveCodeBench's checker, or
  ``"tokens"`` with ``float_tol``, CodeContests).  ``kind="functional"``:
  ``tests`` is a list of ``{"args": list, "expected": value}``; the program
  loads once and each case calls ``Solution().<entry_point>(*args)`` (or the
  function ``entry_point``), the judge comparing the returned value (tuples as
  lists) with ``expected``.  ``stop_on_failure`` (default) stops at the first
  failed case; after a time-out or a compile error no case runs.

Statuses (``CodeResult.status``): ``"ok"`` every test passed; ``"failed"``
some test failed, nothing abnormal; ``"timeout"`` wall-clock (``timeout_s``)
or CPU limit hit; ``"memory"`` ``MemoryError`` under the address-space limit
(``memory_mb``); ``"output_limit"`` stdout + stderr over ``max_output_bytes``
(the sandbox is killed); ``"error"`` the program did not load (syntax error,
exception or ``exit()`` at import, missing entry point), crashed, broke the
protocol, or exited non-zero (stdio).  The case kinds separate the outcomes
of the first failed case instead: ``"wrong_answer"``, ``"runtime_error"`` (an
exception, a non-zero exit or a crash), ``"compile_error"`` (the program does
not compile), ``"timeout"``, ``"memory"``, ``"output_limit"`` (``"error"``
only for a sandbox failure).  Counts, not the status, are the reward.

Unforgeable counting
--------------------
Three processes per evaluation: the caller, a trusted *judge* (this file run
as a script, fresh per evaluation, clean environment) and the untrusted
*runner* in the sandbox.  For asserts the judge runs the test code itself;
``candidate`` (and any program function the tests name, e.g. HumanEval's
``encode_cyclic``) is a proxy whose calls go over pipes to the runner, which
returns the value as tagged JSON of plain types (None, bool, int, float,
complex, str, bytes, list, tuple, dict, set, frozenset; iterators are
materialised; ints over 4300 digits are refused).  Every comparison thus
happens in the judge on plain values the program cannot patch: faking
``AssertionError``/builtins, ``__eq__`` always-true objects, printing
markers, writing forged frames or exiting early only ever yields wrong
values or missing replies, i.e. failures.  (Helpers the tests take from the
program, like ``encode_cyclic``, are the program's, as in the reference
harness.)  For stdio the judge compares the bytes the program wrote.  The
judge echoes a random nonce sent over its stdin; the caller rejects results
without it.

Isolation (:func:`isolation`, detected once by running a probe):
``"bwrap"`` bubblewrap with every namespace unshared (user, pid, net, ipc,
uts, cgroup, mount), uid 65534 and no capabilities where user namespaces
work, a read-only root holding only ``/usr`` and friends, the interpreter's
prefixes and a few ``/etc`` files (the rest of the repo, data sets,
``/root`` and ``/home`` are invisible), fresh ``/proc`` and ``/dev``, a size-capped private
tmpfs at ``/tmp`` with the cwd ``/tmp/work``; ``"unshare"`` the same layout
built by the runner itself (``unshare --mount --net --pid --ipc --uts
--fork``, then ``pivot_root`` and a drop to uid 65534); ``"rlimits"`` (with
a ``warnings.warn``) only the limits below, a private temp dir as cwd, a
process group and, when root and the interpreter is usable by it, uid 65534.
In every mode: a clean environment, ``RLIMIT_CPU``, ``RLIMIT_AS``,
``RLIMIT_FSIZE``, ``RLIMIT_NOFILE``, no core files, a wall-clock deadline,
capped output, and at the end the sandbox's process group is SIGKILLed and
the judge (a child subreaper) kills and reaps every orphan, so no child
outlives the call.  ``PRD_CODE_SANDBOX`` forces a mode.  Linux only.
"""

from __future__ import annotations

import ast
import builtins
import ctypes
import dataclasses
import decimal
import inspect
import json
import math
import os
import random
import re
import resource
import secrets
import selectors
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Any, Iterable, Mapping, Sequence

from prd_jax.rewards.pool import parallel_map

__all__ = ["CASE_KINDS", "COMPARES", "CodeResult", "STATUSES", "available_isolations", "count_tests", "evaluate",
           "evaluate_many", "isolation", "outputs_match"]

STATUSES = ("ok", "failed", "timeout", "memory", "error", "output_limit", "wrong_answer", "runtime_error",
            "compile_error")
CASE_KINDS = ("stdin", "functional")  # one runner process serves many cases (contest problems)
COMPARES = ("lines", "tokens")
MODES = ("bwrap", "unshare", "rlimits")

_THIS_FILE = os.path.abspath(__file__)
_SAFE_PATH = "/usr/local/bin:/usr/bin:/bin"
_SANDBOX_UID = 65534  # nobody
_STARTUP_LIMIT_S = 15.0  # sandbox + interpreter start-up, not charged to the program
_FILE_LIMIT = 64 << 20  # RLIMIT_FSIZE and private /tmp size
_MAX_FRAME = 16 << 20  # largest message the judge accepts from the runner
_DETAIL_CHARS = 600


@dataclasses.dataclass(frozen=True)
class CodeResult:
    """Outcome of one evaluation: ``passed`` of ``total`` tests, a status and a short detail."""

    passed: int
    total: int
    status: str
    detail: str = ""

    @property
    def reward(self) -> float:
        """Fraction of tests passed (0 when there are none)."""
        return self.passed / self.total if self.total else 0.0

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


# --------------------------------------------------------------------------
# Value codec.  Shipped verbatim to the runner (inspect.getsource), so these
# functions only use their own imports.
# --------------------------------------------------------------------------

def _enc(x, depth=0):
    """Encode a value as tagged JSON of plain types; raise TypeError otherwise."""
    import numbers  # this function's source also runs in the sandboxed runner (_runner_source)
    if depth > 100:
        raise ValueError("value nested too deeply")
    d = depth + 1
    if x is None or isinstance(x, bool):
        return None if x is None else bool(x)
    if isinstance(x, int):
        return int(x)
    if isinstance(x, float):
        return {"F": repr(float(x))}
    if isinstance(x, str):
        return str.__str__(x)
    if isinstance(x, list):
        return [_enc(v, d) for v in x]
    if isinstance(x, tuple):
        return {"t": [_enc(v, d) for v in x]}
    if isinstance(x, dict):
        return {"d": [[_enc(k, d), _enc(v, d)] for k, v in x.items()]}
    if isinstance(x, frozenset):
        return {"f": [_enc(v, d) for v in x]}
    if isinstance(x, set):
        return {"s": [_enc(v, d) for v in x]}
    if isinstance(x, (bytes, bytearray)):
        return {"b": bytes(x).hex()}
    if isinstance(x, complex):
        return {"c": [repr(x.real), repr(x.imag)]}
    if isinstance(x, range):
        return {"r": [x.start, x.stop, x.step]}
    if isinstance(x, numbers.Integral):
        return int(x)
    if isinstance(x, numbers.Real):
        return {"F": repr(float(x))}
    if hasattr(type(x), "__next__") and hasattr(type(x), "__iter__"):
        items = []
        for v in x:
            items.append(_enc(v, d))
            if len(items) > 1_000_000:
                raise ValueError("iterator too long")
        return {"g": items}
    raise TypeError("unsupported value type " + type(x).__name__)


def _dec(x):
    """Inverse of :func:`_enc`; builds plain Python values only."""
    if isinstance(x, list):
        return [_dec(v) for v in x]
    if not isinstance(x, dict):
        if x is None or type(x) in (bool, int, str):
            return x
        raise ValueError("bad value")
    if len(x) != 1:
        raise ValueError("bad tagged value")
    (tag, v), = x.items()
    if tag == "F":
        return float(v)
    if tag == "t":
        return tuple(_dec(e) for e in v)
    if tag == "d":
        return {_dec(k): _dec(e) for k, e in v}
    if tag == "s":
        return {_dec(e) for e in v}
    if tag == "f":
        return frozenset(_dec(e) for e in v)
    if tag == "b":
        return bytes.fromhex(v)
    if tag == "c":
        return complex(float(v[0]), float(v[1]))
    if tag == "r":
        return range(int(v[0]), int(v[1]), int(v[2]))
    if tag == "g":
        return iter([_dec(e) for e in v])
    raise ValueError("unknown tag")


# --------------------------------------------------------------------------
# Runner (untrusted side).  Also shipped as source; runs as
# ``python -I -B -c <src> RFD WFD`` inside the sandbox.
# --------------------------------------------------------------------------

def _ns_setup(spec):
    """'unshare' mode: build the sandbox root (as root in fresh namespaces) and drop to uid 65534."""
    import ctypes
    import os
    import platform
    libc = ctypes.CDLL(None, use_errno=True)
    MS_RDONLY, MS_NOSUID, MS_NODEV, MS_NOEXEC = 1, 2, 4, 8
    MS_REMOUNT, MS_BIND, MS_REC, MS_PRIVATE = 32, 4096, 16384, 1 << 18

    def mount(src, tgt, fstype, flags, data=None):
        enc = (lambda s: None if s is None else s.encode())
        if libc.mount(enc(src), enc(tgt), enc(fstype), ctypes.c_ulong(flags), enc(data)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, "mount %s -> %s: %s" % (src, tgt, os.strerror(err)))

    mount(None, "/", None, MS_REC | MS_PRIVATE)
    root = spec["root"]
    mount("tmpfs", root, "tmpfs", MS_NOSUID | MS_NODEV, "mode=0755,size=16m")
    for path in spec["binds"]:
        dst = root + path
        if os.path.isdir(path):
            os.makedirs(dst, exist_ok=True)
        else:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            open(dst, "w").close()
        mount(path, dst, None, MS_BIND | MS_REC)
        mount(None, dst, None, MS_REMOUNT | MS_BIND | MS_RDONLY | MS_NOSUID | MS_NODEV)
    for target, path in spec["symlinks"]:
        os.makedirs(os.path.dirname(root + path), exist_ok=True)
        os.symlink(target, root + path)
    os.makedirs(root + "/dev", exist_ok=True)
    mount("tmpfs", root + "/dev", "tmpfs", MS_NOSUID | MS_NOEXEC, "mode=0755,size=1m")
    for name in ("null", "zero", "full", "random", "urandom"):
        open(root + "/dev/" + name, "w").close()
        mount("/dev/" + name, root + "/dev/" + name, None, MS_BIND)
    for i, name in enumerate(("stdin", "stdout", "stderr")):
        os.symlink("/proc/self/fd/%d" % i, root + "/dev/" + name)
    os.symlink("/proc/self/fd", root + "/dev/fd")
    os.makedirs(root + "/proc", exist_ok=True)
    mount("proc", root + "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    os.makedirs(root + "/tmp", exist_ok=True)
    mount("tmpfs", root + "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777,size=%d" % spec["tmp_size"])
    os.makedirs(root + "/tmp/work")
    os.chown(root + "/tmp/work", spec["uid"], spec["uid"])
    os.chdir(root)
    os.makedirs(root + "/.old")
    nr = {"x86_64": 155, "aarch64": 41, "ppc64le": 203, "s390x": 217}.get(platform.machine())
    if nr is not None and libc.syscall(nr, b".", b".old") == 0:
        os.chroot(".")
        libc.umount2(b"/.old", 2)  # MNT_DETACH
        os.rmdir("/.old")
    else:  # unknown arch: chroot (no way back without CAP_SYS_CHROOT, dropped below)
        os.chroot(".")
    mount(None, "/", None, MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
    os.chdir("/tmp/work")
    os.setgroups([])
    os.setgid(spec["uid"])
    os.setuid(spec["uid"])
    libc.prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
    child = os.fork()  # stay as the namespace's init (pid 1): reap, then exit with the program's status
    if child:
        os.closerange(3, 4096)
        devnull = os.open("/dev/null", os.O_RDWR)
        for fd in (0, 1, 2):
            os.dup2(devnull, fd)
        while True:
            pid, status = os.wait()
            if pid == child:
                os._exit(os.WEXITSTATUS(status) if os.WIFEXITED(status) else 128 + os.WTERMSIG(status))


def _runner_main(rfd, wfd):
    """Untrusted side: load the program, then answer calls (assert), just run it (stdio), or
    serve one case per request (the case kinds, `run_cases`)."""
    import builtins
    import io
    import json
    import os
    import struct
    import sys
    import threading

    def read_exact(n):
        chunks = []
        while n:
            b = os.read(rfd, min(n, 1 << 20))
            if not b:
                raise EOFError
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)

    def recv():
        (n,) = struct.unpack(">I", read_exact(4))
        return json.loads(read_exact(n))

    def send(obj):
        data = json.dumps(obj).encode()
        data = struct.pack(">I", len(data)) + data
        while data:
            data = data[os.write(wfd, data):]

    def text(e):
        try:
            return str(e)[:300]
        except BaseException:  # noqa: BLE001
            return "?"

    def run_cases():  # closure: the runner source has no module-level imports
        """Untrusted side of the case kinds: compile once, then run one case per request.

        "stdin": each case re-runs the program as ``__main__`` with the case's input on fd 0 (a
        memfd, so ``input()``, ``sys.stdin`` and ``open(0)`` all see it) and stdout flushed into the
        judge's pipe; "functional": the program loads once and each case calls
        ``Solution().<entry_point>(*args)`` (or the top-level function ``entry_point``).
        """
        try:
            code = compile(cfg["program"], "solution.py", "exec")
        except BaseException as e:  # noqa: BLE001 - SyntaxError, ValueError (NUL bytes), RecursionError, ...
            send({"t": "compile_error", "exc": type(e).__name__, "msg": text(e)})
            return
        functional = cfg["kind"] == "functional"
        g = {"__name__": "solution", "__builtins__": builtins}
        if functional:
            try:
                exec(code, g)
            except BaseException as e:  # noqa: BLE001 - reported to the judge
                send({"t": "load_error", "exc": type(e).__name__, "msg": text(e)})
                return
        saved_out, saved_err = os.dup(1), os.dup(2)  # the judge's pipes, restored at each case
        send({"t": "ready"})

        def finish_threads():
            for t in threading.enumerate():
                if t is not threading.main_thread() and not t.daemon:
                    t.join()

        while True:
            try:
                msg = recv()
            except EOFError:
                return
            exc = None
            value = None
            try:
                if functional:
                    cls = g.get("Solution")
                    fn = getattr(cls(), cfg["entry_point"]) if isinstance(cls, type) else g[cfg["entry_point"]]
                    value = _enc(fn(*[_dec(a) for a in msg["args"]]))
                else:
                    os.dup2(saved_out, 1)  # a program may have closed them (open(1, "w") closes on exit)
                    os.dup2(saved_err, 2)
                    data = msg["stdin"].encode("utf-8", "replace")
                    fd = os.memfd_create("stdin")  # fd 0 itself when the last case closed it (open(0))
                    view = memoryview(data)
                    while view:
                        view = view[os.write(fd, view):]
                    os.lseek(fd, 0, os.SEEK_SET)
                    if fd != 0:
                        os.dup2(fd, 0)
                        os.close(fd)
                    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "rb", closefd=False)),
                                                 encoding="utf-8", errors="replace")
                    sys.stdout = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "wb", closefd=False)),
                                                  encoding="utf-8", errors="replace", line_buffering=False)
                    exec(code, {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"})
                    finish_threads()
            except SystemExit as e:
                finish_threads()
                if not (e.code is None or e.code == 0):
                    exc = ("SystemExit", "exit status %s" % (e.code,))
            except BaseException as e:  # noqa: BLE001 - reported to the judge
                exc = (type(e).__name__, text(e))
            if not functional:
                try:
                    sys.stdout.flush()
                except BaseException:  # noqa: BLE001 - e.g. the program closed stdout
                    pass
            if exc is None:
                send({"t": "done", "v": value} if functional else {"t": "done"})
            else:
                send({"t": "exc", "exc": exc[0], "msg": exc[1]})

    cfg = recv()
    if cfg.get("ns"):
        _ns_setup(cfg["ns"])
    send({"t": "up"})
    src = cfg["program"]
    if cfg["kind"] in CASE_KINDS:
        run_cases()
        sys.stdout.flush()
        os._exit(0)
    if cfg["kind"] == "stdio":
        os.close(rfd)
        os.close(wfd)
        sys.argv = ["solution.py"]
        g = {"__name__": "__main__", "__builtins__": builtins, "__file__": "solution.py"}
        exec(compile(src, "solution.py", "exec"), g)
        return
    g = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(compile(src, "solution.py", "exec"), g)
    except BaseException as e:  # noqa: BLE001 - reported to the judge
        send({"t": "load_error", "exc": type(e).__name__, "msg": text(e)})
        sys.stdout.flush()
        os._exit(0)
    callables = [k for k, v in list(g.items()) if isinstance(k, str) and callable(v)]
    modules = {k: v.__name__ for k, v in list(g.items())
               if isinstance(k, str) and type(v) is type(sys) and isinstance(getattr(v, "__name__", None), str)}
    send({"t": "ready", "callables": callables, "modules": modules})
    while True:
        try:
            msg = recv()
        except EOFError:
            break
        try:
            fn = g[msg["name"]]
            args = [_dec(a) for a in msg["args"]]
            kwargs = {k: _dec(v) for k, v in msg["kwargs"].items()}
            reply = {"t": "ret", "id": msg["id"], "v": _enc(fn(*args, **kwargs))}
        except BaseException as e:  # noqa: BLE001 - reported to the judge
            reply = {"t": "exc", "id": msg["id"], "exc": type(e).__name__, "msg": text(e)}
        send(reply)
    try:
        sys.stdout.flush()
    finally:
        os._exit(0)


_RUNNER_SRC: str | None = None


def _runner_source() -> str:
    global _RUNNER_SRC
    if _RUNNER_SRC is None:
        parts = [inspect.getsource(f) for f in (_enc, _dec, _ns_setup, _runner_main)]
        _RUNNER_SRC = ("import sys\nCASE_KINDS = %r\n" % (CASE_KINDS,) + "\n".join(parts)
                       + "\n_runner_main(int(sys.argv[1]), int(sys.argv[2]))\n")
    return _RUNNER_SRC


# --------------------------------------------------------------------------
# Test planning (shared by caller and judge).
# --------------------------------------------------------------------------

def _has_real_assert(node: ast.AST) -> bool:
    for n in ast.walk(node):
        if isinstance(n, ast.Assert) and not (isinstance(n.test, ast.Constant) and n.test.value):
            return True
    return False


_AST_LOCK = threading.Lock()


def parse_source(source: str) -> ast.Module:
    """``ast.parse`` under a process-wide lock: CPython 3.11's AST converter keeps a shared recursion
    counter, and two threads parsing at once (``evaluate_many``'s pool) can fail with
    ``SystemError: AST constructor recursion depth mismatch``."""
    with _AST_LOCK:
        return ast.parse(source)


def _plan_assert(tests, entry_point):
    """-> (prelude stmts, [(stmts, counted)], check param name or None)."""
    if isinstance(tests, str):
        try:
            mod = parse_source(tests)
        except SyntaxError as e:
            raise ValueError(f"test source does not parse: {e}") from None
        check = next((s for s in mod.body if isinstance(s, ast.FunctionDef) and s.name == "check"), None)
        if check is not None:
            params = [a.arg for a in check.args.posonlyargs + check.args.args]
            if params and entry_point is None:
                raise ValueError("entry_point is required for tests defining check(candidate)")
            steps = [([s], _has_real_assert(s)) for s in check.body]
            return mod.body, steps, (params[0] if params else None)
        return [], [([s], _has_real_assert(s)) for s in mod.body], None
    if isinstance(tests, Sequence) and all(isinstance(t, str) for t in tests):
        steps = []
        for t in tests:
            try:
                steps.append((parse_source(t).body, True))
            except SyntaxError as e:
                raise ValueError(f"test does not parse: {t!r}: {e}") from None
        return [], steps, None
    raise ValueError("assert tests must be a test source string or a list of assert strings")


def _check_stdio(tests) -> list[dict]:
    if isinstance(tests, (str, bytes)) or not isinstance(tests, Iterable):
        raise ValueError("stdio tests must be a list of {'input': str, 'output': str}")
    cases = []
    for t in tests:
        if not isinstance(t, Mapping) or not isinstance(t.get("input"), str) or not isinstance(t.get("output"), str):
            raise ValueError("stdio tests must be a list of {'input': str, 'output': str}")
        cases.append({"input": t["input"], "output": t["output"]})
    return cases


def _check_functional(tests, entry_point) -> list[dict]:
    if not isinstance(entry_point, str) or not entry_point.isidentifier():
        raise ValueError(f"functional tests need entry_point, the method or function name; got {entry_point!r}")
    if isinstance(tests, (str, bytes)) or not isinstance(tests, Iterable):
        raise ValueError("functional tests must be a list of {'args': list, 'expected': value}")
    cases = []
    for t in tests:
        if not isinstance(t, Mapping) or not isinstance(t.get("args"), (list, tuple)) or "expected" not in t:
            raise ValueError("functional tests must be a list of {'args': list, 'expected': value}")
        cases.append({"args": list(t["args"]), "expected": _as_lists(t["expected"])})
    return cases


def _check_cases(tests, kind, entry_point) -> list[dict]:
    return _check_functional(tests, entry_point) if kind == "functional" else _check_stdio(tests)


def _normalize_output(s: str) -> list[str]:
    lines = [ln.rstrip() for ln in s.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    while lines and not lines[-1]:
        lines.pop()
    return lines


# --------------------------------------------------------------------------
# Judge (trusted side): runs the sandbox and the tests.
# --------------------------------------------------------------------------

class _Gone(BaseException):
    """The sandbox is gone (timeout, output cap, crash); later calls fail too."""

    def __init__(self, status: str, detail: str):
        super().__init__(detail)
        self.status, self.detail = status, detail


class _CandidateError(Exception):
    """The program raised or returned something not transferable."""


def _prctl(option: int, arg: int) -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(option, arg, 0, 0, 0)
    except Exception:  # noqa: BLE001 - best effort hardening
        pass


def _child_preexec(limits, uid):
    """Runs in the forked child before exec (judge only; the judge is single-threaded)."""
    import resource
    os.setpgid(0, 0)  # own process group, killed as a whole; stays in the judge's session
    _prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the judge
    for res, val in limits:
        resource.setrlimit(res, (val, val))
    if uid is not None:
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)


def _layout() -> dict:
    """Paths visible (read-only) inside the namespaced sandboxes."""
    binds, symlinks = ["/usr"], []
    for top in ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"):
        if os.path.islink(top):
            symlinks.append([os.readlink(top), top])
        elif os.path.isdir(top):
            binds.append(top)
    exe_prefix = os.path.dirname(os.path.dirname(os.path.realpath(sys.executable)))
    for p in (sys.prefix, sys.exec_prefix, sys.base_prefix, sys.base_exec_prefix, exe_prefix):
        for q in {os.path.abspath(p), os.path.realpath(p)}:
            if q != "/" and os.path.isdir(q) and not any(q == b or q.startswith(b + "/") for b in binds):
                binds = [b for b in binds if not b.startswith(q + "/")] + [q]
    for f in ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/alternatives",
              "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts"):
        if os.path.exists(f):
            binds.append(f)
    return {"binds": binds, "symlinks": symlinks, "tmp_size": _FILE_LIMIT, "uid": _SANDBOX_UID}


def _bwrap_argv(userns: bool) -> list[str]:
    lay = _layout()
    argv = ["bwrap", "--unshare-all", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if userns:
        argv += ["--unshare-user", "--uid", str(_SANDBOX_UID), "--gid", str(_SANDBOX_UID), "--disable-userns"]
    for b in lay["binds"]:
        argv += ["--ro-bind", b, b]
    for target, path in lay["symlinks"]:
        argv += ["--symlink", target, path]
    argv += ["--proc", "/proc", "--dev", "/dev", "--size", str(_FILE_LIMIT), "--tmpfs", "/tmp",
             "--dir", "/tmp/work", "--chdir", "/tmp/work", "--hostname", "sandbox", "--remount-ro", "/", "--"]
    return argv


class _Box:
    """One sandboxed runner process, seen from the judge."""

    def __init__(self, cfg: dict, stdin_data: str | None = None):
        self.cfg = cfg
        self.cap = int(cfg["max_output_bytes"])
        self.nout = 0
        self.out = bytearray()
        self.err = bytearray()
        self.buf = bytearray()
        self.gone: _Gone | None = None
        self.workdir = None
        mode, opts = cfg["mode"], cfg["opts"]
        c2r_r, c2r_w = os.pipe()
        r2c_r, r2c_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        stdin = subprocess.DEVNULL
        if stdin_data is not None:
            stdin = os.memfd_create("stdin")
            os.write(stdin, stdin_data.encode("utf-8", "replace"))  # memfd: never blocks
            os.lseek(stdin, 0, os.SEEK_SET)
        ns = None
        uid = None
        if mode == "bwrap":
            launcher, home, cwd = _bwrap_argv(opts.get("userns", False)), "/tmp/work", "/"
        elif mode == "unshare":
            launcher = ["unshare", "--mount", "--net", "--pid", "--ipc", "--uts", "--fork", "--kill-child", "--"]
            home, cwd = "/tmp/work", "/"
            ns = dict(_layout(), root=opts["root"])
        else:
            launcher = []
            uid = opts.get("uid")
            self.workdir = home = cwd = tempfile.mkdtemp(prefix="run-", dir=cfg["workroot"])
            if uid is not None:
                os.chown(home, uid, uid)
        cpu = int(math.ceil(float(cfg.get("cpu_s") or cfg["timeout_s"]))) + 2
        limits = [(resource.RLIMIT_CPU, cpu), (resource.RLIMIT_AS, int(cfg["memory_mb"]) << 20),
                  (resource.RLIMIT_FSIZE, _FILE_LIMIT), (resource.RLIMIT_CORE, 0),
                  (resource.RLIMIT_NOFILE, 256)]
        env = {"PATH": _SAFE_PATH, "HOME": home, "TMPDIR": home, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8"}
        argv = launcher + [sys.executable, "-I", "-B", "-c", cfg["runner_src"], str(c2r_r), str(r2c_w)]
        self.t_start = time.monotonic()
        try:
            self.proc = subprocess.Popen(
                argv, stdin=stdin, stdout=out_w, stderr=err_w, pass_fds=(c2r_r, r2c_w), env=env, cwd=cwd,
                preexec_fn=lambda: _child_preexec(limits, uid))
        finally:
            for fd in (c2r_r, r2c_w, out_w, err_w):
                os.close(fd)
            if stdin_data is not None:
                os.close(stdin)
        self.wfd = c2r_w
        os.set_blocking(c2r_w, False)
        self.sel = selectors.DefaultSelector()
        self.open: dict[str, int] = {"rpc": r2c_r, "out": out_r, "err": err_r}
        for name, fd in self.open.items():
            self.sel.register(fd, selectors.EVENT_READ, name)
        deadline = self.t_start + _STARTUP_LIMIT_S
        self.send({"kind": cfg["kind"], "program": cfg["program"], "ns": ns, "entry_point": cfg.get("entry_point")},
                  deadline)
        up = self.recv(deadline)
        if up.get("t") != "up":
            raise self.abort("error", "sandbox protocol violation at start-up")
        self.deadline = time.monotonic() + float(cfg["timeout_s"])

    # -- I/O ---------------------------------------------------------------
    def send(self, obj: dict, deadline: float) -> None:
        data = json.dumps(obj).encode()
        data = struct.pack(">I", len(data)) + data
        while data:
            if self.gone:
                raise self.gone
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.abort("timeout", "time limit exceeded")
            try:
                data = data[os.write(self.wfd, data[:1 << 16]):]
            except BlockingIOError:
                self._poll(min(left, 0.01))  # keep draining output while the runner is busy
            except (BrokenPipeError, OSError):
                raise self.abort(*self._death("sandbox closed its input")) from None

    def _poll(self, timeout: float) -> None:
        for key, _ in self.sel.select(timeout):
            try:
                chunk = os.read(key.fd, 1 << 16)
            except BlockingIOError:
                continue
            if not chunk:
                self.sel.unregister(key.fd)
                os.close(key.fd)
                del self.open[key.data]
                continue
            if key.data == "rpc":
                self.buf += chunk
                if len(self.buf) > _MAX_FRAME + 4:
                    raise self.abort("error", "oversized message from sandbox")
                continue
            self.nout += len(chunk)
            if key.data == "out":
                self.out += chunk
            else:
                self.err = (self.err + chunk)[-4096:]
            if self.nout > self.cap:
                raise self.abort("output_limit", f"output exceeded {self.cap} bytes")

    def _frame(self) -> dict | None:
        if len(self.buf) < 4:
            return None
        (n,) = struct.unpack(">I", self.buf[:4])
        if n > _MAX_FRAME:
            raise self.abort("error", "oversized message from sandbox")
        if len(self.buf) < 4 + n:
            return None
        data = bytes(self.buf[4:4 + n])
        del self.buf[:4 + n]
        try:
            msg = json.loads(data)
        except (ValueError, RecursionError):
            msg = None
        if not isinstance(msg, dict):
            raise self.abort("error", "malformed message from sandbox")
        return msg

    def recv(self, deadline: float) -> dict:
        while True:
            if self.gone:
                raise self.gone
            msg = self._frame()
            if msg is not None:
                return msg
            if "rpc" not in self.open:
                raise self.abort(*self._death("sandbox exited"))
            left = deadline - time.monotonic()
            if left <= 0:
                raise self.abort("timeout", "time limit exceeded")
            self._poll(min(left, 0.5))

    def _death(self, what: str) -> tuple[str, str]:
        """Classify an unexpected exit of the runner."""
        try:
            rc = self.proc.wait(timeout=0.5)
        except subprocess.TimeoutExpired:
            rc = None
        err = self.err.decode("utf-8", "replace")
        if "MemoryError" in err:
            return "memory", f"{what}: MemoryError"
        if rc is not None and rc in (-signal.SIGKILL, -signal.SIGXCPU, 128 + signal.SIGKILL, 128 + signal.SIGXCPU):
            return "timeout", f"{what}: killed (CPU limit or signal), rc={rc}"
        return "error", f"{what} (rc={rc}) {err[-200:]}".strip()

    def run_to_exit(self) -> int | None:
        """stdio: read output until the runner exits; returns its exit status."""
        exited_at = None
        while self.open:
            if self.gone:
                raise self.gone
            now = time.monotonic()
            if now >= self.deadline:
                raise self.abort("timeout", "time limit exceeded")
            if self.proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > 0.2:  # a leftover child holds the pipes
                    break
            self._poll(min(self.deadline - now, 0.05))
        try:
            return self.proc.wait(timeout=max(0.0, self.deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            raise self.abort("timeout", "time limit exceeded") from None

    # -- teardown -----------------------------------------------------------
    def abort(self, status: str, detail: str) -> _Gone:
        if self.gone is None:
            self.gone = _Gone(status, detail)
            self.close()
        return self.gone

    def close(self) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        self.proc.wait()
        for fd in list(self.open.values()):
            self.sel.unregister(fd)
            os.close(fd)
        self.open.clear()
        self.sel.close()
        try:
            os.close(self.wfd)
        except OSError:
            pass
        _reap_orphans()
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)


def _pids_where(field: int, value: int) -> list[int]:
    """Pids whose /proc/<pid>/stat field (after the name: 1 ppid, 3 session) equals value."""
    pids = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2:].split()
        if len(fields) > field and int(fields[field]) == value:
            pids.append(int(name))
    return pids


def _reap_orphans(timeout: float = 5.0) -> None:
    """Kill and reap every child of the judge (orphans re-parent here: subreaper)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for pid in _pids_where(1, os.getpid()):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            time.sleep(0.002)


class _Remote:
    """Judge-side stand-in for a program function: calls go to the sandbox."""

    def __init__(self, box: _Box, name: str, counter: list):
        self._box, self._name, self._counter = box, name, counter
        self.__name__ = name

    def __call__(self, *args, **kwargs):
        box = self._box
        if box.gone:
            raise box.gone
        self._counter[0] += 1
        call_id = self._counter[0]
        try:
            msg = {"t": "call", "id": call_id, "name": self._name,
                   "args": [_enc(a) for a in args], "kwargs": {str(k): _enc(v) for k, v in kwargs.items()}}
        except (TypeError, ValueError, RecursionError) as e:
            raise _CandidateError(f"argument not transferable: {e}") from None
        box.send(msg, box.deadline)
        reply = box.recv(box.deadline)
        if reply.get("id") != call_id or reply.get("t") not in ("ret", "exc"):
            raise box.abort("error", "sandbox protocol violation")
        if reply["t"] == "exc":
            name, text = str(reply.get("exc")), str(reply.get("msg"))[:300]
            if name == "MemoryError":
                box.memory_seen = True
            cls = getattr(builtins, name, None)
            if (isinstance(cls, type) and issubclass(cls, Exception)
                    and not issubclass(cls, (StopIteration, StopAsyncIteration, Warning))):
                try:
                    exc = cls(text)
                except TypeError:  # e.g. UnicodeDecodeError wants five arguments
                    exc = None
                if exc is not None:
                    raise exc
            raise _CandidateError(f"{name}: {text}")
        try:
            return _dec(reply.get("v"))
        except (TypeError, ValueError, RecursionError, KeyError) as e:
            raise _CandidateError(f"{self._name} returned an unsupported value ({e})") from None


def _names(nodes: Iterable[ast.AST]) -> tuple[set[str], set[str]]:
    """-> (names loaded, names bound) anywhere in nodes."""
    loaded, bound = set(), set()
    for node in nodes:
        for n in ast.walk(node):
            if isinstance(n, ast.Name):
                (loaded if isinstance(n.ctx, ast.Load) else bound).add(n.id)
            elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                bound.add(n.name)
            elif isinstance(n, ast.arg):
                bound.add(n.arg)
            elif isinstance(n, ast.alias):
                bound.add((n.asname or n.name).split(".")[0])
            elif isinstance(n, ast.ExceptHandler) and n.name:
                bound.add(n.name)
    return loaded, bound


def _short(e: BaseException) -> str:
    text = f"{type(e).__name__}: {e}" if str(e) else type(e).__name__
    return text[:200]


def _judge_assert(cfg: dict) -> dict:
    prelude, steps, param = _plan_assert(cfg["tests"], cfg["entry_point"])
    total = sum(counted for _, counted in steps)
    passed, status, detail = 0, None, ""
    try:
        box = _Box(cfg)
    except _Gone as g:
        return {"passed": 0, "total": total, "status": g.status, "detail": g.detail}
    box.memory_seen = False
    try:
        first = box.recv(box.deadline)
        if first.get("t") == "load_error":
            st = "memory" if first.get("exc") == "MemoryError" else "error"
            return {"passed": 0, "total": total, "status": st,
                    "detail": f"program failed to load: {first.get('exc')}: {str(first.get('msg'))[:300]}"}
        if first.get("t") != "ready" or not isinstance(first.get("callables"), list):
            raise box.abort("error", "sandbox protocol violation")
        callables = {c for c in first["callables"] if isinstance(c, str)}
        modules = first.get("modules") if isinstance(first.get("modules"), dict) else {}
        ep = cfg["entry_point"]
        if ep is not None and ep not in callables:
            return {"passed": 0, "total": total, "status": "error", "detail": f"entry point {ep!r} not defined"}
        counter = [0]
        g: dict[str, Any] = {"__name__": "__test__", "__builtins__": builtins}
        all_nodes = list(prelude) + [s for stmts, _ in steps for s in stmts]
        loaded, bound = _names(all_nodes)
        for name in sorted(loaded - bound - set(dir(builtins))):
            if name in callables:
                g[name] = _Remote(box, name, counter)
            elif modules.get(name) == name and name in getattr(sys, "stdlib_module_names", ()):
                g[name] = __import__(name)  # e.g. the program imported math and the asserts use it
        if ep is not None:
            g["candidate"] = _Remote(box, ep, counter)
            if param:
                g[param] = g["candidate"]
        random.seed(0)
        if prelude:
            try:
                exec(compile(ast.Module(body=list(prelude), type_ignores=[]), "<tests>", "exec"), g)
            except _Gone:
                raise
            except BaseException as e:  # noqa: BLE001
                return {"passed": 0, "total": total, "status": "error", "detail": f"test set-up failed: {_short(e)}"}
        if param:
            g[param] = g["candidate"]
        for i, (stmts, counted) in enumerate(steps):
            code = compile(ast.fix_missing_locations(ast.Module(body=list(stmts), type_ignores=[])), "<tests>", "exec")
            try:
                exec(code, g)
            except _Gone:
                raise
            except BaseException as e:  # noqa: BLE001
                if not detail:
                    detail = f"step {i} ({'test' if counted else 'set-up'}, line {stmts[0].lineno}): {_short(e)}"
            else:
                passed += counted
    except _Gone as gone:
        status = gone.status
        detail = detail or gone.detail
    finally:
        box.close()
    if passed == total:
        return {"passed": passed, "total": total, "status": "ok", "detail": ""}
    return {"passed": passed, "total": total,
            "status": status or ("memory" if box.memory_seen else "failed"), "detail": detail}


def _judge_stdio(cfg: dict) -> dict:
    cases = _check_stdio(cfg["tests"])
    passed, status, detail = 0, None, ""
    for i, case in enumerate(cases):
        if status == "timeout":
            break
        ev = None
        box = None
        try:
            box = _Box(cfg, stdin_data=case["input"])
            rc = box.run_to_exit()
            out = box.out.decode("utf-8", "replace")
            err = box.err.decode("utf-8", "replace")
            if rc == 0 and _normalize_output(out) == _normalize_output(case["output"]):
                passed += 1
                continue
            if rc == 0:
                ev, why = "failed", f"case {i}: wrong output {out[:120]!r}"
            elif "MemoryError" in err:
                ev, why = "memory", f"case {i}: MemoryError"
            elif rc in (-signal.SIGKILL, -signal.SIGXCPU, 128 + signal.SIGKILL, 128 + signal.SIGXCPU):
                ev, why = "timeout", f"case {i}: killed (CPU limit or signal), rc={rc}"
            else:
                ev, why = "error", f"case {i}: exit status {rc}: {err.strip()[-200:]}"
        except _Gone as g:
            ev, why = g.status, f"case {i}: {g.detail}"
        finally:
            if box is not None:
                box.close()
        if status in (None, "failed") and ev != "failed":
            status = ev
        status = status or ev
        detail = detail or why
    if passed == len(cases):
        return {"passed": passed, "total": len(cases), "status": "ok", "detail": ""}
    return {"passed": passed, "total": len(cases), "status": status or "failed", "detail": detail}


_NUMBER_RE = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_INT_RE = re.compile(r"[+-]?\d+")


def _decimal_tokens(line: str) -> list | None:
    try:
        return [decimal.Decimal(t) for t in line.split()]
    except (decimal.InvalidOperation, ValueError):
        return None


def _tokens_equal(got: str, want: str, float_tol: float) -> bool:
    if got == want:
        return True
    if not (_NUMBER_RE.fullmatch(got) and _NUMBER_RE.fullmatch(want)):
        return False
    if _INT_RE.fullmatch(got) and _INT_RE.fullmatch(want):
        return int(got) == int(want)  # integers exactly: a tolerance would equate 10**17 and 10**17 + 1
    a, b = float(got), float(want)
    return math.isfinite(a) and abs(a - b) <= float_tol * max(1.0, abs(b))


def outputs_match(got: str, want: str, compare: str = "lines", float_tol: float = 1e-6) -> bool:
    """Whether program output ``got`` is accepted for the expected output ``want``.

    ``compare="lines"`` (LiveCodeBench's checker): the outputs, stripped, have the same number of
    lines, and each stripped line equals its counterpart or both are whitespace-separated numbers
    with equal decimal values ("1.0" == "1"). ``compare="tokens"`` (CodeContests): the
    whitespace-separated tokens agree one for one; integer tokens exactly, other numeric tokens
    within ``float_tol`` absolute error, or relative error where ``|want| > 1``.
    """
    if compare == "lines":
        got_lines = [ln.strip() for ln in got.strip().split("\n")]
        want_lines = [ln.strip() for ln in want.strip().split("\n")]
        if len(got_lines) != len(want_lines):
            return False
        for g, w in zip(got_lines, want_lines):
            if g != w:
                dg, dw = _decimal_tokens(g), _decimal_tokens(w)
                if dg is None or dw is None or dg != dw:
                    return False
        return True
    if compare == "tokens":
        got_t, want_t = got.split(), want.split()
        return len(got_t) == len(want_t) and all(_tokens_equal(g, w, float_tol) for g, w in zip(got_t, want_t))
    raise ValueError(f"compare={compare!r}; allowed: {COMPARES}")


def _as_lists(x):
    """Tuples as lists, recursively (a functional answer may return either; the gold is JSON)."""
    if isinstance(x, (list, tuple)):
        return [_as_lists(v) for v in x]
    if isinstance(x, dict):
        return {k: _as_lists(v) for k, v in x.items()}
    return x


def _case_reply(box: "_Box") -> dict | None:
    """The runner's reply to the current case, or None when the runner exited without one."""
    while True:
        if box.gone:
            raise box.gone
        msg = box._frame()
        if msg is not None:
            return msg
        if "rpc" not in box.open:
            return None
        left = box.deadline - time.monotonic()
        if left <= 0:
            raise box.abort("timeout", "time limit exceeded")
        box._poll(min(left, 0.5))


def _drain(box: "_Box", until_eof: bool) -> None:
    """Read the output the runner has written (all of it up to EOF when it exited), within the deadline."""
    while box.open and ("out" in box.open or "err" in box.open):
        left = box.deadline - time.monotonic()
        if left <= 0:
            raise box.abort("timeout", "time limit exceeded")
        if not until_eof and not box.sel.select(0):
            return
        box._poll(min(left, 0.05))
        if until_eof and box.proc.poll() is not None and not box.sel.select(0.05):
            return


def _exit_status(box: "_Box", rc: int | None) -> tuple[str, str]:
    err = box.err.decode("utf-8", "replace")
    if "MemoryError" in err:
        return "memory", "MemoryError"
    if rc in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
        return "timeout", f"CPU time limit, rc={rc}"
    return "runtime_error", f"exit status {rc}: {err.strip()[-200:]}"


def _judge_cases(cfg: dict) -> dict:
    """Case kinds ("stdin", "functional"): one runner process serves the cases in order, each case
    with its own ``timeout_s``; a fresh runner starts only after one died. Stops at the first failed
    case when ``cfg["stop_on_failure"]``, and always after a time-out or a compile error (the cases
    not run count as failed). The status is that of the first failed case."""
    cases, kind = cfg["tests"], cfg["kind"]
    passed, status, detail = 0, None, ""
    box, timed_out = None, False
    try:
        for i, case in enumerate(cases):
            if timed_out or (status is not None and cfg["stop_on_failure"]):
                break
            ev, why = None, ""
            try:
                if box is None:
                    box = _Box(cfg)
                    first = _case_reply(box)
                    if first is None:
                        raise box.abort(*_exit_status(box, box.proc.wait()))
                    if first.get("t") == "compile_error":
                        ev, why = "compile_error", f"{first.get('exc')}: {str(first.get('msg'))[:300]}"
                        status, detail = status or ev, detail or why
                        break
                    if first.get("t") == "load_error":
                        ev = "memory" if first.get("exc") == "MemoryError" else "runtime_error"
                        raise box.abort(ev, f"program failed to load: {first.get('exc')}: "
                                            f"{str(first.get('msg'))[:300]}")
                    if first.get("t") != "ready":
                        raise box.abort("error", "sandbox protocol violation")
                box.out, box.nout, box.err = bytearray(), 0, bytearray()
                box.deadline = time.monotonic() + float(cfg["timeout_s"])
                if kind == "functional":
                    box.send({"t": "case", "args": [_enc(a) for a in case["args"]]}, box.deadline)
                else:
                    box.send({"t": "case", "stdin": case["input"]}, box.deadline)
                reply = _case_reply(box)
                _drain(box, until_eof=reply is None)
                if reply is None:  # exited without replying: os._exit after printing, a crash, a signal
                    try:
                        rc = box.proc.wait(timeout=max(0.1, box.deadline - time.monotonic()))
                    except subprocess.TimeoutExpired:
                        raise box.abort("timeout", "time limit exceeded") from None
                    out = bytes(box.out).decode("utf-8", "replace")
                    ev, why = _exit_status(box, rc)
                    box.close()
                    box = None
                    if rc == 0 and kind == "stdin":
                        if outputs_match(out, case["output"], cfg["compare"], cfg["float_tol"]):
                            passed += 1
                            continue
                        ev, why = "wrong_answer", f"wrong output {out[:120]!r}"
                    elif rc == 0:
                        ev, why = "runtime_error", "the program exited instead of returning"
                    timed_out = ev == "timeout"
                    status, detail = status or ev, detail or f"case {i}: {why}"
                    continue
                if reply.get("t") == "exc":
                    name = str(reply.get("exc"))
                    ev = "memory" if name == "MemoryError" else "runtime_error"
                    why = f"{name}: {str(reply.get('msg'))[:300]}"
                elif reply.get("t") != "done":
                    raise box.abort("error", "sandbox protocol violation")
                elif kind == "functional":
                    try:
                        got = _as_lists(_dec(reply.get("v")))
                    except (TypeError, ValueError, KeyError, RecursionError):
                        raise box.abort("error", "sandbox protocol violation (malformed value)") from None
                    if got == case["expected"]:
                        passed += 1
                        continue
                    ev, why = "wrong_answer", f"returned {repr(got)[:120]}, expected {repr(case['expected'])[:120]}"
                else:
                    out = bytes(box.out).decode("utf-8", "replace")
                    if outputs_match(out, case["output"], cfg["compare"], cfg["float_tol"]):
                        passed += 1
                        continue
                    ev, why = "wrong_answer", f"wrong output {out[:120]!r}"
            except _Gone as g:
                ev, why = ("runtime_error" if g.status == "error" and "protocol" not in g.detail else g.status), g.detail
                if box is not None:
                    box.close()
                box = None
            timed_out = ev == "timeout"
            status, detail = status or ev, detail or f"case {i}: {why}"
    finally:
        if box is not None:
            box.close()
    if passed == len(cases):
        return {"passed": passed, "total": len(cases), "status": "ok", "detail": ""}
    return {"passed": passed, "total": len(cases), "status": status or "wrong_answer", "detail": detail}


def _judge_entry() -> None:
    """Judge process: config JSON on stdin, result JSON on (the original) stdout."""
    import resource
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    _prctl(4, 0)  # PR_SET_DUMPABLE 0: not ptrace-able / no /proc/<pid>/mem by same uid
    _prctl(36, 1)  # PR_SET_CHILD_SUBREAPER: orphans of the sandbox re-parent here
    cfg = json.loads(sys.stdin.buffer.read())
    res_fd = os.dup(1)
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)  # test code may print; keep the result channel clean
    try:
        judge = {"assert": _judge_assert, "stdio": _judge_stdio}.get(cfg["kind"], _judge_cases)
        res = judge(cfg)
    except BaseException as e:  # noqa: BLE001
        res = {"passed": 0, "total": -1, "status": "error", "detail": f"judge: {_short(e)}"}
    finally:
        _reap_orphans()
    res["nonce"] = cfg["nonce"]
    os.write(res_fd, (json.dumps(res) + "\n").encode())


# --------------------------------------------------------------------------
# Caller side.
# --------------------------------------------------------------------------

def _run_judge(cfg: dict, total: int, n_runs: int) -> CodeResult:
    nonce = secrets.token_hex(16)
    workroot = None
    if cfg["mode"] == "rlimits":  # made and removed here, so a killed judge leaves nothing behind
        workroot = tempfile.mkdtemp(prefix="prd-code-")
        os.chmod(workroot, 0o711)
    cfg = dict(cfg, nonce=nonce, workroot=workroot)
    try:
        return _run_judge_in(cfg, total, n_runs, nonce)
    finally:
        if workroot:
            shutil.rmtree(workroot, ignore_errors=True)


def _run_judge_in(cfg: dict, total: int, n_runs: int, nonce: str) -> CodeResult:
    guard = n_runs * (float(cfg["timeout_s"]) + _STARTUP_LIMIT_S) + 30.0
    proc = subprocess.Popen(
        [sys.executable, "-I", "-B", _THIS_FILE, "--judge"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={"PATH": _SAFE_PATH, "LANG": "C.UTF-8"}, cwd="/", start_new_session=True)
    timed_out = False
    try:
        out, err = proc.communicate(json.dumps(cfg).encode(), timeout=guard)
    except subprocess.TimeoutExpired:
        timed_out = True
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if proc.returncode is None:
            out, err = proc.communicate()
    try:
        res = json.loads(out.decode().strip().splitlines()[-1])
        ok = (res.get("nonce") == nonce and res.get("status") in STATUSES and type(res.get("passed")) is int
              and 0 <= res["passed"] <= total and (res.get("total") in (total, -1)))
    except (ValueError, IndexError, AttributeError):
        ok = False
    if not ok or timed_out:  # the judge died early: kill what is left of its session
        for _ in range(50):
            left = _pids_where(3, proc.pid)
            if not left:
                break
            for pid in left:
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
            time.sleep(0.01)
    if timed_out:
        return CodeResult(0, total, "timeout", "judge exceeded its time guard")
    if not ok:
        tail = err.decode("utf-8", "replace").strip()[-300:]
        return CodeResult(0, total, "error", f"judge failed (rc={proc.returncode}): {tail}")
    passed = res["passed"] if res["total"] == total else 0
    return CodeResult(passed, total, res["status"], str(res.get("detail", ""))[:_DETAIL_CHARS])


_PROBE_LOCK = threading.Lock()
_PROBES: dict[str, dict | None] = {}
_AUTO: str | None = None


def _probe_opts(mode: str) -> dict | None:
    """Options under which ``mode`` works on this machine (probe run, cached), or None."""
    with _PROBE_LOCK:
        if mode in _PROBES:
            return _PROBES[mode]
        if mode == "bwrap":
            variants = [{"userns": True}, {"userns": False}] if shutil.which("bwrap") else []
        elif mode == "unshare":
            roots = [r for r in ("/tmp", "/mnt", "/media", "/srv") if os.path.isdir(r)
                     and not any(b == r or b.startswith(r + "/") for b in _layout()["binds"])]
            variants = [{"root": roots[0]}] if shutil.which("unshare") and roots and os.geteuid() == 0 else []
        elif mode == "rlimits":
            variants = ([{"uid": _SANDBOX_UID}] if os.geteuid() == 0 else []) + [{}]
        else:
            raise ValueError(f"unknown sandbox mode {mode!r}; expected one of {MODES}")
        found = None
        for opts in variants:
            res = _evaluate(
                "import os\ndef probe():\n    return sorted(set(os.environ) - {'PWD'}), os.getcwd() != '/'\n",
                ["assert probe() == (['HOME', 'LANG', 'LC_ALL', 'PATH', 'TMPDIR'], True)"], kind="assert",
                timeout_s=10.0, memory_mb=1024, entry_point=None, max_output_bytes=1 << 16, mode=mode, opts=opts)
            if res.status == "ok":
                found = opts
                break
        _PROBES[mode] = found
        return found


def available_isolations() -> list[str]:
    """Sandbox modes that work here, strongest first."""
    return [m for m in MODES if _probe_opts(m) is not None]


def isolation() -> str:
    """Mode used by default: ``"bwrap"`` | ``"unshare"`` | ``"rlimits"`` (env ``PRD_CODE_SANDBOX`` forces one)."""
    global _AUTO
    if _AUTO is not None:
        return _AUTO
    forced = os.environ.get("PRD_CODE_SANDBOX")
    if forced:
        if _probe_opts(forced) is None:
            raise RuntimeError(f"PRD_CODE_SANDBOX={forced} does not work on this machine")
        mode = forced
    else:
        mode = next((m for m in ("bwrap", "unshare") if _probe_opts(m) is not None), "rlimits")
    if mode == "rlimits":
        opts = _probe_opts("rlimits") or {}
        warnings.warn("code sandbox: no bubblewrap / namespaces here; running programs with rlimits and a "
                      "process group only (no network or filesystem isolation)", RuntimeWarning, stacklevel=2)
        if os.geteuid() == 0 and "uid" not in opts:
            warnings.warn("code sandbox: programs run as root (the interpreter is not usable by uid "
                          f"{_SANDBOX_UID}); they can signal and write anything root can", RuntimeWarning,
                          stacklevel=2)
    _AUTO = mode
    return mode


def _evaluate(program, tests, *, kind, timeout_s, memory_mb, entry_point, max_output_bytes, mode, opts,
              stop_on_failure=True, compare="lines", float_tol=1e-6):
    extra = {}
    if kind in CASE_KINDS:
        if compare not in COMPARES:
            raise ValueError(f"compare={compare!r}; allowed: {COMPARES}")
        if not (isinstance(float_tol, (int, float)) and float_tol >= 0):
            raise ValueError(f"float_tol={float_tol!r}; allowed: a number >= 0")
        tests = _check_cases(tests, kind, entry_point)
        total = n_runs = len(tests)
        extra = {"stop_on_failure": bool(stop_on_failure), "compare": compare, "float_tol": float(float_tol),
                 "cpu_s": float(timeout_s) * (total + 1)}
    elif kind == "assert":
        _, steps, _ = _plan_assert(tests, entry_point)
        total, n_runs, tests = sum(c for _, c in steps), 1, (tests if isinstance(tests, str) else list(tests))
    elif kind == "stdio":
        tests = _check_stdio(tests)
        total = n_runs = len(tests)
    else:
        raise ValueError(f"kind must be one of {('assert', 'stdio') + CASE_KINDS}, not {kind!r}")
    if total == 0:
        return CodeResult(0, 0, "error", "no tests")
    if not isinstance(program, str):
        return CodeResult(0, total, "error", "program is not a string")
    cfg = {"program": program, "tests": tests, "kind": kind, "timeout_s": float(timeout_s),
           "runner_src": _runner_source(),
           "memory_mb": int(memory_mb), "entry_point": entry_point, "max_output_bytes": int(max_output_bytes),
           "mode": mode, "opts": opts, **extra}
    try:
        return _run_judge(cfg, total, n_runs)
    except OSError as e:  # e.g. out of processes
        return CodeResult(0, total, "error", f"could not start the judge: {e}")


def evaluate(program: str, tests, *, kind: str = "assert", timeout_s: float = 5.0, memory_mb: int = 1024,
             entry_point: str | None = None, max_output_bytes: int = 1 << 20,
             sandbox: str | None = None, stop_on_failure: bool = True, compare: str = "lines",
             float_tol: float = 1e-6) -> CodeResult:
    """Run ``program`` against ``tests`` in a sandbox and count passed tests (see module docstring).

    ``timeout_s`` is the wall-clock budget of one sandboxed run (the whole
    assert suite, or one stdio / stdin / functional case), start-up excluded; ``memory_mb`` the
    address-space limit; ``sandbox`` forces a mode (default :func:`isolation`).
    The case kinds ("stdin", "functional") also take ``stop_on_failure`` (stop at the first
    failed case), and "stdin" takes ``compare`` and ``float_tol`` (:func:`outputs_match`).
    Raises ValueError for malformed ``tests``/``kind``; never for program behaviour.
    """
    mode = sandbox or isolation()
    opts = _probe_opts(mode)
    if opts is None:
        raise RuntimeError(f"sandbox mode {mode!r} is not available here")
    return _evaluate(program, tests, kind=kind, timeout_s=timeout_s, memory_mb=memory_mb, entry_point=entry_point,
                     max_output_bytes=max_output_bytes, mode=mode, opts=opts, stop_on_failure=stop_on_failure,
                     compare=compare, float_tol=float_tol)


def evaluate_many(items: Iterable[Mapping[str, Any] | Sequence[Any]], *, workers: int | None = None,
                  **defaults) -> list[CodeResult]:
    """Evaluate many programs in parallel (threads driving sandbox processes), results in input order.

    At most ``workers`` sandboxes run at once (default: min(items, CPUs, 16); ``rewards.pool.parallel_map``).

    Each item is a mapping of :func:`evaluate` arguments (``program``, ``tests``,
    ``kind``, ...) or a ``(program, tests)`` / ``(program, tests, entry_point)`` tuple;
    ``defaults`` fill keyword arguments the items leave out.
    """
    calls = []
    for it in items:
        if isinstance(it, Mapping):
            kw = dict(defaults, **it)
        else:
            kw = dict(defaults, **dict(zip(("program", "tests", "entry_point"), it)))
        calls.append(kw)
    if not calls:
        return []
    isolation()  # detect once, outside the pool
    return parallel_map(lambda kw: evaluate(**kw), calls, workers)


def count_tests(tests, *, kind: str = "assert", entry_point: str | None = None) -> int:
    """How many tests :func:`evaluate` counts for ``tests`` (asserts of ``check`` or cases), without running them.

    Raises ValueError for malformed ``tests`` or ``kind``.
    """
    if kind == "assert":
        _, steps, _ = _plan_assert(tests, entry_point)
        return sum(c for _, c in steps)
    if kind == "stdio":
        return len(_check_stdio(tests))
    if kind in CASE_KINDS:
        return len(_check_cases(tests, kind, entry_point))
    raise ValueError(f"kind must be one of {('assert', 'stdio') + CASE_KINDS}, not {kind!r}")


if __name__ == "__main__" and sys.argv[1:] == ["--judge"]:
    _judge_entry()
