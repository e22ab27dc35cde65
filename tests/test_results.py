"""results.json, `prd_jax.results.load` / `load_calls` and `prd-jax results` (issue 47 §1).

Intervals and quantiles are checked against values worked out by hand (the Wilson bounds are
the published ones for 3/4, 4/4 and 0/5); the eval test runs a random tiny model on two
synthetic problems and checks results.json against its own results.jsonl.
"""

import csv as csvlib
import datetime
import importlib.metadata
import json
import os
import socket
import subprocess
import uuid

import pytest

from prd_jax import cli, fileio, results, results_json
from prd_jax.evaluate import summarize

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _row(op, pid, sample, correct, b_seq, parsed=True, **kw):
    return {"problem_id": pid, "operator": op, "sample": sample, "task": "gsm8k", "correct": correct,
            "parsed": parsed, "b_seq": b_seq, "b_total": 2 * b_seq, "b_seq_io": 3 * b_seq, "b_total_io": 4 * b_seq,
            "b_seq_no_judge": b_seq, **kw}


def _write(workdir, rows):
    fileio.makedirs(workdir)
    fileio.write_text(os.path.join(workdir, "results.jsonl"), "".join(json.dumps(r) + "\n" for r in rows))
    return workdir


# A: 4 compared problems x k=2, per-problem means 1, .5, 0, .5 (mean .5), 3 of 4 solved, b_seq 10..80;
# B: 1 sample each, all correct; B's request for p5 failed, so p5 is left out of both.
HAND = ([_row("A", "p1", 0, True, 10, run_id="r1", model="m1"), _row("A", "p1", 1, True, 20, run_id="r1", model="m1"),
         _row("A", "p2", 0, True, 30, run_id="r1", model="m1"),
         _row("A", "p2", 1, False, 40, parsed=False, run_id="r1", model="m1"),
         _row("A", "p3", 0, False, 50, run_id="r1", model="m1"), _row("A", "p3", 1, False, 60, run_id="r1", model="m1"),
         _row("A", "p4", 0, False, 70, run_id="r1", model="m1"), _row("A", "p4", 1, True, 80, run_id="r1", model="m1"),
         _row("A", "p5", 0, True, 90, run_id="r1", model="m1")]
        + [_row("B", f"p{i}", 0, True, 5, run_id="r1", model="m1") for i in range(1, 5)]
        + [{"problem_id": "p5", "operator": "B", "sample": 0, "failed": ["http 500"], "run_id": "r1", "model": "m1"}])


def test_intervals_and_quantiles_by_hand():
    a, b = (results_json.operator_entry(t, "gsm8k") for t in summarize(HAND, detail=True))
    assert (a["operator"], a["problems"], a["k"], a["rows"]) == ("A", 4, 2, 8)
    assert a["mean_at_k"] == 0.5 and a["pass_at_k"] == 0.75
    # s = sqrt((.25 + 0 + .25 + 0) / 3) = 0.40825; stderr = s / 2 = 0.20412; 1.96 x 0.20412 = 0.40008
    assert a["mean_at_k_stderr"] == pytest.approx(0.204124, abs=1e-6)
    assert a["mean_at_k_ci95"] == pytest.approx([0.099924, 0.900076], abs=1e-6)
    assert a["pass_at_k_ci95"] == pytest.approx([0.30064, 0.95441], abs=1e-5)  # Wilson, 3 of 4
    # b_seq over the 8 compared rows 10..80: mean 45, median 45, p90 at rank 0.9 x 7 = 6.3 -> 70 + 0.3 x 10
    assert a["budgets"]["b_seq"] == {"mean": 45.0, "p50": 45.0, "p90": 73.0}
    assert a["budgets"]["b_total_io"] == {"mean": 180.0, "p50": 180.0, "p90": 292.0}
    assert a["counts"] == {"failed": 0, "unparsed": 1, "truncations": 0, "judge_unparsed": 0, "skipped": 0,
                           "problems_dropped": 1}
    assert b["mean_at_k_ci95"] == [1.0, 1.0] and b["mean_at_k_stderr"] == 0.0
    assert b["pass_at_k_ci95"] == pytest.approx([0.510109, 1.0], abs=1e-6)  # Wilson, 4 of 4
    assert b["counts"]["failed"] == 1
    assert results_json.wilson_ci(0, 5) == pytest.approx((0.0, 0.434482), abs=1e-6)
    # clipped: mean .75 of (1, 1, 1, 0), stderr .25, .75 + .49 > 1
    stderr, ci = results_json.normal_ci([1.0, 1.0, 1.0, 0.0])
    assert stderr == 0.25 and ci == pytest.approx((0.75 - 1.959964 * 0.25, 1.0))
    assert results_json.normal_ci([1.0]) == (None, None) and results_json.wilson_ci(0, 0) is None


