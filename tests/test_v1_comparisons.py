"""The V1 paper's comparisons as it runs them (issue 45 §4; arXiv 2603.04304 §4-5, App. B, C.1).

- `configs/eval/qwen3_4b_v1_after_rl.py`: each policy is evaluated with its own selector (PointRL
  pointwise, PairRL / RL / the frozen ablation with the pairwise tournament, the base model with
  both), at the budgets the paper compares, and its checkpoint comes from `config.checkpoint`.
- `configs/eval/qwen3_4b_v1_matched_calls.py` runs on every code benchmark and its docstring
  averages the three runs with `prd-jax results --average` (`prd_jax.results.average_runs`),
  whose numbers are checked by hand on fake result rows. No model is loaded.
"""

import json
import math
import os
import re
import runpy

import pytest

from prd_jax import cli
from prd_jax import results as avg
from prd_jax.config_check import validate
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.evaluate import build_spec
from prd_jax.train.rl import RLConfig

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
AFTER_RL = os.path.join(ROOT, "configs", "eval", "qwen3_4b_v1_after_rl.py")
MATCHED = os.path.join(ROOT, "configs", "eval", "qwen3_4b_v1_matched_calls.py")
CODE = ("livecodebench_v5", "livecodebench_v6", "codecontests")


def _rows(arg):
    """(selector or type, n, budget multiple or None, model calls per problem) of each operator."""
    out = []
    for entry in load_config(f"{AFTER_RL}:{arg}").operators:
        spec = build_spec(dict(entry))
        if spec.__class__.__name__ == "LongCoT":
            out.append(("long_cot", 1, None, 1))
            continue
        m = spec.judge.budget_multiple if spec.selector == "pairwise_v1" else None
        calls = spec.n + (m * spec.n if m else spec.n)  # candidates + judge calls
        out.append((spec.selector, spec.n, m, calls))
    return out


PAIRWISE = [("long_cot", 1, None, 1), ("pairwise_v1", 16, 1, 32), ("pairwise_v1", 16, 2, 48)]
POINTWISE = [("long_cot", 1, None, 1), ("self_pointwise", 16, None, 32), ("self_pointwise", 24, None, 48)]


@pytest.mark.parametrize("bench", CODE)
def test_each_policy_is_evaluated_with_its_own_selector(bench):
    assert _rows(f"pairrl,{bench}") == PAIRWISE
    assert _rows(f"pairrl_frozen,{bench}") == PAIRWISE
    assert _rows(f"rl,{bench}") == PAIRWISE  # "both use V1-Infer with identical 2x verification budgets"
    assert _rows(f"pointrl,{bench}") == POINTWISE  # "selects the solution with the highest pointwise score"
    assert _rows(f"base,{bench}") == PAIRWISE + POINTWISE[1:]
    for policy in ("base", "rl", "pointrl", "pairrl", "pairrl_frozen"):
        c = load_config(f"{AFTER_RL}:{policy},{bench}")
        assert (c.task, c.model, c.k_samples) == (bench, "qwen3-4b-instruct-2507", 3)  # three seeded runs
        assert (c.sampling.temperature, c.sampling.top_p) == (0.6, 0.95)


def test_each_trained_policy_names_the_rl_config_whose_verifier_its_selector_matches():
    namespace = runpy.run_path(AFTER_RL)
    verifier_of_selectors = {("pairwise",): {"pairwise", "none"}, ("pointwise",): {"pointwise"}}
    for policy, (rl_config, kinds) in namespace["POLICIES"].items():
        if rl_config is None:
            assert policy == "base" and kinds == ("pairwise", "pointwise")
            continue
        rl = RLConfig.from_config(load_config(os.path.join(ROOT, rl_config) + ":8xh200"))
        assert rl.verifier in verifier_of_selectors[kinds], (policy, rl.verifier)
    assert [p for p, (_, k) in namespace["POLICIES"].items() if k == ("pointwise",)] == ["pointrl"]


