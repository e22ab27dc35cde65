"""LiveCodeBench, CodeContests and HMMT February 2025 tasks (issue 33 §1) on fixtures built here
in the published formats (nothing downloaded): statuses, both LiveCodeBench test types, the
compressed private tests, the problems' own limits, float tolerance, reward modes, version
windows and math-equivalent HMMT answers."""

from __future__ import annotations

import base64
import datetime as dt
import json
import os
import pickle
import zlib

import pytest

from prd_jax.config_io import load_config
from prd_jax.rewards import code as C
from prd_jax.rewards.math import is_equivalent
from prd_jax.tasks import get_task
from prd_jax.tasks.codecontests import time_limit_s
from prd_jax.tasks.livecodebench import VERSIONS, decode_private_tests


def fenced(code: str) -> str:
    return f"Here is my solution.\n\n```python\n{code}```\n"


def compress(cases: list) -> str:
    """LiveCodeBench lite's encoding of private tests: base64(zlib(pickle(JSON text)))."""
    return base64.b64encode(zlib.compress(pickle.dumps(json.dumps(cases)))).decode()


# ----------------------------------------------------------------------------- LiveCodeBench

def lcb_stdin_row(qid="abc100_a", date="2024-11-10T00:00:00"):
    public = [{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}]
    private = [{"input": "10 20\n", "output": "30\n", "testtype": "stdin"},
               {"input": "-5 5\n", "output": "0\n", "testtype": "stdin"}]
    return {"question_title": "Sum", "question_content": "Read A and B and print A+B.", "platform": "atcoder",
            "question_id": qid, "contest_id": "abc100", "contest_date": date, "starter_code": "",
            "difficulty": "easy", "public_test_cases": json.dumps(public), "private_test_cases": compress(private),
            "metadata": "{}"}


STARTER = "class Solution:\n    def shiftAll(self, nums: List[int], k: int) -> List[int]:\n        "


def lcb_functional_row(qid="3400", date="2025-03-01T00:00:00"):
    public = [{"input": "[1, 2]\n3", "output": "[4, 5]", "testtype": "functional"}]
    private = [{"input": "[]\n7", "output": "[]", "testtype": "functional"},
               {"input": "[-1, 0, 9]\n-2", "output": "[-3, -2, 7]", "testtype": "functional"}]
    return {"question_title": "Shift", "question_content": "Add k to every element of nums.",
            "platform": "leetcode", "question_id": qid, "contest_id": "weekly-contest-400", "contest_date": date,
            "starter_code": STARTER, "difficulty": "medium", "public_test_cases": json.dumps(public),
            "private_test_cases": compress(private), "metadata": json.dumps({"func_name": "shiftAll"})}


SUM_OK = "a, b = map(int, input().split())\nprint(a + b)\n"
SHIFT_OK = "class Solution:\n    def shiftAll(self, nums: List[int], k: int) -> List[int]:\n        return [x + k for x in nums]\n"


@pytest.fixture(scope="module")
def lcb_grades():
    task = get_task("livecodebench").options(timeout_s=1.0)
    stdin, func = lcb_stdin_row(), lcb_functional_row()
    cases = [
        ("ok", stdin, SUM_OK),
        ("wrong", stdin, "a, b = map(int, input().split())\nprint(a - b)\n"),
        ("timeout", stdin, "while True:\n    pass\n"),
        ("runtime", stdin, "a, b = map(int, input().split())\nprint(a // (b - b))\n"),
        ("syntax", stdin, "def main(:\n    print(1)\n"),
        ("sys_stdin", stdin, "import sys\nprint(sum(map(int, sys.stdin.read().split())))\n"),
        ("public_only", stdin, "print(3)\n"),
        ("open0_thread", stdin, "import threading\ndef main():\n    a, b = map(int, open(0).read().split())\n"
                                "    print(a + b)\nthreading.Thread(target=main).start()\n"),
        ("os_exit", stdin, "import os\na, b = map(int, input().split())\nprint(a + b, flush=True)\nos._exit(0)\n"),
        ("f_ok", func, SHIFT_OK),
        ("f_tuple", func, SHIFT_OK.replace("return [x + k for x in nums]", "return tuple(x + k for x in nums)")),
        ("f_wrong", func, SHIFT_OK.replace("x + k", "x - k")),
        ("f_raises", func, SHIFT_OK.replace("return [x + k for x in nums]",
                                            "return [x + k for x in nums] if nums else nums[0]")),
    ]
    grades = task.grade_many([r for _, r, _ in cases], [fenced(p) for _, _, p in cases])
    return {name: g for (name, _, _), g in zip(cases, grades)}


