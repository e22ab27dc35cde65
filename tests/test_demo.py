"""The demo pipeline on its quick configuration, a resumed rerun, and the notebook executed
on the resulting workdir (nbclient); plus the synthetic task's properties the demo relies on."""

import json
import os
import re

import ml_collections
import pytest

from prd_jax.config_io import load_config
from prd_jax.demo import (CHECKPOINTS, CONFIGS, PRESETS, adaptive_claim, eval_config, matched_long_cot,
                          paired_claim, resolve, run_demo, stage_configs)

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def demo_workdir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("demo"))
    config = load_config(os.path.join(CONFIGS, "demo.py"))
    config.quick = True
    run_demo(config, workdir, progress=False)
    return workdir, config


CLAIM_KEYS = {"id", "checkpoint", "a", "b", "diff", "half_width", "only_a", "only_b", "verdict"}


@pytest.mark.slow
def test_quick_demo_writes_results_and_plot(demo_workdir):
    workdir, config = demo_workdir
    assert os.path.getsize(os.path.join(workdir, "pareto.png")) > 10_000
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert results["task"] == "preimage" and results["long_cot_budgets"] == [8, 16, 32]
    assert list(results["tables"]) == list(CHECKPOINTS)
    assert results["steps"] == {"sft": 4, "rl_baseline": 1, "rl_pdr": 1}
    assert sum(results["eval_difficulties"].values()) == 4 and set(results["eval_difficulties"]) <= {"3", "4"}
    assert [(c["id"], c["checkpoint"]) for c in results["claims"]] == (
        [("rl_vs_sft", "rl_baseline")] + [("pdr_vs_long_cot", r) for r in CHECKPOINTS]
        + [("best_of_n_v1_vs_long_cot", r) for r in CHECKPOINTS] + [("pdr_rl_vs_rl", "rl_pdr")]
        + [("adaptive_pdr_vs_pdr", r) for r in CHECKPOINTS])
    for c in results["claims"]:  # paired counts agree with the accuracies
        assert CLAIM_KEYS <= set(c) and c["n"] == 4
        assert abs(c["acc_a"] - c["acc_b"] - c["diff"]) < 1e-9 and abs(c["diff"] - (c["only_a"] - c["only_b"]) / 4) < 1e-9
        assert c["verdict"] in ("holds", "reversed", "not shown")
        if c["id"] in ("pdr_vs_long_cot", "best_of_n_v1_vs_long_cot"):  # matched: Long-CoT's B_seq <= A's, or the smallest
            assert c["b"].startswith(c["checkpoint"] + "/long_cot@")
            assert c["b_seq_b"] <= c["b_seq_a"] or c["b"].endswith("@8")
    for c in results["claims"][-3:]:  # adaptive PDR against PDR: its ratios and its own verdict rule
        assert (c["a"], c["b"]) == (c["checkpoint"] + "/adaptive_pdr", c["checkpoint"] + "/pdr")
        assert abs(c["b_total_ratio"] - c["b_total_a"] / c["b_total_b"]) < 1e-9 and c["b_total_ratio"] <= 1.0
        assert c["verdict"] == ("holds" if c["b_total_ratio"] <= 0.7 and c["ci95"][0] >= -0.03 else "not shown")
    text = open(os.path.join(workdir, "results.md")).read()
    assert "## Adaptive PDR against PDR" in text
    assert "## Claims (A beats B, paired on the same problems, k=1)" in text and "| pdr_rl_vs_rl | rl_pdr |" in text
    for name, table in results["tables"].items():
        labels = [t["operator"] for t in table]
        assert labels[:3] == [f"long_cot(budget={b})" for b in (8, 16, 32)] and f"## {name} (step" in text
        assert [lab.split("(")[0] for lab in labels[3:]] == ["pdr", "best_of_n", "adaptive_pdr"]
        for t in table:
            assert t["problems"] == 4 and 0 <= t["mean_at_k"] <= 1 and t["b_seq"] <= t["b_total"]
    for name in CHECKPOINTS:  # orbax checkpoints and TensorBoard logs are in the workdir
        run = os.path.join(workdir, name)
        assert os.listdir(os.path.join(run, "checkpoints"))
        assert any(f.startswith("events.out.tfevents") for f in os.listdir(run))


@pytest.mark.slow
def test_rerun_resumes_instead_of_starting_over(demo_workdir):
    workdir, config = demo_workdir
    before = {n: open(os.path.join(workdir, n, "metrics.jsonl")).read() for n in CHECKPOINTS}
    results = open(os.path.join(workdir, "eval", "sft", "results.jsonl")).read()
    run_demo(config, workdir, progress=False)
    assert {n: open(os.path.join(workdir, n, "metrics.jsonl")).read() for n in CHECKPOINTS} == before
    assert open(os.path.join(workdir, "eval", "sft", "results.jsonl")).read() == results


