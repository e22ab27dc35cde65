"""Sandboxed code rewards (V1, arXiv 2603.04304): HumanEval counts, stdio, and sandbox attacks."""

from __future__ import annotations

import gc
import io
import json
import os
import secrets
import socket
import time
import tokenize
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from prd_jax.rewards import code as C

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("PRD_DATA_DIR", REPO.parent / "shared" / "data"))
HUMANEVAL = DATA / "code" / "humaneval.jsonl"

MODES = C.available_isolations()
NS_MODES = [m for m in MODES if m != "rlimits"]
needs_ns = pytest.mark.skipif(not NS_MODES, reason="no bwrap/unshare namespaces on this machine")

ADD = "def add(a, b):\n    return a + b\n"
ADD_TESTS = ["assert add(1, 2) == 3", "assert add(-5, 5) == 0", "assert add(10, 20) == 30"]


def _ev(program, tests=None, mode=None, **kw):
    return C.evaluate(program, ADD_TESTS if tests is None else tests, sandbox=mode, **kw)


def _procs_with(token: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if token.encode() in f.read():
                        found.append(int(name))
            except OSError:
                pass
    return found


# ----------------------------------------------------------------------------- HumanEval

_OPS = {"<": ">=", ">": "<=", "==": "!=", "!=": "==", "<=": ">", ">=": "<",
        "+": "-", "-": "+", "*": "+", "%": "//", "+=": "-=", "-=": "+=", "*=": "+="}


def _flip(src: str) -> str:
    """Flip the first comparison operator (else arithmetic operator) of a solution."""
    toks = [t for t in tokenize.generate_tokens(io.StringIO(src).readline) if t.type == tokenize.OP]
    cmp_ = [t for t in toks if t.string in ("<", ">", "==", "!=", "<=", ">=")]
    arith = [t for t in toks if t.string in _OPS]
    if not (cmp_ or arith):
        return src.replace("return ", "return 1 + ", 1)
    tok = (cmp_ or arith)[0]
    lines = src.splitlines(keepends=True)
    (r, c), (_, c2) = tok.start, tok.end
    lines[r - 1] = lines[r - 1][:c] + _OPS[tok.string] + lines[r - 1][c2:]
    return "".join(lines)


@pytest.mark.skipif(not HUMANEVAL.exists(), reason=f"{HUMANEVAL} not found (set PRD_DATA_DIR)")
@pytest.mark.slow
def test_humaneval_canonical_pass_and_mutants_fail():
    rows = [json.loads(line) for line in HUMANEVAL.read_text().splitlines()][::8][:20]
    assert rows[0]["task_id"] == "HumanEval/0" and rows[-1]["task_id"] == "HumanEval/152"
    items = []
    for r in rows:
        for body in (r["canonical_solution"], "    return None\n", _flip(r["canonical_solution"])):
            items.append({"program": r["prompt"] + body, "tests": r["test"], "entry_point": r["entry_point"],
                          "timeout_s": 3.0})
    res = C.evaluate_many(items, workers=8)
    canon, none_, flip = res[0::3], res[1::3], res[2::3]
    totals = {r["task_id"]: c.total for r, c in zip(rows, canon)}
    assert [c.status for c in canon] == ["ok"] * 20, [(r["task_id"], c) for r, c in zip(rows, canon)]
    assert sum(totals.values()) == 149
    assert totals["HumanEval/0"] == 7 and totals["HumanEval/32"] == 1 and totals["HumanEval/144"] == 13
    assert all(m.total == c.total for c, m in zip(canon, none_ + flip))
    assert all(m.passed < m.total for m in none_ + flip), [(r["task_id"], m) for r, m in zip(rows * 2, none_ + flip)]
    # `return None` still satisfies the asserts that expect a falsy / None value
    assert sum(m.passed for m in none_) == 9
    assert {r["task_id"]: (m.passed, m.total) for r, m in zip(rows, none_) if m.passed} == {
        "HumanEval/56": (8, 12), "HumanEval/128": (1, 8)}
    assert sum(m.passed for m in flip) < 75


def test_assert_counting_partial_and_list_form():
    prog = "def sq(x):\n    return x * x if x < 3 else x + x\n"
    tests = "def check(candidate):\n    assert True, 'not counted'\n    xs = [1, 2, 3]\n" \
            "    for x in xs:\n        assert candidate(x) == x * x\n    assert candidate(2) == 4\n" \
            "    assert candidate(4) == 16, 'fails'\n"
    r = C.evaluate(prog, tests, entry_point="sq")
    assert (r.passed, r.total, r.status) == (1, 3, "failed") and "line 4" in r.detail  # the loop fails first
    r = C.evaluate(prog, ["assert sq(1) == 1", "assert sq(2) == 4", "assert sq(4) == 16", "assert candidate(0) == 0"],
                   entry_point="sq")
    assert (r.passed, r.total, r.status) == (3, 4, "failed")
    r = C.evaluate("def f(x):\n    return {x: (x, [x], {x}, b'x', 1.5, None)}\n",
                   ["assert f(2) == {2: (2, [2], {2}, b'x', 1.5, None)}",
                    "assert f(2) != {2: [2, [2], {2}, b'x', 1.5, None]}"])  # tuple is not list
    assert (r.passed, r.total, r.status) == (2, 2, "ok")
    r = C.evaluate("def f(:\n", ["assert f() == 1"])
    assert (r.passed, r.total, r.status) == (0, 1, "error") and "SyntaxError" in r.detail
    r = C.evaluate(ADD, ADD_TESTS, entry_point="missing")
    assert (r.passed, r.total, r.status) == (0, 3, "error")
    with pytest.raises(ValueError):
        C.evaluate(ADD, ADD_TESTS, kind="bogus")
    with pytest.raises(ValueError):
        C.evaluate(ADD, "def check(candidate):\n    assert candidate(1, 1) == 2\n")  # no entry_point


# ----------------------------------------------------------------------------- stdio

STDIO_CASES = [{"input": "1 2\n", "output": "3\n"}, {"input": "10 20\n", "output": "30"},
               {"input": "0 0", "output": "0\n\n"}]


def test_stdio_counts():
    ok = "a, b = map(int, input().split())\nprint(a + b, '  ')\nprint()\n"
    assert _ev(ok, STDIO_CASES, kind="stdio") == C.CodeResult(3, 3, "ok", "")
    r = _ev("a, b = map(int, input().split())\nprint(a + b + 1)\n", STDIO_CASES, kind="stdio")
    assert (r.passed, r.total, r.status) == (0, 3, "failed")
    r = _ev("a, b = map(int, input().split())\nprint(a * b)\n", STDIO_CASES, kind="stdio")
    assert (r.passed, r.total, r.status) == (1, 3, "failed")
    r = _ev("a, b = map(int, input().split())\nprint(a + b)\nif a: raise SystemExit(3)\n", STDIO_CASES, kind="stdio")
    assert (r.passed, r.total, r.status) == (1, 3, "error")  # right output but non-zero exit


# ----------------------------------------------------------------------------- attacks

@pytest.mark.parametrize("mode", MODES)
def test_infinite_loop_times_out(mode):
    t = time.monotonic()
    r = _ev("import time\ndef add(a, b):\n    if a == 1:\n        return 3\n    while True:\n        pass\n",
            mode=mode, timeout_s=1.0)
    assert (r.passed, r.total, r.status) == (1, 3, "timeout")  # partial credit kept
    r = _ev("while True:\n    pass\n", STDIO_CASES, mode=mode, kind="stdio", timeout_s=1.0)
    assert (r.passed, r.total, r.status) == (0, 3, "timeout")
    r = _ev("import time\ntime.sleep(100)\n", mode=mode, timeout_s=1.0)
    assert (r.passed, r.status) == (0, "timeout")
    assert time.monotonic() - t < 3 * 1.0 + 6.0


@pytest.mark.parametrize("mode", MODES)
def test_memory_bomb_contained(mode):
    r = _ev("x = bytearray(1 << 40)\n" + ADD, mode=mode, memory_mb=256)
    assert (r.passed, r.total, r.status) == (0, 3, "memory")
    r = _ev("def add(a, b):\n    hog = []\n    while True:\n        hog.append(bytearray(1 << 24))\n",
            mode=mode, memory_mb=256)
    assert (r.passed, r.total, r.status) == (0, 3, "memory")
    r = _ev("hog = []\nwhile True:\n    hog.append(bytearray(1 << 24))\n", STDIO_CASES, mode=mode, kind="stdio",
            memory_mb=256)
    assert (r.passed, r.status) == (0, "memory")
    assert len(bytearray(1 << 26)) == 1 << 26  # the grader itself is unaffected


@pytest.mark.parametrize("mode", MODES)
def test_children_do_not_survive(mode):
    token = str(secrets.randbelow(10**9) + 10**9)
    spawn = (f"import os, subprocess\n"
             f"subprocess.Popen(['sleep', '1000.{token}'], start_new_session=True)\n"
             f"if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n"
             f"        os.execv('/bin/sleep', ['sleep', '1001.{token}'])\n    os._exit(0)\n")
    r = _ev(spawn + ADD, mode=mode)
    assert (r.passed, r.total, r.status) == (3, 3, "ok")
    r = _ev(spawn + "print(3)\n", STDIO_CASES[:1], mode=mode, kind="stdio")
    assert (r.passed, r.total) == (1, 1)
    kids = f"import subprocess\nfor i in range(3):\n    subprocess.Popen(['sleep', f'100{{i}}.{token}'])\n"
    r = _ev(kids + "import os, time\nos.kill(os.getppid(), 9)\ntime.sleep(0.5)\n" + ADD, mode=mode)
    assert r.total == 3 and (r.passed, r.status) in ((3, "ok"), (0, "error"))  # judge killed where it is reachable
    assert _procs_with(token) == []


@needs_ns
@pytest.mark.parametrize("mode", NS_MODES)
def test_no_network(mode):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    prog = ("import socket\ndef net():\n    out = []\n"
            f"    for addr in (('127.0.0.1', {port}), ('1.1.1.1', 53)):\n"
            "        s = socket.socket()\n        s.settimeout(1.0)\n"
            "        try:\n            s.connect(addr)\n            out.append('connected')\n"
            "        except OSError:\n            out.append('blocked')\n    return out\n")
    try:
        r = _ev(prog, ["assert net() == ['blocked', 'blocked']", "assert net()[0] == 'connected'"], mode=mode)
    finally:
        srv.close()
    assert (r.passed, r.total) == (1, 2)


@needs_ns
@pytest.mark.parametrize("mode", NS_MODES)
def test_no_writes_outside_and_no_view_of_repo(mode):
    tag = secrets.token_hex(6)
    targets = [REPO / f"evil_{tag}", Path("/tmp") / f"evil_{tag}", DATA / f"evil_{tag}"]
    prog = ("import os\n"
            f"for p in {[str(t) for t in targets]!r}:\n"
            "    try:\n        open(p, 'w').write('x')\n    except OSError:\n        pass\n"
            "open('inside.txt', 'w').write('ok')\n"
            "def probe():\n"
            f"    return (os.path.exists({str(REPO / 'pyproject.toml')!r}), os.path.exists({str(HUMANEVAL)!r}),\n"
            "            open('inside.txt').read())\n")
    r = _ev(prog, ["assert probe() == (False, False, 'ok')"], mode=mode)
    assert (r.passed, r.total, r.status) == (1, 1, "ok")
    assert [t.exists() for t in targets] == [False, False, False]


@pytest.mark.parametrize("mode", MODES)
def test_output_capped(mode):
    t = time.monotonic()
    r = _ev("import sys\nwhile True:\n    sys.stdout.write('x' * 65536)\n" + ADD, mode=mode, max_output_bytes=1 << 16)
    assert (r.passed, r.total, r.status) == (0, 3, "output_limit")
    r = _ev("def add(a, b):\n    print('y' * (1 << 22))\n    return a + b\n", mode=mode, max_output_bytes=1 << 16)
    assert (r.passed, r.total, r.status) == (0, 3, "output_limit")
    r = _ev("while True:\n    print('z' * 1000)\n", STDIO_CASES, mode=mode, kind="stdio", max_output_bytes=1 << 16)
    assert (r.passed, r.total, r.status) == (0, 3, "output_limit")
    assert time.monotonic() - t < 10.0


@pytest.mark.parametrize("mode", MODES)
def test_early_exit_counts_nothing(mode):
    for pre in ("exit(0)\n", "import sys\nsys.exit(0)\n", "import os\nos._exit(0)\n",
                "import os, signal\nos.kill(os.getpid(), signal.SIGKILL)\n"):
        r = _ev("print('PASSED 3/3')\n" + pre + ADD, mode=mode)
        assert (r.passed, r.total) == (0, 3), (pre, r)
        assert r.status in ("error", "timeout"), (pre, r)
    r = _ev("import os\ndef add(a, b):\n    if a == -5:\n        os._exit(0)\n    return a + b\n", mode=mode)
    assert (r.passed, r.total, r.status) == (1, 3, "error")


FORGER = '''
import builtins, json, os, struct, sys
class AlwaysEq(int):
    def __eq__(self, other): return True
    def __ne__(self, other): return False
    __hash__ = int.__hash__
builtins.AssertionError = type("AssertionError", (Exception,), {})
builtins.isinstance = lambda *a: True
for i in range(1, 200):  # forged "the call returned 3" replies, on every fd
    for fd in range(1, 64):
        try:
            frame = json.dumps({"t": "ret", "id": i, "v": True}).encode()
            os.write(fd, struct.pack(">I", len(frame)) + frame)
        except OSError:
            pass
print("PASSED", "3/3", "ok", flush=True)
sys.stdout.write(json.dumps({"passed": 3, "total": 3, "status": "ok"}) + "\\n")
def add(a, b):
    print("PASSED")
    return AlwaysEq(a - b + 1000)
'''


@pytest.mark.parametrize("mode", MODES)
def test_forgery_and_patching_not_counted(mode):
    r = _ev(FORGER, mode=mode)
    assert (r.passed, r.total) == (0, 3), r
    r = _ev("class Obj:\n    def __eq__(self, o):\n        return True\ndef add(a, b):\n    return Obj()\n", mode=mode)
    assert (r.passed, r.total, r.status) == (0, 3, "failed") and "unsupported" in r.detail
    forged_stdio = FORGER.split("print(", 1)[0] + "import builtins\nbuiltins.print = None\n"
    r = _ev(forged_stdio, STDIO_CASES, mode=mode, kind="stdio")
    assert (r.passed, r.total) == (0, 3)


@pytest.mark.parametrize("mode", MODES)
def test_killing_parent_does_not_hurt_grader(mode):
    r = _ev("import os\nos.kill(os.getppid(), 9)\ndef add(a, b):\n    return a - b\n", mode=mode)
    assert (r.passed, r.total) == (0, 3)
    if mode == "rlimits":
        assert r.status == "error"  # the judge itself was killed: nothing counted
    r = _ev("import os\ndef add(a, b):\n    os.kill(os.getppid(), 9)\n    return -1\n", mode=mode)
    assert (r.passed, r.total) == (0, 3)
    if mode != "rlimits":  # inside a pid namespace even kill(-1) only reaches the sandbox
        r = _ev("import os\nos.kill(-1, 9)\nos.killpg(0, 9)\n" + ADD, mode=mode)
        assert r.passed in (0, 3) and r.total == 3
    assert _ev(ADD, mode=mode) == C.CodeResult(3, 3, "ok", "")


@pytest.mark.parametrize("mode", MODES)
def test_environment_secrets_invisible(mode, monkeypatch):
    monkeypatch.setenv("PRD_SECRET", "hunter2")
    scan_proc = mode != "rlimits"  # without a pid namespace, root can read other /proc/<pid>/environ
    prog = ("import os\ndef leak():\n    seen = any('hunter2' in v for v in os.environ.values())\n"
            f"    if {scan_proc}:\n"
            "        for p in os.listdir('/proc'):\n"
            "            try:\n                seen |= b'hunter2' in open(f'/proc/{p}/environ', 'rb').read()\n"
            "            except OSError:\n                pass\n"
            "    return seen\n")
    r = _ev(prog, ["assert leak() == True", "assert leak() == False"], mode=mode)
    assert (r.passed, r.total) == (1, 2)
    r = _ev("import os\nprint(os.environ.get('PRD_SECRET'))\n", [{"input": "", "output": "hunter2"}], mode=mode,
            kind="stdio")
    assert (r.passed, r.total) == (0, 1)


def test_parallel_pool():
    slow = "import time\ntime.sleep(0.5)\n"
    items = [
        {"program": slow + ADD, "tests": ADD_TESTS},
        {"program": slow + "def add(a, b):\n    return a - b\n", "tests": ADD_TESTS},
        {"program": slow + "a, b = map(int, input().split())\nprint(a + b)\n", "tests": STDIO_CASES, "kind": "stdio"},
        {"program": slow + "print(0)\n", "tests": STDIO_CASES, "kind": "stdio"},
        (slow + "def add(a, b):\n    return abs(a) + b\n", ADD_TESTS),
        {"program": slow + "while True: pass\n", "tests": ADD_TESTS, "timeout_s": 1.0},
        {"program": slow + "def f(x):\n    return x * 2\n", "tests": "def check(c):\n    assert c(2) == 4\n",
         "entry_point": "f"},
        {"program": slow + "raise ValueError('boom')\n", "tests": ADD_TESTS},
    ]
    t = time.monotonic()
    res = C.evaluate_many(items, workers=8)
    elapsed = time.monotonic() - t
    assert [(r.passed, r.total, r.status) for r in res] == [
        (3, 3, "ok"), (0, 3, "failed"), (3, 3, "ok"), (1, 3, "failed"), (2, 3, "failed"), (0, 3, "timeout"),
        (1, 1, "ok"), (0, 3, "error")]
    assert elapsed < 8 * 0.5 + 4.0


def test_isolation_reported():
    assert C.isolation() in C.MODES and C.isolation() in MODES
    assert MODES[-1] == "rlimits"
    if NS_MODES and not os.environ.get("PRD_CODE_SANDBOX"):
        assert C.isolation() == NS_MODES[0]


@pytest.mark.slow
def test_parse_source_is_safe_across_threads():
    """CPython 3.11's AST converter keeps one recursion counter per process; a GC pass that switches threads
    in the middle of `ast.parse` made `evaluate_many` fail with "AST constructor recursion depth mismatch"
    (seen in CI). Provoke GC-driven switches while 8 threads parse: `parse_source` must never fail."""
    src = "def check(c):\n" + "".join(f"    assert c([{i}, [1, [2, [3]]]]) == ({i} + 5 * (3 - (2 + 1)), 0)\n"
                                      for i in range(40))

    class _Yield:
        def __init__(self):
            self.me = self  # a cycle: only the collector frees it, and its __del__ gives up the GIL

        def __del__(self):
            time.sleep(0)

    failures, old = [], gc.get_threshold()
    gc.set_threshold(5)
    try:
        def work(_):
            for _ in range(25):
                _Yield()
                try:
                    C.parse_source(src)
                except SystemError as e:
                    failures.append(str(e))
        with ThreadPoolExecutor(8) as ex:
            list(ex.map(work, range(32)))
    finally:
        gc.set_threshold(*old)
    assert failures == []
