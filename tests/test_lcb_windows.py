"""LiveCodeBench windows (issue 45 §2): each task's (release, start, end) on rows with hand-chosen
contest dates at the boundaries (start inclusive, end exclusive), the count eval prints, and the
per-difficulty rows of summary.md on a tiny eval whose results rows are written by hand."""

from __future__ import annotations

import datetime as dt
import json
import types

import ml_collections
import pytest

from prd_jax.evaluate import difficulty_markdown, difficulty_table, evaluate
from prd_jax.tasks import get_task
from prd_jax.tasks.livecodebench import RELEASES


def lcb_row(qid: str, date: str, difficulty: str = "easy") -> dict:
    return {"question_id": qid, "question_title": qid, "question_content": f"Print A+B ({qid}).",
            "platform": "atcoder", "contest_id": "abc", "contest_date": date, "starter_code": "",
            "difficulty": difficulty, "metadata": "{}", "private_test_cases": "",
            "public_test_cases": json.dumps([{"input": "1 2\n", "output": "3\n", "testtype": "stdin"}])}


# (id, contest_date): each a day on one side of a window boundary
DATES = [("may23_before", "2023-04-30T23:59:59"), ("jul31", "2024-07-31T23:59:59"), ("aug01", "2024-08-01T00:00:00"),
         ("jan31", "2025-01-31T23:59:59"), ("feb01", "2025-02-01T00:00:00"), ("apr30", "2025-04-30T12:00:00"),
         ("may01", "2025-05-01T00:00:00")]


