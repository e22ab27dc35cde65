"""Task plug-ins (issue 14 §1, §3): registry, math / code / synthetic grading, the operators'
host callbacks, config selection, and HumanEval's 164 canonical solutions through the sandbox."""

import dataclasses
import threading
import time

import ml_collections
import numpy as np
import pytest

from prd_jax.rewards import code as C
from prd_jax.tasks import TASKS, Task, get_task, register_task, task_for_config
from prd_jax.tasks.grading import TaskGrader, TaskGrouper
from prd_jax.tasks.humaneval import extract_program, normalize_program
from tests.fakes import CharTokenizer

TOK = CharTokenizer()


def _fenced(code: str, lead: str = "Here is my solution.\n") -> str:
    return f"{lead}```python\n{code}```\nThat is all."


@pytest.fixture(scope="module")
def humaneval_rows():
    return get_task("humaneval").problems()


# ----------------------------------------------------------------------------- registry

def test_builtin_tasks_and_their_declarations():
    assert {"gsm8k", "math500", "aime2024", "aime2025", "humaneval", "modchain", "modinverse"} <= set(TASKS)
    he, gsm, mod = get_task("humaneval"), get_task("gsm8k"), get_task("modchain")
    assert (he.templates, he.judge_domain) == ("code", "code")
    assert (gsm.templates, gsm.judge_domain) == ("default", "math")
    # each declares its data once: JSONL files per split under the data dir
    assert dict(gsm.source.splits) == {"train": "math/gsm8k_train.jsonl", "test": "math/gsm8k_test.jsonl"}
    assert dict(he.source.splits) == {"test": "code/humaneval.jsonl"} and he.source.id_key == "task_id"
    assert mod.source is None  # drawn, not read: problems() is its own
    assert (mod.templates, get_task("modinverse").family) == ("compact", "modinverse")
    assert set(he.judge_templates) == {"pairwise", "pointwise"}


def test_unknown_task_names_the_allowed_ones():
    with pytest.raises(ValueError, match=r"task='nope'; allowed: \['aime2024'"):
        get_task("nope")


def test_register_a_user_task_and_refuse_a_silent_duplicate():
    @dataclasses.dataclass(frozen=True)
    class Upper(Task):
        def extract(self, completion):
            return completion.strip().split()[-1] if completion.strip() else None

        def grade(self, row, completion):
            ans = self.extract(completion)
            ok = ans is not None and ans.upper() == row["answer"].upper()
            return {"reward": float(ok), "correct": ok, "parsed": ans is not None}

        def answer_key(self, completion):
            ans = self.extract(completion)
            return None if ans is None else ans.upper()

    task = register_task(Upper("test_upper"))
    try:
        assert get_task("test_upper") is task
        assert task.reward({"answer": "Paris"}, "it is paris") == 1.0
        assert task.grade({"answer": "Paris"}, "") == {"reward": 0.0, "correct": False, "parsed": False}
        with pytest.raises(ValueError, match="already registered"):
            register_task(Upper("test_upper"))
        register_task(Upper("test_upper"), replace=True)
    finally:
        TASKS.pop("test_upper", None)


def test_a_task_missing_a_method_is_refused_at_registration():
    @dataclasses.dataclass(frozen=True)
    class NoKey(Task):
        def extract(self, completion):
            return completion

        def grade(self, row, completion):
            return {"reward": 1.0, "correct": True, "parsed": True}

    with pytest.raises(ValueError, match=r"task 'test_nokey' \(NoKey\) does not define \['answer_key'\]"):
        register_task(NoKey("test_nokey"))
    with pytest.raises(ValueError, match=r"does not define \['extract', 'grade', 'answer_key'\]"):
        register_task(Task("test_bare"))
    assert "test_nokey" not in TASKS and "test_bare" not in TASKS