def test_a_trained_policy_is_read_from_its_checkpoint_never_from_the_base_weights(monkeypatch):
    monkeypatch.setenv("QWEN3_4B_DIR", "ckpt/qwen3-4b")
    assert load_config(f"{AFTER_RL}:base,codecontests,8xh200").model_path == "ckpt/qwen3-4b"
    pairrl = load_config(f"{AFTER_RL}:pairrl,codecontests,8xh200")
    assert pairrl.model_path == "" and pairrl.get("checkpoint", "") == ""
    c = apply_overrides(pairrl, ["--config.checkpoint=runs/pairrl@200"], "eval")
    validate(c, "eval")  # WORKDIR@STEP in-graph: accepted
    served = apply_overrides(load_config(f"{AFTER_RL}:pairrl,codecontests"), ["--config.checkpoint=runs/pairrl"],
                             "eval")
    with pytest.raises(ValueError, match="config.checkpoint=.*evaluates in-graph"):
        validate(served, "eval")


def test_after_rl_args_name_the_allowed_policies():
    with pytest.raises(ValueError, match=r"qwen3_4b_v1_after_rl\.py: arg 'grpo,codecontests' unknown; allowed"):
        load_config(f"{AFTER_RL}:grpo,codecontests")
    with pytest.raises(ValueError, match=r"qwen3_4b_v1_after_rl\.py: arg .* allowed"):
        load_config(f"{AFTER_RL}:pairrl,hmmt_feb2025")  # the §5 comparisons are on code


def test_documented_after_rl_commands_give_each_trained_policy_its_checkpoint():
    text = open(AFTER_RL).read().replace("\\\\\n", " ")
    evals = re.findall(r"prd-jax eval --config configs/eval/qwen3_4b_v1_after_rl\.py:(\S+) (.*)", text)
    in_graph = {arg.split(",")[0]: rest for arg, rest in evals if arg.endswith(",8xh200")}
    assert set(in_graph) == {"base", "rl", "pointrl", "pairrl", "pairrl_frozen"}
    for policy, rest in in_graph.items():
        assert ("--config.checkpoint=" in rest) == (policy != "base"), policy


# ----------------------------------------------------------------------------- the code average

def test_matched_calls_runs_every_code_benchmark_and_averages_them():
    text = open(MATCHED).read().replace("\\\\\n", " ")  # continuation lines joined
    workdirs = dict(re.findall(r"prd-jax eval --config configs/eval/qwen3_4b_v1_matched_calls\.py:(\w+) "
                               r"--workdir (\S+)", text))
    assert set(workdirs) == set(CODE)
    line = re.search(r"prd-jax results --average (.*)", text).group(1)
    runs = avg.parse_runs([t for t in line.split() if "=" in t and not t.startswith("--")])
    assert runs == workdirs  # the average reads exactly the three benchmarks' workdirs
    for bench in CODE:
        assert load_config(f"{MATCHED}:{bench}").task == bench