def test_record_names_the_compared_problems_and_every_invocation():
    rows = HAND + [_row("A", "p6", 0, True, 1, run_id="r2", model="m1"),
                   _row("B", "p6", 0, True, 1, run_id="r2", model="m1")]
    previous = {"invocations": [{"run_id": "r1", "started": "2025-01-01T00:00:00+00:00",
                                 "finished": "2025-01-01T01:00:00+00:00", "rows_written": 14}]}
    rec = results_json.build(summarize(rows, detail=True), rows, task="gsm8k", model="m1", checkpoint="",
                             config={"seed": 0}, run_id="r2", started="2025-01-02T00:00:00+00:00",
                             finished="2025-01-02T00:10:00+00:00", previous=previous)
    assert rec["problems"]["compared"] == ["p1", "p2", "p3", "p4", "p6"] and rec["problems"]["dropped"] == ["p5"]
    assert rec["run_ids"] == ["r1", "r2"] and rec["checkpoint"] is None and rec["config"] == {"seed": 0}
    assert [i["run_id"] for i in rec["invocations"]] == ["r1", "r2"] and rec["invocations"][1]["rows_written"] == 2
    assert (rec["started"], rec["finished"]) == ("2025-01-01T00:00:00+00:00", "2025-01-02T00:10:00+00:00")
    assert [e["operator"] for e in rec["results"]] == ["A", "B"]
    json.dumps(rec, allow_nan=False)  # valid JSON: no NaN


def test_git_commit_is_best_effort(monkeypatch):
    def no_git(*a, **k):
        raise FileNotFoundError("git")

    monkeypatch.setattr(results_json.subprocess, "run", no_git)
    assert results_json.git_commit() is None


@pytest.fixture()
def two_runs(tmp_path):
    """X: model m1, three rows of run rX and a failed row that run rX2 retried; Y: model m2."""
    call = lambda name, i, o, acc: {"name": name, "in_tokens": i, "out_tokens": o, "accepted": acc}
    two = [call("draft", 5, 3, True), call("draft", 5, 4, False)]
    x = [_row("pdr", "p1", 0, True, 3, calls=two, run_id="rX", model="m1"),
         _row("pdr", "p1", 1, False, 3, calls=two, run_id="rX", model="m1"),
         _row("pdr", "p2", 0, True, 3, calls=two, run_id="rX", model="m1"),
         {"problem_id": "p2", "operator": "pdr", "sample": 1, "failed": ["timeout"], "run_id": "rX", "model": "m1"},
         _row("pdr", "p2", 1, True, 4, calls=two + [call("refine", 9, 1, True)], run_id="rX2", model="m1")]
    y = [_row("pdr", "p1", 0, False, 6, calls=[call("long_cot", 5, 6, True)], run_id="rY", model="m2"),
         _row("pdr", "p2", 0, True, 2, calls=[call("long_cot", 5, 2, True)], run_id="rY", model="m2")]
    return _write(str(tmp_path / "x"), x), _write(str(tmp_path / "y"), y)