def test_options_validate_field_names_and_reward_modes():
    he = get_task("humaneval")
    assert he.options(reward_mode="all_pass").reward_mode == "all_pass"
    assert he.reward_mode == "fraction"  # the registered task is unchanged
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['colour'\]; allowed: \["):
        he.options(colour="red")
    with pytest.raises(ValueError, match=r"reward_mode='most'; allowed: \('fraction', 'all_pass'\)"):
        he.options(reward_mode="most")


def test_task_for_config_is_config_task():
    cfg = lambda **kw: ml_collections.ConfigDict(kw)
    assert task_for_config(cfg(task="aime2025")).name == "aime2025"
    assert task_for_config(cfg(task="modinverse", data=dict(num_train=4))).name == "modinverse"
    with pytest.raises(ValueError, match="config.task is unset"):
        task_for_config(cfg(data=dict(num_train=4)))
    with pytest.raises(ValueError, match=r"task='mystery'; allowed: \["):
        task_for_config(cfg(task="mystery"))
    with pytest.raises(ValueError, match="config.dataset was removed: use config.task"):
        task_for_config(cfg(task="humaneval", dataset="gsm8k_test"))  # tests/test_task_plugin.py has the rest


# ----------------------------------------------------------------------------- math

def test_math_task_grades_extracts_and_keys():
    t = get_task("math500")
    g = t.grade({"answer": "\\frac{1}{2}"}, "so the result is \\boxed{0.5}")
    assert g == {"reward": 1.0, "correct": True, "parsed": True, "answer": "0.5"}
    assert t.grade({"answer": "3"}, "no digits here") == {"reward": 0.0, "correct": False, "parsed": False,
                                                          "answer": None}
    assert t.answer_key("x \\boxed{\\dfrac{1}{2}}") == t.answer_key("\\boxed{\\frac{1}{2}}") == "\\frac{1}{2}"
    assert t.gold_key({"answer": 12}) == "12"
    assert [g["correct"] for g in t.grade_many([{"answer": "4"}] * 3, ["\\boxed{4}", "\\boxed{5}", "4"])] == \
        [True, False, True]


def test_synthetic_task_problems_are_deterministic_and_graded_as_math():
    t = get_task("modchain")
    a, b = t.problems("train", limit=5), t.problems("train", limit=5)
    assert a == b and len(a) == 5 and a != t.problems("test", limit=5)
    row = a[0]
    assert t.reward(row, f"\\boxed{{{row['answer']}}}") == 1.0
    with pytest.raises(ValueError, match=r"split='dev' of task 'modchain'; allowed: \['test', 'train'\]"):
        t.problems("dev")


# ----------------------------------------------------------------------------- code

def test_extract_program_takes_the_last_python_fence():
    text = "```python\nx = 1\n```\nthen\n```\nprint('shell')\n```\n```py\ndef f():\n    return 2\n```"
    assert extract_program(text) == "def f():\n    return 2\n"
    assert extract_program("```python\ndef f():\n    return 3\n") == "def f():\n    return 3\n"  # unclosed
    assert extract_program("```bash\nls\n```") is None
    assert extract_program("def f():\n    return 4\n", "f") == "def f():\n    return 4\n"  # bare, parses
    assert extract_program("def f(:\n", "f") is None and extract_program("", "f") is None


def test_normalize_program_ignores_docstrings_comments_and_layout():
    a = 'def f(x):\n    """Doc."""\n    # comment\n    return x+1\n'
    b = "def f(x):\n\n    return (x + 1)\n"
    assert normalize_program(a) == normalize_program(b) == "def f(x):\n    return x + 1"
    assert normalize_program("def (") == "def ("


@pytest.mark.slow
def test_humaneval_all_164_canonical_solutions_score_one(humaneval_rows):
    t = get_task("humaneval")
    rows = humaneval_rows
    assert len(rows) == 164 and rows[0]["task_id"] == "HumanEval/0"
    assert {"task_id", "prompt", "canonical_solution", "test", "entry_point"} <= set(rows[0])
    completions = [_fenced(r["prompt"] + r["canonical_solution"]) for r in rows]
    t0 = time.monotonic()
    grades = t.grade_many(rows, completions)  # one evaluate_many call, bounded parallelism
    elapsed = time.monotonic() - t0
    bad = [(r["task_id"], g["status"], g["detail"]) for r, g in zip(rows, grades) if g["reward"] != 1.0]
    assert bad == []
    assert all(g["correct"] and g["parsed"] and g["status"] == "ok" for g in grades)
    assert all(type(g["passed"]) is int and g["passed"] == g["total"] > 0 for g in grades)
    totals = {r["task_id"]: g["total"] for r, g in zip(rows, grades)}
    assert totals["HumanEval/0"] == 7 and totals["HumanEval/32"] == 1 and totals["HumanEval/144"] == 13
    assert all(g["total"] == C.count_tests(r["test"], entry_point=r["entry_point"]) for r, g in zip(rows, grades))
    print(f"164 canonical programs graded in {elapsed:.1f} s")


@pytest.mark.slow
def test_humaneval_broken_bodies_score_below_one(humaneval_rows):
    t = get_task("humaneval")
    row = humaneval_rows[0]  # has_close_elements: 7 asserts, 3 of them expect False
    g = t.grade(row, _fenced(row["prompt"] + "    return False\n"))
    assert (g["passed"], g["total"], g["status"], g["correct"]) == (3, 7, "failed", False)
    assert g["reward"] == pytest.approx(3 / 7)
    assert t.options(reward_mode="all_pass").reward(row, _fenced(row["prompt"] + "    return False\n")) == 0.0
    assert t.reward(row, _fenced(row["prompt"] + "    return undefined_name\n")) == 0.0
    assert t.reward(row, "I cannot write this.") == 0.0
    g = t.grade(row, "I cannot write this.")
    assert (g["parsed"], g["passed"], g["total"], g["status"]) == (False, 0, 7, "error")


@pytest.mark.slow
def test_humaneval_accepts_a_body_only_and_a_whole_function(humaneval_rows):
    t = get_task("humaneval")
    row = humaneval_rows[2]  # truncate_number
    body = row["canonical_solution"]
    whole = f"def {row['entry_point']}(number: float) -> float:\n{body}"
    assert t.reward(row, _fenced(body)) == 1.0  # continues the prompt
    assert t.reward(row, _fenced(whole)) == 1.0  # redefines the stub
    assert t.answer_key(_fenced(whole)) == t.answer_key(_fenced("# mine\n" + whole))


def test_code_grade_many_runs_programs_in_parallel(monkeypatch):
    state = {"now": 0, "max": 0}
    lock = threading.Lock()

    def fake_evaluate(program, tests, **kw):
        with lock:
            state["now"] += 1
            state["max"] = max(state["max"], state["now"])
        time.sleep(0.05)
        with lock:
            state["now"] -= 1
        return C.CodeResult(1, 1, "ok")

    monkeypatch.setattr(C, "evaluate", fake_evaluate)
    monkeypatch.setattr(C, "isolation", lambda: "rlimits")
    row = {"task_id": "T/0", "prompt": "def f():\n", "test": "def check(c):\n    assert c() == 1\n",
           "entry_point": "f"}
    t = get_task("humaneval").options(workers=4)
    grades = t.grade_many([row] * 16, [_fenced("    return 1\n")] * 16)
    assert [g["reward"] for g in grades] == [1.0] * 16
    assert state["max"] == 4  # bounded, and not one after another


# ----------------------------------------------------------------------------- operator callbacks

def _pad(seqs, pad=0):
    w = max(len(s) for s in seqs)
    out = np.full((len(seqs), w), pad, np.int32)
    for i, s in enumerate(seqs):
        out[i, :len(s)] = s
    return out, np.array([len(s) for s in seqs], np.int32)


def test_task_grader_math_oracle_matches_hand_labels():
    grader = TaskGrader("gsm8k", TOK)
    cands = ["\\boxed{6}", "answer: 7", "\\boxed{6.0}", "nothing"]
    golds = ["6", "6", "6", "6"]
    ct, cl = _pad([TOK.encode(c) for c in cands])
    at, al = _pad([TOK.encode(g) for g in golds])
    assert grader.correct(ct, cl, at, al).tolist() == [True, False, True, False]


def test_task_grader_code_looks_rows_up_by_task_id(humaneval_rows):
    rows = humaneval_rows[:2]
    grader = TaskGrader("humaneval", TOK, rows)
    cands = [_fenced(rows[0]["prompt"] + rows[0]["canonical_solution"]),
             _fenced(rows[1]["prompt"] + "    return []\n"),
             _fenced(rows[1]["prompt"] + rows[1]["canonical_solution"])]
    keys = [rows[0]["task_id"], rows[1]["task_id"], rows[1]["task_id"]]
    ct, cl = _pad([TOK.encode(c) for c in cands])
    at, al = _pad([TOK.encode(k) for k in keys])
    assert grader.correct(ct, cl, at, al).tolist() == [True, False, True]
    with pytest.raises(KeyError, match="no row registered for gold key 'HumanEval/0'"):
        TaskGrader("humaneval", TOK).correct(ct[:1], cl[:1], at[:1], al[:1])


def test_task_grouper_groups_by_answer_key():
    texts = [["\\boxed{2}", "\\boxed{3}", "so \\boxed{2}", "no answer"],
             ["```python\ndef f():\n    return 1\n```", "```python\ndef f():\n    return (1)  # same\n```",
              "```python\ndef f():\n    return 2\n```", "plain"]]
    flat = [TOK.encode(t) for row in texts for t in row]
    tok, lens = _pad(flat)
    tok, lens = tok.reshape(2, 4, -1), lens.reshape(2, 4)
    assert TaskGrouper("gsm8k", TOK)(tok[:1], lens[:1]).tolist() == [[0, 1, 0, -1]]
    assert TaskGrouper("humaneval", TOK)(tok[1:], lens[1:]).tolist() == [[0, 0, 2, -1]]


def test_docs_example_task_registers_and_grades():
    """The worked task of docs/extending.md ("A task") runs as printed."""
    import os
    import re

    page = open(os.path.join(os.path.dirname(__file__), "..", "docs", "extending.md")).read()
    block = re.search(r"<!-- example-task -->\n```python\n(.*?)```\n<!-- /example-task -->", page, re.S).group(1)
    assert 25 <= len(block.strip().splitlines()) <= 40
    try:
        exec(compile(block, "docs/extending.md example", "exec"), {"__name__": "docs_example"})
        task = get_task("reverse_word")
        rows = task.problems(limit=2)
        assert [r["answer"] for r in rows] == ["xaj", "xalf"]
        assert task.reward(rows[0], "Reversed:\nXAJ") == 1.0 and task.reward(rows[1], "flax") == 0.0
        ct, cl = _pad([TOK.encode(t) for t in ("so\nxaj", "XAJ.", "jax")])
        assert TaskGrouper(task, TOK)(ct[None], cl[None]).tolist() == [[0, 0, 2]]
    finally:
        TASKS.pop("reverse_word", None)


@pytest.mark.slow
def test_humaneval_eval_config_writes_task_rows(tmp_path):
    """`configs/eval/humaneval_v1.py` through `evaluate` (a tiny random model with a character
    vocabulary stands in for SmolLM2): rows carry task, integer passed / total (the problem's
    assert count) and a sandbox status; the summary has pass@1 (mean@k at k = 1)."""
    import json
    import os
    import types

    import jax

    from prd_jax.config_io import apply_overrides, load_config
    from prd_jax.data.synthetic import CharVocab
    from prd_jax.evaluate import evaluate
    from prd_jax.model import get_model_config, init_params

    config = apply_overrides(load_config(os.path.join(os.path.dirname(__file__), "..", "configs", "eval",
                                                      "humaneval_v1.py")),
                             ["--config.num_problems=2", "--config.max_problem_tokens=1024"])
    with config.unlocked():
        config.operators = [o for o in config.operators if o["type"] == "long_cot" or o.get("selector") == "majority"]
        for o in config.operators:
            o.update(max_new_tokens=8, **({"candidate_max_tokens": 8, "truncation_head": 2} if "n" in o else {}))
    cfg = get_model_config("tiny", max_position=2048)
    model = types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(0)), tokenizer=CharVocab(),
                                  mesh=None)
    table = evaluate(config, str(tmp_path / "he"), model=model, progress=False)
    assert {t["operator"].split("(")[0] for t in table} == {"long_cot", "best_of_n"}
    rows = [json.loads(x) for x in open(tmp_path / "he" / "results.jsonl")]
    assert len(rows) == 2 * 2 and {r["problem_id"] for r in rows} == {"HumanEval/0", "HumanEval/1"}
    by_id = {r["task_id"]: r for r in get_task("humaneval").problems(limit=2)}
    for r in rows:
        assert r["task"] == "humaneval" and r["status"] in C.STATUSES
        assert isinstance(r["passed"], int) and isinstance(r["total"], int) and 0 <= r["passed"] <= r["total"]
        assert r["total"] == C.count_tests(by_id[r["problem_id"]]["test"], entry_point=by_id[r["problem_id"]]["entry_point"])
        assert r["correct"] == (r["passed"] == r["total"] > 0)
    assert all(t["k"] == 1 and 0.0 <= t["mean_at_k"] <= t["pass_at_k"] <= 1.0 for t in table)
