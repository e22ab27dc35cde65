"""The demo pipeline on its quick configuration, a resumed rerun, and the notebook executed
on the resulting workdir (nbclient); plus the synthetic task's properties the demo relies on."""

import json
import os

import ml_collections
import pytest

from prd_jax.config_io import load_config
from prd_jax.demo import CHECKPOINTS, CONFIGS, run_demo

ROOT = os.path.join(os.path.dirname(__file__), "..")


@pytest.fixture(scope="module")
def demo_workdir(tmp_path_factory):
    workdir = str(tmp_path_factory.mktemp("demo"))
    config = load_config(os.path.join(CONFIGS, "demo.py"))
    config.quick = True
    run_demo(config, workdir, progress=False)
    return workdir, config


def test_quick_demo_writes_results_and_plot(demo_workdir):
    workdir, config = demo_workdir
    assert os.path.getsize(os.path.join(workdir, "pareto.png")) > 10_000
    results = json.load(open(os.path.join(workdir, "results.json")))
    assert list(results["tables"]) == list(CHECKPOINTS)
    assert results["steps"] == {"sft": 4, "rl_baseline": 1, "rl_pdr": 1}
    assert sum(results["eval_difficulties"].values()) == 4 and set(results["eval_difficulties"]) <= {
        str(d) for d in config.difficulty}
    assert [c["claim"] for c in results["claims"]][0] == "RL beats SFT (Long-CoT)"
    for c in results["claims"]:  # paired counts agree with the accuracies
        assert c["n"] == 4 and abs(c["acc_a"] - c["acc_b"] - (c["a_only"] - c["b_only"]) / 4) < 1e-9
        assert c["verdict"] in ("holds", "reversed", "not shown")
    text = open(os.path.join(workdir, "results.md")).read()
    assert "## Claims (paired on the same problems, k=1)" in text
    for name, table in results["tables"].items():
        ops = [t["operator"].split("(")[0] for t in table]
        assert ops == ["long_cot", "sr", "pdr", "best_of_n"] and f"## {name} (step" in text
        for t in table:
            assert t["problems"] == 4 and 0 <= t["mean_at_k"] <= 1 and t["b_seq"] <= t["b_total"]
    for name in CHECKPOINTS:  # orbax checkpoints and TensorBoard logs are in the workdir
        run = os.path.join(workdir, name)
        assert os.listdir(os.path.join(run, "checkpoints"))
        assert any(f.startswith("events.out.tfevents") for f in os.listdir(run))


def test_rerun_resumes_instead_of_starting_over(demo_workdir):
    workdir, config = demo_workdir
    before = {n: open(os.path.join(workdir, n, "metrics.jsonl")).read() for n in CHECKPOINTS}
    results = open(os.path.join(workdir, "eval", "sft", "results.jsonl")).read()
    run_demo(config, workdir, progress=False)
    assert {n: open(os.path.join(workdir, n, "metrics.jsonl")).read() for n in CHECKPOINTS} == before
    assert open(os.path.join(workdir, "eval", "sft", "results.jsonl")).read() == results


def test_notebook_runs_on_the_demo_workdir(demo_workdir, monkeypatch):
    import nbformat
    from nbclient import NotebookClient

    monkeypatch.setenv("PRD_DEMO_WORKDIR", demo_workdir[0])
    nb = nbformat.read(os.path.join(ROOT, "notebooks", "analyze_checkpoint.ipynb"), as_version=4)
    NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": ROOT}}).execute()
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []))
    assert "=== workspace (top-2 drafts)" in printed and "B_seq" in printed
    assert "rl_pdr" in printed and "restored sft step 4" in printed


def test_demo_config_is_complete():
    config = load_config(os.path.join(CONFIGS, "demo.py"))
    assert isinstance(config, ml_collections.ConfigDict)
    assert set(config.quick_overrides) <= set(config)


def test_paired_claim_by_hand(tmp_path):
    from prd_jax.demo import paired_claim

    def write(run, correct, b_seq):
        os.makedirs(tmp_path / "eval" / run, exist_ok=True)
        with open(tmp_path / "eval" / run / "results.jsonl", "w") as f:
            for i, c in enumerate(correct):
                f.write(json.dumps({"problem_id": f"p{i}", "operator": "pdr(4-1)", "sample": 0, "correct": c,
                                    "b_seq": b_seq}) + "\n")
            f.write(json.dumps({"problem_id": "p0", "operator": "long_cot(budget=8)", "sample": 0,
                                "correct": False, "b_seq": 1}) + "\n")  # another operator: ignored

    write("a", [True, True, True, False], 30)
    write("b", [False, True, False, False], 10)
    c = paired_claim(str(tmp_path), "A beats B", ("a", "pdr"), ("b", "pdr"))
    # differences [1, 0, 1, 0]: mean 0.5, sample std sqrt(1/3), SE sqrt(1/3)/2 = 0.2887; 0.5 - 1.96 SE < 0
    assert (c["n"], c["acc_a"], c["acc_b"], c["diff"], c["a_only"], c["b_only"]) == (4, 0.75, 0.25, 0.5, 2, 0)
    assert abs(c["se"] - (1 / 3) ** 0.5 / 2) < 1e-12 and c["verdict"] == "not shown"
    assert (c["b_seq_a"], c["b_seq_b"]) == (30, 10)
    write("a", [True, True, True, False] * 4, 30)
    write("b", [False, True, False, False] * 4, 10)
    c = paired_claim(str(tmp_path), "A beats B", ("a", "pdr"), ("b", "pdr"))
    assert abs(c["se"] - (4 / 15) ** 0.5 / 4) < 1e-12 and c["verdict"] == "holds"  # 0.5 - 1.96 * 0.129 > 0
    assert paired_claim(str(tmp_path), "B beats A", ("b", "pdr"), ("a", "pdr"))["verdict"] == "reversed"