def _run_notebook(monkeypatch, *workdirs):
    """Execute notebooks/analyze_runs.ipynb on `workdirs`; (notebook, printed text, PNG count)."""
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PRD_WORKDIRS", os.pathsep.join(workdirs))
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "analyze_runs.ipynb"), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", [])]
    printed = "".join(o.get("text", "") for o in outputs if o.get("name") == "stdout")
    return nb, printed, sum("image/png" in o.get("data", {}) for o in outputs)


def _accuracy_rows(printed: str, runs) -> dict:
    """{(run, operator): (problems, k, mean@k, low, high, pass@k, B_seq, B_total)} of the notebook's table."""
    table = {}
    for line in printed.splitlines():
        parts = line.split()
        if len(parts) == 10 and parts[0] in runs:
            table[parts[0], parts[1]] = tuple(float(x) for x in parts[2:])
    return table


def _check_accuracy(printed: str, workdirs: dict) -> None:
    """The notebook's accuracy table equals `evaluate.summarize` of each run's results.jsonl, and
    its mean@k interval is mean +- 1.96 sd / sqrt(n) of the per-problem means, clipped to [0, 1]."""
    import numpy as np

    from prd_jax.evaluate import summarize

    table = _accuracy_rows(printed, workdirs)
    expected = {}
    for run, path in workdirs.items():
        rows = [json.loads(line) for line in open(os.path.join(path, "results.jsonl"))]
        for t in summarize(rows):
            per_problem = {}
            for r in rows:
                if r["operator"] == t["operator"]:
                    per_problem.setdefault(r["problem_id"], []).append(r["correct"])
            means = np.array([np.mean(v) for v in per_problem.values()])
            half = 1.96 * means.std(ddof=1) / np.sqrt(len(means))
            expected[run, t["operator"]] = (t, max(0.0, means.mean() - half), min(1.0, means.mean() + half))
    assert set(table) == set(expected) and expected
    for key, (t, low, high) in expected.items():
        n, k, mean, lo, hi, passed, b_seq, b_total = table[key]
        assert (n, k) == (t["problems"], t["k"]), key
        for got, want in ((mean, t["mean_at_k"]), (lo, low), (hi, high), (passed, t["pass_at_k"]),
                          (b_seq, t["b_seq"]), (b_total, t["b_total"])):
            assert abs(got - want) <= 1e-3, (key, got, want)


def _verdict(call: dict) -> str:
    """How the notebook's call tree shows a judge call's ratings (`c2=7`; pairwise `c0 7:4 c3`)."""
    (a, *b), (ra, *rb) = call["candidates"], call["ratings"]
    return f"c{a}={ra:g}" if not b else f"c{a} {ra:g}:{rb[0]:g} c{b[0]}"


@pytest.mark.slow
def test_notebook_runs_on_the_demo_workdir(demo_workdir, monkeypatch):
    workdir = demo_workdir[0]
    nb, printed, images = _run_notebook(monkeypatch, workdir)
    runs = {f"eval/{n}": os.path.join(workdir, "eval", n) for n in CHECKPOINTS}
    assert images == 3  # accuracy against B_seq / B_total, training curves, one problem's calls
    _check_accuracy(printed, runs)
    for line in printed.splitlines():  # summary.md's rounding of the same numbers
        parts = line.split()
        if len(parts) == 10 and parts[0] in runs:
            md = open(os.path.join(runs[parts[0]], "summary.md")).read()
            assert f"| {parts[1]} | {int(float(parts[2]))} | {int(float(parts[3]))} | {float(parts[4]):.3f} |" in md
    steps = json.load(open(os.path.join(workdir, "results.json")))["steps"]
    for name, step in steps.items():  # the training summary's last step per run
        assert re.search(rf"^{name} +{step} ", printed, re.M), printed
    # the call tree of the first problem of the first eval run, per operator, from results.jsonl
    first = sorted(runs)[0]
    rows = [json.loads(line) for line in open(os.path.join(runs[first], "results.jsonl"))]
    pid = rows[0]["problem_id"]
    assert f"run {first}, problem {pid}" in printed
    for r in rows:
        if r["problem_id"] == pid and r["sample"] == 0:
            names = [c["name"] for c in r["calls"]]
            tree = [f"{n} x{names.count(n)}" for n in dict.fromkeys(names)]
            block = printed.split(r["operator"] + "\n", 1)[1].split("\n\n", 1)[0]
            assert f"B_seq={r['b_seq']}  B_total={r['b_total']}" in block
            assert [line.split("  ")[1].split(" ", 1)[1] for line in block.splitlines()[1:]] == tree, block
            for line, name in zip(block.splitlines()[1:], dict.fromkeys(names)):  # judges' ratings, as stored
                shown = [_verdict(c) for c in r["calls"] if c["name"] == name and "ratings" in c]
                assert line.endswith(f"  ratings {', '.join(shown)}") if shown else "ratings" not in line, line
    assert re.search(r"judge x\d+ .*  ratings c\d \d+:\d+ c\d", printed)  # best-of-N's V1 tournament
    assert re.search(r"^checkpoint rl_baseline step 1 \(llama, CharVocab, [\d,]+ params\)$", printed, re.M)
    assert "greedy answer: " in printed and "graded by preimage -> {'answer'" in printed
    assert workdir not in json.dumps(nb)  # names relative to the folder given