def _write(workdir, rows):
    os.makedirs(workdir)
    with open(os.path.join(workdir, "results.jsonl"), "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


def _row(op, pid, sample, correct, b_total):
    return {"problem_id": pid, "operator": op, "sample": sample, "correct": correct, "parsed": True,
            "b_seq": b_total // 2, "b_total": b_total, "b_seq_io": b_total, "b_total_io": 2 * b_total}


@pytest.fixture()
def three_runs(tmp_path):
    """Three benchmarks' fake results: A has 2 problems x k = 2, B 4 problems x k = 1, C 1 problem."""
    a = [_row("pw", "p1", 0, True, 100), _row("pw", "p1", 1, False, 100),  # p1 0.5
         _row("pw", "p2", 0, True, 100), _row("pw", "p2", 1, True, 100),  # p2 1.0 -> mean@k 0.75
         _row("pt", "p1", 0, False, 10), _row("pt", "p1", 1, False, 10),  # p1 0.0
         _row("pt", "p2", 0, True, 30), _row("pt", "p2", 1, False, 30)]  # p2 0.5 -> 0.25; B_total 20
    b = [_row("pw", f"q{i}", 0, i == 0, 200) for i in range(4)] + \
        [_row("pt", f"q{i}", 0, i < 2, 40) for i in range(4)]  # pw 0.25, pt 0.5
    c = [_row("pw", "r1", 0, True, 600), _row("pt", "r1", 0, False, 60)]  # pw 1.0, pt 0.0
    runs = {}
    for name, rows in (("A", a), ("B", b), ("C", c)):
        runs[name] = str(tmp_path / name)
        _write(runs[name], rows)
    return runs


def test_average_over_runs_by_hand(three_runs):
    table = {t["operator"]: t for t in avg.average_runs(three_runs)}
    pw, pt = table["pw"], table["pt"]
    assert {n: (r["mean_at_k"], r["problems"], r["k"]) for n, r in pw["runs"].items()} == {
        "A": (0.75, 2, 2), "B": (0.25, 4, 1), "C": (1.0, 1, 1)}
    assert pw["mean"] == pytest.approx((0.75 + 0.25 + 1.0) / 3)  # 0.6667: each benchmark weighs the same
    assert pw["pooled"] == pytest.approx((0.75 * 2 + 0.25 * 4 + 1.0 * 1) / 7)  # 0.5: weighted by problems
    assert pt["mean"] == pytest.approx(0.25) and pt["pooled"] == pytest.approx(2.5 / 7)
    assert pw["b_total"] == pytest.approx((100 + 200 + 600) / 3) and pt["b_total"] == pytest.approx((20 + 40 + 60) / 3)
    assert pw["missing"] == pt["missing"] == []


def test_an_operator_missing_from_a_run_gets_no_average(three_runs, tmp_path):
    runs = dict(three_runs)
    runs["D"] = str(tmp_path / "D")
    _write(runs["D"], [_row("pw", "s1", 0, False, 50)])
    table = {t["operator"]: t for t in avg.average_runs(runs)}
    assert table["pw"]["mean"] == pytest.approx((0.75 + 0.25 + 1.0 + 0.0) / 4)
    assert table["pt"]["missing"] == ["D"] and math.isnan(table["pt"]["mean"]) and math.isnan(table["pt"]["pooled"])


def test_command_line_prints_and_writes_the_table(three_runs, tmp_path, capsys):
    out = tmp_path / "average.csv"
    cli.main(["results", "--average", *[f"{n}={w}" for n, w in three_runs.items()], "--csv", str(out)])
    lines = capsys.readouterr().out.splitlines()
    csv = out.read_text().splitlines()
    assert csv[0] == "operator,A_mean_at_k,A_problems,B_mean_at_k,B_problems,C_mean_at_k,C_problems,mean,pooled,b_total"
    assert csv[1] == "pw,0.75,2,0.25,4,1.0,1,0.6666666666666666,0.5,300.0"
    assert lines[0] == ("| operator | A mean@k (problems) | B mean@k (problems) | C mean@k (problems) | "
                        "mean over runs | pooled over problems | mean B_total |")
    assert lines[2] == "| pw | 0.750 (2) | 0.250 (4) | 1.000 (1) | 0.667 | 0.500 | 300 |"
    assert lines[3] == "| pt | 0.250 (2) | 0.500 (4) | 0.000 (1) | 0.250 | 0.357 | 40 |"


def test_bad_runs_are_named(tmp_path, capsys):
    assert avg.parse_runs(["runs/a", "B=runs/b"]) == {"a": "runs/a", "B": "runs/b"}  # unnamed: the last part
    with pytest.raises(ValueError, match="NAME=WORKDIR"):
        avg.parse_runs(["=runs/a"])
    with pytest.raises(ValueError, match="'A' given twice"):
        avg.parse_runs(["A=x", "A=y"])
    with pytest.raises(SystemExit):
        cli.main(["results", "--average", f"A={tmp_path / 'nothing'}"])
    assert "no results.jsonl" in capsys.readouterr().err