def test_load_rows_and_calls_of_two_workdirs(two_runs):
    x, y = two_runs
    rows = results.load([x, y])
    assert len(rows) == 4 + 2 and "calls" not in rows.columns
    assert rows.groupby("model").size().to_dict() == {"m1": 4, "m2": 2}
    assert rows.groupby("run_id").size().to_dict() == {"rX": 3, "rX2": 1, "rY": 2}  # the retry replaced its failure
    assert set(rows["workdir"]) == {x, y} and rows["num_calls"].tolist() == [2, 2, 2, 3, 1, 1]
    assert len(results.load(x, latest=False)) == 5
    calls = results.load_calls([x, y])
    assert len(calls) == 2 + 2 + 2 + 3 + 1 + 1
    assert calls.groupby("name").size().to_dict() == {"draft": 8, "long_cot": 2, "refine": 1}
    key = ["workdir", "run_id", "problem_id", "operator", "sample"]
    joined = calls.merge(rows, on=key, how="left", validate="many_to_one", suffixes=("", "_row"))
    assert joined["correct"].notna().all()
    out = calls.groupby(key)["out_tokens"].sum().reset_index().merge(rows, on=key)
    assert (out["out_tokens"] == [7, 7, 7, 8, 6, 2]).all()  # the calls' tokens, row by row
    with pytest.raises(FileNotFoundError, match="nothing.*no results.jsonl"):
        results.load(os.path.join(x, "nothing"))
    with pytest.raises(ValueError, match="no workdir given"):
        results.load([])


def test_load_and_compare_on_a_uri_filesystem(two_runs):
    x, _ = two_runs
    root = f"ram://prd_jax_tests/{uuid.uuid4().hex}/x"  # TF's in-memory filesystem stands in for gs://
    _write(root, fileio.read_jsonl(os.path.join(x, "results.jsonl")))
    assert results.load(root).drop(columns="workdir").equals(results.load(x).drop(columns="workdir"))
    assert len(results.load_calls(root)) == 9
    (t,) = results.compare([root]).to_dict("records")
    assert (t["run"], t["problems"], t["k"], t["mean_at_k"]) == ("x", 2, 2, 0.75)


def test_prd_jax_results_table_and_csv(two_runs, tmp_path, capsys):
    hand = _write(str(tmp_path / "hand"), HAND)
    x, _ = two_runs
    out = tmp_path / "table.csv"
    cli.main(["results", hand, f"X={x}", "--csv", str(out)])
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("| operator | run | model | problems | k | mean@k [95% CI] | pass@k | B_seq |")
    assert lines[2] == "| A | hand | m1 | 4 | 2 | 0.500 [0.100, 0.900] | 0.750 | 45 | 90 | 135 | 180 | 0 | 1 |"
    assert lines[3] == "| B | hand | m1 | 4 | 1 | 1.000 [1.000, 1.000] | 1.000 | 5 | 10 | 15 | 20 | 1 | 0 |"
    # X: p1 (1, 0), p2 (1, 1) -> mean@k .75; budgets from the calls (draft 5+3 accepted, draft 5+4; the
    # retried row adds refine 9+1 accepted): b_seq 3,3,3,4 -> 3.25; b_total 7,7,7,8 -> 7.25;
    # b_seq_io 8,8,8,18 -> 10.5; b_total_io 17,17,17,27 -> 19.5 (printed rounded half to even)
    assert lines[4] == "| pdr | X | m1 | 2 | 2 | 0.750 [0.260, 1.000] | 1.000 | 3 | 7 | 10 | 20 | 0 | 0 |"
    csv = out.read_text().splitlines()
    assert csv[0].split(",")[:9] == ["run", "workdir", "model", "task", "run_ids", "operator", "problems", "k",
                                     "mean_at_k"]
    cells = list(csvlib.DictReader(csv))[2]
    assert (cells["run"], cells["run_ids"], cells["operator"], cells["mean_at_k"], cells["b_seq"]) == \
        ("X", "rX,rX2", "pdr", "0.75", "3.25")
    assert float(cells["pass_at_k_lo"]) == pytest.approx(0.342380, abs=1e-6)  # Wilson, 2 of 2: 2 / (2 + 1.96^2)
    cli.main(["results", hand, "--json"])
    records = json.loads(capsys.readouterr().out)
    assert [(r["operator"], r["problems_dropped"], r["failed"]) for r in records] == [("A", 1, 0), ("B", 1, 1)]