def test_lcb_statuses_are_distinct(lcb_grades):
    g = lcb_grades
    assert (g["ok"]["status"], g["ok"]["reward"], g["ok"]["passed"], g["ok"]["total"]) == ("ok", 1.0, 3, 3)
    # sys.stdin, open(0) in a thread, and os._exit after printing (a fresh runner per case) all pass
    for name in ("sys_stdin", "open0_thread", "os_exit"):
        assert (g[name]["status"], g[name]["passed"]) == ("ok", 3), (name, g[name])
    expected = {"wrong": "wrong_answer", "timeout": "timeout", "runtime": "runtime_error", "syntax": "compile_error"}
    for name, status in expected.items():
        assert (g[name]["status"], g[name]["reward"], g[name]["correct"]) == (status, 0.0, False), (name, g[name])
    assert "ZeroDivisionError" in g["runtime"]["detail"] and "SyntaxError" in g["syntax"]["detail"]
    # Pass@1 stops at the first failed case: the public case passes, the first private case fails
    assert (g["public_only"]["passed"], g["public_only"]["total"]) == (1, 3)


def test_lcb_functional_class_solution(lcb_grades):
    g = lcb_grades
    assert (g["f_ok"]["status"], g["f_ok"]["passed"], g["f_ok"]["total"], g["f_ok"]["reward"]) == ("ok", 3, 3, 1.0)
    assert g["f_tuple"]["correct"]  # a tuple return compares as a list, as LiveCodeBench's checker does
    assert (g["f_wrong"]["status"], g["f_wrong"]["correct"]) == ("wrong_answer", False)
    # right on the public case, then nums[0] raises on the empty private input
    assert (g["f_raises"]["status"], g["f_raises"]["passed"]) == ("runtime_error", 1)


def test_lcb_private_tests_decode_and_run():
    private = [{"input": "7 8\n", "output": "15\n", "testtype": "stdin"}]
    assert decode_private_tests(compress(private)) == private
    assert decode_private_tests(json.dumps(private)) == private  # the non-lite files hold plain JSON
    evil = base64.b64encode(zlib.compress(pickle.dumps(dt.date(2024, 1, 1)))).decode()
    with pytest.raises(ValueError, match="refusing pickled global"):
        decode_private_tests(evil)
    spec = get_task("livecodebench").cases(lcb_stdin_row())
    assert spec["kind"] == "stdin" and [c["input"] for c in spec["tests"]] == ["1 2\n", "10 20\n", "-5 5\n"]
    spec = get_task("livecodebench").cases(lcb_functional_row())
    assert spec["entry_point"] == "shiftAll"
    assert spec["tests"][2] == {"args": [[-1, 0, 9], -2], "expected": [-3, -2, 7]}


def test_lcb_fraction_mode_counts_every_case():
    task = get_task("livecodebench").options(reward_mode="fraction")
    row = lcb_stdin_row()
    prog = "a, b = map(int, input().split())\nprint(a + b if a * b <= 2 else a * b)\n"
    g = task.grade(row, fenced(prog))  # "1 2" -> 3 right; "10 20" -> 200 wrong; "-5 5" -> 0 right
    assert (g["passed"], g["total"], g["reward"], g["correct"]) == (2, 3, pytest.approx(2 / 3), False)
    all_pass = get_task("livecodebench").grade(row, fenced(prog))
    assert (all_pass["passed"], all_pass["reward"], all_pass["status"]) == (1, 0.0, "wrong_answer")