@pytest.fixture()
def data_dir(tmp_path):
    folder = tmp_path / "code" / "livecodebench"
    folder.mkdir(parents=True)
    rows = [lcb_row(q, d) for q, d in DATES]
    (folder / "test.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[:4]))
    (folder / "test6.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows[4:]))
    return str(tmp_path)


def ids(name: str, data_dir: str, **options) -> list:
    task = get_task(name).options(**options) if options else get_task(name)
    return [r["id"] for r in task.problems(data_dir=data_dir)]


def test_windows_select_by_contest_day_start_inclusive_end_exclusive(data_dir):
    assert ids("livecodebench_v5", data_dir) == ["aug01", "jan31"]
    assert ids("livecodebench_v6", data_dir) == ["feb01", "apr30"]
    assert ids("livecodebench_release_v5", data_dir) == ["jul31", "aug01", "jan31"]
    assert ids("livecodebench_release_v6", data_dir) == ["jul31", "aug01", "jan31", "feb01", "apr30"]
    assert ids("livecodebench", data_dir) == [q for q, _ in DATES]
    # the other reading of "v6" (2024-08-01..2025-05-01)
    assert ids("livecodebench_v6", data_dir, start="2024-08-01") == ["aug01", "jan31", "feb01", "apr30"]
    # LiveCodeBench-style inclusive days narrow a window further
    assert ids("livecodebench_v6", data_dir, end_date="2025-02-01") == ["feb01"]


def test_window_fields_and_errors():
    v5, v6 = get_task("livecodebench_v5"), get_task("livecodebench_v6")
    assert (v5.release, v5.start, v5.end) == ("release_v5", "2024-08-01", "2025-02-01")
    assert (v6.release, v6.start, v6.end) == ("release_v6", "2025-02-01", "2025-05-01")
    assert v6.window() == (dt.date(2025, 2, 1), dt.date(2025, 5, 1), "release_v6")
    # a window reaching past its release ends where the release does (release_v5: up to Jan 2025)
    assert v5.options(end="2025-06-01").window()[1] == dt.date(2025, 2, 1)
    assert RELEASES == tuple(f"release_v{n}" for n in range(1, 7))
    with pytest.raises(ValueError, match=r"release='release_v9'; allowed: None or one of \('release_v1'"):
        v5.options(release="release_v9")
    with pytest.raises(ValueError, match=r"start='2025-05-01' must come before end='2025-02-01'"):
        v5.options(start="2025-05-01", end="2025-02-01")
    with pytest.raises(ValueError, match=r"end='2025-13-01'; allowed: '' or an ISO date"):
        v5.options(end="2025-13-01")


def test_selection_lines(data_dir):
    v6 = get_task("livecodebench_v6")
    assert v6.selection(v6.problems(data_dir=data_dir)) == (
        "livecodebench_v6: 2 problems (2025-02-01..2025-05-01 of release_v6)")
    rel = get_task("livecodebench_release_v5")
    assert rel.selection([{}] * 3) == "livecodebench_release_v5: 3 problems (2023-05-01..2025-02-01 of release_v5)"
    assert get_task("livecodebench").selection([{}]) == "livecodebench: 1 problems (every row)"
    assert get_task("humaneval").selection([{}] * 5) == "humaneval: 5 problems"


def result(pid: str, op: str, sample: int, correct: bool, b_seq: int = 10) -> dict:
    return {"problem_id": pid, "operator": op, "sample": sample, "correct": correct, "parsed": True,
            "b_seq": b_seq, "b_total": 2 * b_seq, "b_seq_io": 3 * b_seq, "b_total_io": 4 * b_seq, "truncations": 0}


def test_difficulty_table_by_hand():
    rows = [result("e1", "op", 0, True), result("e1", "op", 1, True), result("h1", "op", 0, False),
            result("h1", "op", 1, True, b_seq=30), result("h2", "op", 0, False), result("h2", "op", 1, False),
            result("x", "op", 0, True)]  # "x" has no label: left out
    table = difficulty_table(rows, {"e1": "easy", "h1": "hard", "h2": "hard"})
    assert [(t["difficulty"], t["problems"], t["k"]) for t in table] == [("easy", 1, 2), ("hard", 2, 2)]
    hard = table[1]
    assert hard["mean_at_k"] == pytest.approx(0.25)  # (1/2 + 0) / 2
    assert hard["pass_at_k"] == pytest.approx(0.5) and hard["b_seq"] == pytest.approx(15.0)  # (10 + 30 + 10 + 10) / 4
    assert "| hard | op | 2 | 2 | 0.250 | 0.500 | 15 | 30 |" in difficulty_markdown(table)


def test_eval_prints_the_count_and_writes_per_difficulty_rows(tmp_path, capsys):
    """A tiny eval on a CPU model whose results rows are already written (hand-chosen correctness):
    the run only reads them back, so summary.md's per-difficulty rows are computed by hand."""
    import jax

    from prd_jax.data import synthetic
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.model.decoder import init_params

    folder = tmp_path / "data" / "code" / "livecodebench"
    folder.mkdir(parents=True)
    problems = [lcb_row("e", "2025-02-03T00:00:00", "easy"), lcb_row("m", "2025-03-03T00:00:00", "medium"),
                lcb_row("h1", "2025-04-03T00:00:00", "hard"), lcb_row("h2", "2025-04-04T00:00:00", "hard"),
                lcb_row("old", "2024-12-03T00:00:00", "hard")]  # outside the v6 window
    (folder / "test6.jsonl").write_text("".join(json.dumps(r) + "\n" for r in problems))
    workdir = tmp_path / "ev"
    workdir.mkdir()
    LABEL = "long_cot(budget=4)"  # the operator's label (`spec.label`) in results rows
    correct = {("e", 0): True, ("e", 1): True, ("m", 0): True, ("m", 1): False,
               ("h1", 0): False, ("h1", 1): True, ("h2", 0): False, ("h2", 1): False}
    with open(workdir / "results.jsonl", "w") as f:
        for (pid, sample), ok in correct.items():
            f.write(json.dumps(result(pid, LABEL, sample, ok)) + "\n")
    config = ml_collections.ConfigDict(dict(
        task="livecodebench_v6", data_dir=str(tmp_path / "data"), model="tiny", seed=0, k_samples=2, batch_size=4,
        num_problems=10, sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=512,
        operators=[dict(type="long_cot", max_new_tokens=4)]))
    cfg = NAMED_CONFIGS["tiny"].replace(vocab_size=128, max_position=1024)
    model = types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(0)),
                                  tokenizer=synthetic.CharVocab(), mesh=None)
    (t,) = evaluate(config, str(workdir), model=model, progress=False)
    assert "livecodebench_v6: 4 problems (2025-02-01..2025-05-01 of release_v6)" in capsys.readouterr().out
    assert (t["problems"], t["mean_at_k"]) == (4, pytest.approx((1 + 0.5 + 0.5 + 0) / 4))
    summary = (workdir / "summary.md").read_text()
    assert "| difficulty | operator | problems | k | mean@k | pass@k | mean B_seq | mean B_total |" in summary
    assert f"| easy | {LABEL} | 1 | 2 | 1.000 | 1.000 | 10 | 20 |" in summary
    assert f"| medium | {LABEL} | 1 | 2 | 0.500 | 1.000 | 10 | 20 |" in summary
    assert f"| hard | {LABEL} | 2 | 2 | 0.250 | 0.500 | 10 | 20 |" in summary
    assert summary.index("| easy |") < summary.index("| medium |") < summary.index("| hard |")
    with open(workdir / "results.jsonl") as f:  # nothing was generated: every row was already there
        assert len(f.readlines()) == len(correct)