@pytest.mark.slow
def test_notebook_runs_on_a_small_eval_workdir(demo_workdir, tmp_path, monkeypatch):
    """A `prd-jax eval` of the demo's SFT checkpoint (config.checkpoint), and a copy of it with
    every other row marked correct (so the accuracies and intervals are not all zero): the
    notebook's table equals `summarize`, and the greedy answer comes from the checkpoint the
    eval config names."""
    from prd_jax.evaluate import evaluate

    config = ml_collections.ConfigDict(dict(
        task="preimage", model="tiny", checkpoint=os.path.join(demo_workdir[0], "sft"), seed=0, k_samples=2,
        batch_size=3, num_problems=3, sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=96,
        operators=[dict(type="long_cot", max_new_tokens=8), dict(type="pdr", schedule=[2, 1], k=1, max_new_tokens=8)]))
    small = str(tmp_path / "small" / "ev")
    evaluate(config, small, progress=False)
    flipped = tmp_path / "flipped" / "ev"
    flipped.mkdir(parents=True)
    lines = open(os.path.join(small, "results.jsonl")).read().splitlines()
    with open(flipped / "results.jsonl", "w") as f:
        for i, line in enumerate(lines):
            f.write(json.dumps(dict(json.loads(line), correct=i % 3 == 0)) + "\n")
    nb, printed, images = _run_notebook(monkeypatch, str(tmp_path / "small"), str(tmp_path / "flipped"))
    runs = {"small/ev": small, "flipped/ev": str(flipped)}  # several folders: names start with each folder's
    _check_accuracy(printed, runs)
    assert 0 < _accuracy_rows(printed, runs)["flipped/ev", "long_cot(budget=8)"][2] < 1
    assert images == 2 and "no training workdir" in printed  # accuracy and calls; no training curves
    assert re.search(r"^checkpoint small/ev step 4 \(llama, CharVocab, [\d,]+ params\)$", printed, re.M), printed
    assert str(tmp_path) not in json.dumps(nb)


def test_demo_config_is_complete():
    config = load_config(os.path.join(CONFIGS, "demo.py"))
    assert isinstance(config, ml_collections.ConfigDict)
    assert set(config.quick_overrides) <= set(config)