def test_lcb_no_program_and_prompts():
    task = get_task("livecodebench")
    g = task.grade(lcb_stdin_row(), "I would add the numbers.")
    assert (g["parsed"], g["reward"], g["status"]) == (False, 0.0, "error")
    assert task.extract("maybe") is None and task.extract(SUM_OK) == SUM_OK  # bare code without a fence runs
    assert "standard input" in task.problem_text(lcb_stdin_row())
    text = task.problem_text(lcb_functional_row())
    assert "starter code" in text and STARTER.strip() in text and "standard input" not in text


def test_lcb_version_windows_and_loader(tmp_path):
    assert VERSIONS["release_v5"] == (dt.date(2023, 5, 1), dt.date(2025, 2, 1))
    assert VERSIONS["release_v6"] == (dt.date(2023, 5, 1), dt.date(2025, 5, 1))
    assert VERSIONS["v6"] == (dt.date(2025, 2, 1), dt.date(2025, 5, 1))
    assert VERSIONS["v5"] == (dt.date(2024, 10, 1), dt.date(2025, 2, 1))
    assert VERSIONS["v4_v5"] == (dt.date(2024, 8, 1), dt.date(2025, 2, 1))
    folder = tmp_path / "code" / "livecodebench"
    folder.mkdir(parents=True)
    rows = [lcb_stdin_row("old", "2023-04-30T00:00:00"), lcb_stdin_row("nov24", "2024-11-10T00:00:00"),
            lcb_functional_row("jan31", "2025-01-31T23:00:00"), lcb_functional_row("feb25", "2025-02-01T00:00:00"),
            lcb_stdin_row("may25", "2025-05-01T00:00:00")]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:3]))
    (folder / "test6.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[2:]))  # "jan31" twice
    ids = lambda name, **kw: [r["id"] for r in get_task(name).options(**kw).problems(data_dir=str(tmp_path))]
    assert ids("livecodebench") == ["old", "nov24", "jan31", "feb25", "may25"]
    assert ids("livecodebench_v5") == ["nov24", "jan31"]
    assert ids("livecodebench_v6") == ["feb25"]  # the 2025-02-01..2025-05-01 window (tests/test_lcb_windows.py)
    assert ids("livecodebench_release_v6") == ["nov24", "jan31", "feb25"]  # the cumulative release
    assert ids("livecodebench", version="v6") == ["feb25"]
    assert ids("livecodebench", start_date="2024-12-01", end_date="2025-02-01") == ["jan31", "feb25"]
    loaded = get_task("livecodebench").problems(data_dir=str(tmp_path), limit=2)[1]
    assert {k: v for k, v in loaded.items() if k != "id"} == rows[1]  # the row as the file holds it
    with pytest.raises(ValueError, match="version"):
        get_task("livecodebench").options(version="v9")
    with pytest.raises(FileNotFoundError, match="livecodebench"):
        get_task("livecodebench").problems(data_dir=str(tmp_path / "code"))


# ----------------------------------------------------------------------------- CodeContests

def cc_row(name="1_A. Sum", seconds=1, nanos=0, memory=256 << 20):
    return {"name": name, "description": "Print the sum of two integers.",
            "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
            "private_tests": {"input": ["10 20\n"], "output": ["30\n"]},
            "generated_tests": {"input": ["0 0\n", "7 -7\n"], "output": ["0\n", "0\n"]},
            "source": 2, "difficulty": 7, "solutions": {"language": [], "solution": []},
            "time_limit": {"seconds": seconds, "nanos": nanos}, "memory_limit_bytes": memory}


def cc_float_row():
    return {"name": "2_B. Third", "description": "Print n / 3 with absolute or relative error at most 1e-6.",
            "public_tests": {"input": ["1\n"], "output": ["0.333333333333\n"]},
            "private_tests": {"input": ["3000000\n"], "output": ["1000000.0\n"]},
            "generated_tests": {"input": [], "output": []}, "difficulty": 0,
            "time_limit": None, "memory_limit_bytes": 0}


@pytest.fixture(scope="module")
def cc_grades():
    task = get_task("codecontests").options(time_scale=1.0)  # the published limits: a 1 s time-out case
    hog = "a = bytearray(400 << 20)\nprint(len(a))\n"
    cases = [
        ("ok", cc_row(), SUM_OK),
        ("wrong", cc_row(), "a, b = map(int, input().split())\nprint(a * b)\n"),
        ("timeout", cc_row(), "import time\ntime.sleep(5)\n"),
        ("runtime", cc_row(), "raise ValueError('boom')\n"),
        ("syntax", cc_row(), "print(1\n"),
        ("memory", cc_row(), hog),
        # 10 s: zero-filling 400 MB took over 1 s on a loaded 2-core host; the point here is memory
        ("memory_roomy", cc_row(seconds=10, memory=1 << 30), hog + "a, b = map(int, input().split())\n"),
        ("float_close", cc_float_row(), "print(f'{int(input()) / 3:.7f}')\n"),
        ("float_far", cc_float_row(), "print(f'{int(input()) / 3:.3f}')\n"),
    ]
    grades = task.grade_many([r for _, r, _ in cases], [fenced(p) for _, _, p in cases])
    return {name: g for (name, _, _), g in zip(cases, grades)}


def test_cc_statuses_and_limits(cc_grades):
    g = cc_grades
    assert (g["ok"]["status"], g["ok"]["passed"], g["ok"]["total"], g["ok"]["reward"]) == ("ok", 4, 4, 1.0)
    expected = {"wrong": "wrong_answer", "timeout": "timeout", "runtime": "runtime_error", "syntax": "compile_error",
                "memory": "memory"}
    for name, status in expected.items():
        assert (g[name]["status"], g[name]["correct"]) == (status, False), (name, g[name])
    assert g["memory_roomy"]["status"] == "wrong_answer"  # 1 GiB allows the 400 MB buffer; its output is wrong


def test_cc_float_tolerance(cc_grades):
    assert cc_grades["float_close"]["correct"] and cc_grades["float_close"]["passed"] == 2
    assert (cc_grades["float_far"]["status"], cc_grades["float_far"]["passed"]) == ("wrong_answer", 0)


def test_cc_cases_take_the_problem_limits():
    task = get_task("codecontests").options(time_scale=1.0)
    spec = task.cases(cc_row(seconds=2, nanos=500_000_000, memory=64 << 20))
    assert (spec["timeout_s"], spec["memory_mb"], len(spec["tests"])) == (2.5, 64, 4)
    assert task.options(time_scale=2.0).cases(cc_row(seconds=1))["timeout_s"] == 2.0
    assert time_limit_s(cc_float_row()) is None
    spec = task.cases(cc_float_row())
    assert (spec["timeout_s"], spec["memory_mb"]) == (task.timeout_s, task.memory_mb)  # none given: the defaults
    assert [c["input"] for c in task.options(test_sets=("private",)).cases(cc_row())["tests"]] == ["10 20\n"]
    with pytest.raises(ValueError, match="test_sets"):
        task.options(test_sets=("hidden",))


def test_cc_parquet_loader_and_fraction(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq
    folder = tmp_path / "code" / "codecontests"
    folder.mkdir(parents=True)
    rows = [cc_row("1_A. Sum"), cc_row("2_A. Other", seconds=3)]
    pq.write_table(pa.Table.from_pylist(rows), folder / "test-00000-of-00001-0123abcd.parquet")
    loaded = get_task("codecontests").problems(data_dir=str(tmp_path))
    assert [r["id"] for r in loaded] == ["1_A. Sum", "2_A. Other"]
    assert loaded[1]["time_limit"] == {"seconds": 3, "nanos": 0} and loaded[0]["public_tests"] == rows[0]["public_tests"]
    task = get_task("codecontests").options(reward_mode="fraction")
    g = task.grade(loaded[0], fenced("a, b = map(int, input().split())\nprint(a + b if a else 1)\n"))
    # 1 2 -> 3 ok; 10 20 -> 30 ok; 0 0 -> 1 wrong; 7 -7 -> 0 ok
    assert (g["passed"], g["total"], g["reward"], g["status"]) == (3, 4, 0.75, "wrong_answer")
    with pytest.raises(ValueError, match="split"):
        get_task("codecontests").problems("dev", data_dir=str(tmp_path))


@pytest.mark.parametrize("got,want,compare,ok", [
    ("1  2\n\n", "1 2", "tokens", True),
    ("0.0000001", "0", "tokens", True),
    ("0.333334", "0.333333333", "tokens", True),
    ("0.3334", "0.333333333", "tokens", False),
    ("1000002.0", "1000000.0", "tokens", False),  # relative error 2e-6
    ("1000000.0000009", "1000000.0", "tokens", True),
    ("100000000000000001", "100000000000000000", "tokens", False),
    ("YES", "yes", "tokens", False),
    ("1 2 3", "1 2", "tokens", False),
    ("1.0 2\n", "1 2.00", "lines", True),
    ("1 2", "1\n2", "lines", False),
    ("a  b", "a b", "lines", False),
    ("0.3333333", "0.33333333", "lines", False),
])
def test_outputs_match(got, want, compare, ok):
    assert C.outputs_match(got, want, compare, 1e-6) is ok


# ----------------------------------------------------------------------------- HMMT

def test_hmmt_grades_equivalent_forms(tmp_path):
    folder = tmp_path / "math"
    folder.mkdir()
    published = [{"problem_idx": 1, "problem": "Compute 1/2.", "answer": "\\frac{1}{2}", "problem_type": ["Algebra"]},
                 {"problem_idx": 2, "problem": "Compute 2^{10}.", "answer": "1024", "problem_type": ["Algebra"]}]
    (folder / "hmmt_feb2025.jsonl").write_text("".join(json.dumps(r) + "\n" for r in published))
    task = get_task("hmmt_feb2025")
    rows = task.problems(data_dir=str(tmp_path))
    assert [r["id"] for r in rows] == ["1", "2"] and task.problem_text(rows[0]) == "Compute 1/2."
    for row, completion, correct in [(rows[0], "So it is \\boxed{0.5}.", True),
                                     (rows[0], "\\boxed{\\frac{2}{4}}", True),
                                     (rows[0], "\\boxed{0.6}", False),
                                     (rows[1], "\\boxed{1024}", True),
                                     (rows[1], "\\boxed{1000}", False)]:
        g = task.grade(published[rows.index(row)], completion)
        assert g["correct"] is correct and g["reward"] == float(correct)
        assert is_equivalent(g["answer"], row["answer"]) is correct  # the math grader's own verdict
    assert task.gold_key(published[0]) == "\\frac{1}{2}"


# ----------------------------------------------------------------------------- sandbox input checks, CPU config

def test_case_kinds_validate_their_tests():
    assert C.count_tests([{"args": [1], "expected": 2}] * 3, kind="functional", entry_point="f") == 3
    assert C.count_tests([{"input": "", "output": ""}] * 2, kind="stdin") == 2
    with pytest.raises(ValueError, match="entry_point"):
        C.evaluate("def f(x): return x\n", [{"args": [1], "expected": 1}], kind="functional")
    with pytest.raises(ValueError, match="args"):
        C.evaluate("def f(x): return x\n", [{"input": "1", "output": "1"}], kind="functional", entry_point="f")
    with pytest.raises(ValueError, match="compare"):
        C.evaluate("print(1)\n", [{"input": "", "output": "1"}], kind="stdin", compare="exact")
    with pytest.raises(ValueError, match="reward_mode"):
        get_task("codecontests").options(reward_mode="partial")


def test_tiny_code_config_fixture_grades():
    """The CPU config's fixture is valid LiveCodeBench data: correct programs pass every case."""
    config = load_config(os.path.join(os.path.dirname(__file__), "..", "configs", "eval", "tiny_code_v1.py"))
    task = get_task(config.task)
    rows = task.problems(data_dir=config.data_dir, limit=config.num_problems)
    assert [r["id"] for r in rows] == ["tiny_sum", "tiny_reverse"]
    programs = {"tiny_sum": SUM_OK,
                "tiny_reverse": "class Solution:\n    def reverseWords(self, s):\n        return ' '.join(s.split()[::-1])\n"}
    grades = task.grade_many(rows, [fenced(programs[r["id"]]) for r in rows])
    assert [(g["status"], g["passed"], g["total"]) for g in grades] == [("ok", 3, 3), ("ok", 3, 3)]