def _tiny_eval_config():
    import ml_collections

    return ml_collections.ConfigDict(dict(
        task="gsm8k", model="tiny", seed=0, k_samples=2, batch_size=2, num_problems=2,
        sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=64, templates="compact",
        operators=[dict(type="long_cot", max_new_tokens=4)]))


@pytest.mark.slow
def test_results_json_of_a_small_eval(tmp_path):
    import types

    import jax

    from prd_jax.data import synthetic
    from prd_jax.evaluate import evaluate
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.model.decoder import init_params

    cfg = NAMED_CONFIGS["tiny"].replace(vocab_size=128, max_position=512)
    model = types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(0)),
                                  tokenizer=synthetic.CharVocab(), mesh=None)
    workdir = str(tmp_path / "ev")
    evaluate(_tiny_eval_config(), workdir, model=model, rows=synthetic.generate(2, 0, 1), progress=False)
    rec = fileio.read_json(os.path.join(workdir, "results.json"))
    rows = fileio.read_jsonl(os.path.join(workdir, "results.jsonl"))
    assert len(rows) == 4 and {r["run_id"] for r in rows} == {rec["run_id"]} and {r["model"] for r in rows} == {"tiny"}
    assert (rec["schema"], rec["task"], rec["model"], rec["checkpoint"]) == ("prd_jax.results/1", "gsm8k", "tiny", None)
    assert rec["config"] == fileio.read_json(os.path.join(workdir, "config.json"))
    assert rec["package"] == {"name": "prd_jax", "version": importlib.metadata.version("prd_jax")}
    head = subprocess.run(["git", "-C", REPO, "rev-parse", "HEAD"], capture_output=True, text=True)
    if head.returncode == 0 and os.path.isdir(os.path.join(REPO, ".git")):
        assert rec["git"]["commit"] == head.stdout.strip() and isinstance(rec["git"]["dirty"], bool)
    started, finished = (datetime.datetime.fromisoformat(rec[k]) for k in ("started", "finished"))
    assert started.utcoffset() == datetime.timedelta(0) and started <= finished
    assert rec["hardware"] == {"backend": jax.default_backend(), "device_kind": jax.devices()[0].device_kind,
                               "device_count": jax.device_count(), "process_count": 1, "host": socket.gethostname()}
    (e,) = rec["results"]
    per_problem = {}
    for r in rows:
        per_problem.setdefault(r["problem_id"], []).append(r["correct"])
    assert rec["problems"] == {"compared": sorted(per_problem), "dropped": [],
                               "note": "scores and budgets are over the problems every operator answered"}
    assert e["mean_at_k"] == sum(sum(c) / 2 for c in per_problem.values()) / 2
    b = sorted(r["b_total_io"] for r in rows)
    assert e["budgets"]["b_total_io"] == pytest.approx(
        {"mean": sum(b) / 4, "p50": (b[1] + b[2]) / 2, "p90": b[2] + 0.7 * (b[3] - b[2])})
    assert e["counts"]["unparsed"] == sum(not r["parsed"] for r in rows)
    first = rec["run_id"]
    evaluate(_tiny_eval_config(), workdir, model=model, rows=synthetic.generate(2, 0, 1), progress=False)
    again = fileio.read_json(os.path.join(workdir, "results.json"))
    assert again["run_id"] != first and again["run_ids"] == [first]  # the rerun wrote no row
    assert [i["rows_written"] for i in again["invocations"]] == [4, 0] and again["started"] == rec["started"]
    assert again["results"] == rec["results"]
    assert results.load(workdir)["run_id"].tolist() == [first] * 4