def _write_results(root, run, rows):
    os.makedirs(root / "eval" / run, exist_ok=True)
    with open(root / "eval" / run / "results.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps(dict(r, sample=0)) + "\n")


def test_paired_claim_by_hand(tmp_path):
    labels = {"pdr": "pdr(4-1)", "lc": "long_cot(budget=8)"}

    def write(run, correct, b_seq):
        _write_results(tmp_path, run, [{"problem_id": f"p{i}", "operator": "pdr(4-1)", "correct": c, "b_seq": b_seq}
                                       for i, c in enumerate(correct)]
                       + [{"problem_id": "p0", "operator": "long_cot(budget=8)", "correct": False, "b_seq": 1}])

    write("a", [True, True, True, False], 30)
    write("b", [False, True, False, False], 10)
    c = paired_claim(str(tmp_path), "x", "a", ("a", "pdr"), ("b", "pdr"), labels)
    # differences [1, 0, 1, 0]: mean 0.5, sample std sqrt(1/3), half-width 1.96 sqrt(1/3)/2 = 0.566 > 0.5
    assert (c["n"], c["acc_a"], c["acc_b"], c["diff"], c["only_a"], c["only_b"]) == (4, 0.75, 0.25, 0.5, 2, 0)
    assert abs(c["half_width"] - 1.96 * (1 / 3) ** 0.5 / 2) < 1e-12 and c["verdict"] == "not shown"
    assert (c["b_seq_a"], c["b_seq_b"], c["id"], c["checkpoint"], c["a"]) == (30, 10, "x", "a", "a/pdr")
    write("a", [True, True, True, False] * 4, 30)
    write("b", [False, True, False, False] * 4, 10)
    c = paired_claim(str(tmp_path), "x", "a", ("a", "pdr"), ("b", "pdr"), labels)
    assert abs(c["half_width"] - 1.96 * (4 / 15) ** 0.5 / 4) < 1e-12 and c["verdict"] == "holds"  # 0.5 - 0.253 > 0
    assert paired_claim(str(tmp_path), "x", "b", ("b", "pdr"), ("a", "pdr"), labels)["verdict"] == "reversed"


def test_adaptive_claim_by_hand(tmp_path):
    labels = {"pdr": "pdr(8-1)", "adaptive_pdr": "adaptive_pdr(waves=3)"}

    def rows(correct_a, correct_b, n):
        return ([{"problem_id": f"p{i}", "operator": "adaptive_pdr(waves=3)", "correct": correct_a[i % 4],
                  "b_seq": 20, "b_total": 40 + 20 * (i % 2)} for i in range(n)]
                + [{"problem_id": f"p{i}", "operator": "pdr(8-1)", "correct": correct_b[i % 4], "b_seq": 16,
                    "b_total": 100} for i in range(n)])

    # 40 problems, one in four discordant each way: diff 0, sd sqrt(20/39); B_total 50 / 100
    _write_results(tmp_path, "r", rows([True, False, True, True], [True, True, False, True], 40))
    c = adaptive_claim(str(tmp_path), "r", labels)
    half = 1.96 * (20 / 39) ** 0.5 / 40 ** 0.5
    assert (c["n"], c["diff"], c["b_total_ratio"], c["b_seq_ratio"]) == (40, 0.0, 0.5, 1.25)
    assert abs(c["ci95"][0] + half) < 1e-12 and half > 0.03 and c["verdict"] == "not shown"  # CI too wide
    _write_results(tmp_path, "r", rows([True, True, True, True], [True, True, False, True], 40))
    c = adaptive_claim(str(tmp_path), "r", labels)  # +0.25, lower end above -0.03; ratio 0.5
    assert c["diff"] == 0.25 and c["ci95"][0] > 0 and c["verdict"] == "holds"


def test_matched_long_cot_takes_the_closest_budget_not_above(tmp_path):
    demo = resolve(load_config(os.path.join(CONFIGS, "demo.py")))
    means = dict(zip(demo.long_cot_budgets, (60, 85, 100, 130, 150)))
    _write_results(tmp_path, "r", [{"problem_id": "p", "operator": f"long_cot(budget={b})", "correct": True,
                                    "b_seq": m} for b, m in means.items()])
    assert demo.long_cot_budgets == (64, 128, 192, 256, 512)
    assert matched_long_cot(str(tmp_path), "r", demo, 90.0) == "long_cot@128"  # 85 <= 90 < 100
    assert matched_long_cot(str(tmp_path), "r", demo, 100.0) == "long_cot@192"  # equal counts as not above
    assert matched_long_cot(str(tmp_path), "r", demo, 1000.0) == "long_cot@512"
    assert matched_long_cot(str(tmp_path), "r", demo, 10.0) == "long_cot@64"  # all above: the smallest


def test_resolve_fills_presets_and_names_bad_fields():

    base = load_config(os.path.join(CONFIGS, "demo.py"))
    d = resolve(base)
    assert (d.task, d.difficulty, d.budget) == ("preimage", PRESETS["preimage"]["difficulty"], PRESETS["preimage"]["budget"])
    control = resolve(ml_collections.ConfigDict(dict(base.to_dict(), task="modchain", budget=48)))
    assert control.difficulty == (1, 2) and control.budget == 48  # a set field wins over the preset
    with pytest.raises(ValueError, match="config.task='gsm8k'"):
        resolve(ml_collections.ConfigDict(dict(base.to_dict(), task="gsm8k")))
    with pytest.raises(ValueError, match="long_cot_budgets"):
        resolve(ml_collections.ConfigDict(dict(base.to_dict(), long_cot_budgets=(64, 128))))
    # --config.seed moves every stage's seed and the eval's sampling seed
    seeded = {s: stage_configs(resolve(ml_collections.ConfigDict(dict(base.to_dict(), seed=s))), "/w") for s in (0, 7)}
    assert {n: c.seed for n, c in seeded[7].items()} == {n: 7 for n in CHECKPOINTS}
    assert seeded[0]["sft"].task == "preimage" and seeded[0]["rl_pdr"].rl.operator.k == resolve(base).k
    assert eval_config(resolve(ml_collections.ConfigDict(dict(base.to_dict(), seed=7)))).seed == 7
    # the SFT drafts are cut and quoted exactly as the eval's PDR round cuts and quotes its drafts
    pdr = next(op for op in eval_config(d).operators if op["type"] == "pdr")
    sft = seeded[0]["sft"].data
    assert (sft.draft_tokens, sft.tail_tokens, sft.pdr_k) == (pdr["max_new_tokens"], pdr["candidate_max_tokens"], pdr["k"])
    assert (sft.drafts, sft.ranking) == (pdr["schedule"][0], pdr["selector"])
    assert pdr["truncation_head"] == 0
