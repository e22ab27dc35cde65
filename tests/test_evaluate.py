"""Eval harness: metrics by hand, config overrides, and an end-to-end SmolLM2 run on 3 GSM8K
problems with resume."""

import json
import os

import ml_collections
import pytest

from prd_jax.config_io import apply_overrides, load_config
from prd_jax.evaluate import build_spec, evaluate, markdown_table, summarize
from prd_jax.operators.pdr import PDR

CONFIG = os.path.join(os.path.dirname(__file__), "..", "configs", "eval", "smollm2_gsm8k.py")


def row(pid, op, sample, correct, b_seq=10, b_total=20, parsed=True):
    return {"problem_id": pid, "operator": op, "sample": sample, "correct": correct, "parsed": parsed,
            "b_seq": b_seq, "b_total": b_total, "b_seq_io": 3 * b_seq, "b_total_io": 3 * b_total, "truncations": 0}


def test_summary_metrics_hand_computed():
    rows = [row("a", "op", 0, True), row("a", "op", 1, False), row("b", "op", 0, False, parsed=False),
            row("b", "op", 1, False, b_seq=30, b_total=40),
            {"problem_id": "c", "operator": "op", "sample": 0, "skipped": "too long"}]
    (t,) = summarize(rows)
    assert t["mean_at_k"] == pytest.approx(0.25)  # (0.5 + 0) / 2
    assert t["pass_at_k"] == pytest.approx(0.5)
    assert t["b_seq"] == pytest.approx(15.0) and t["b_total"] == pytest.approx(25.0)
    assert t["b_seq_io"] == pytest.approx(45.0) and t["b_total_io"] == pytest.approx(75.0)
    assert (t["k"], t["parse_failures"], t["skipped"], t["problems"]) == (2, 1, 1, 2)
    assert "| op | 2 | 2 | 0.250 | 0.500 | 15 | 25 | 45 | 75 | 1 | 0 | 0 | 1 |" in markdown_table([t])


def test_summary_budgets_come_from_the_call_records():
    # a row written under the old in + out definition: its per-call records decide
    calls = [{"name": "draft", "in_tokens": 7, "out_tokens": 5, "accepted": True},
             {"name": "draft", "in_tokens": 7, "out_tokens": 9, "accepted": False},
             {"name": "refine", "in_tokens": 20, "out_tokens": 4, "accepted": True}]
    old = dict(row("a", "op", 0, True, b_seq=36, b_total=52), calls=calls)
    (t,) = summarize([old])
    assert (t["b_seq"], t["b_total"], t["b_seq_io"], t["b_total_io"]) == (9, 18, 36, 52)


def test_b_seq_no_judge_leaves_out_rating_and_judge_calls_on_the_path():
    calls = [{"name": "draft", "in_tokens": 7, "out_tokens": 5, "accepted": True},
             {"name": "rating", "in_tokens": 9, "out_tokens": 3, "accepted": True},
             {"name": "rating", "in_tokens": 9, "out_tokens": 6, "accepted": False},
             {"name": "judge", "in_tokens": 11, "out_tokens": 2, "accepted": True},
             {"name": "summary", "in_tokens": 30, "out_tokens": 8, "accepted": True},
             {"name": "refine", "in_tokens": 20, "out_tokens": 4, "accepted": True}]
    (t,) = summarize([dict(row("a", "op", 0, True), calls=calls)])
    assert t["b_seq"] == 5 + 3 + 2 + 8 + 4  # default: the ranker's calls on the path count
    assert t["b_seq_no_judge"] == 5 + 8 + 4  # the other reading: generation calls only
    assert t["b_total"] == 28


def test_build_spec_and_overrides_validate():
    spec = build_spec({"type": "pdr", "schedule": [8, 4, 1], "k": 2})
    assert isinstance(spec, PDR) and spec.schedule == (8, 4, 1)
    with pytest.raises(ValueError, match="operator type 'bon'"):
        build_spec({"type": "bon"})
    with pytest.raises(ValueError, match="unknown fields \\['rounds'\\]"):
        build_spec({"type": "long_cot", "rounds": 2})
    config = apply_overrides(load_config(CONFIG), ["--config.num_problems=3", "--config.sampling.temperature=0"])
    assert config.num_problems == 3 and config.sampling.temperature == 0.0
    with pytest.raises(ValueError, match="config.temperature moved to config.sampling.temperature"):
        apply_overrides(config, ["--config.temperature=0"])
    with pytest.raises(ValueError, match="no field 'num_problem'"):
        apply_overrides(config, ["--config.num_problem=3"])
    with pytest.raises(ValueError, match="expected int"):
        apply_overrides(config, ["--config.num_problems=abc"])


@pytest.fixture(scope="module")
def smollm2():
    from prd_jax.model import load

    return load("smollm2-135m")


def test_eval_sampling_carries_the_sampler_cost_keys():
    """eval's and `prd-jax compile`'s operator calls share one `Sampling` (`eval_sampling`):
    the cost keys of `config.sampling` reach every call's `SamplingConfig`; the file's
    defaults are the library's."""
    from prd_jax.eval_config import EvalConfig
    from prd_jax.evaluate import eval_sampling
    from prd_jax.operators.calls import sampling_config

    config = apply_overrides(load_config(CONFIG), [
        "--config.sampling.temperature=0.6", "--config.sampling.top_p=0.95", "--config.sampling.top_k=20",
        "--config.sampling.max_rows=64", "--config.sampling.compact_min_rows=8", "--config.sampling.compact_ratio=0.75",
        "--config.sampling.prefill_groups=4", "--config.sampling.cache_window=64"])
    s = eval_sampling(EvalConfig.from_config(config), [2, 7])
    assert (s.temperature, s.top_p, s.top_k, s.stop_ids) == (0.6, 0.95, 20, (2, 7))
    knobs = lambda x: (x.max_rows, x.compact_min_rows, x.compact_ratio, x.prefill_groups, x.cache_window)  # noqa: E731
    assert knobs(s) == (64, 8, 0.75, 4, 64)
    scfg = sampling_config(type("Ctx", (), {"sampling": s})(), 32, num_samples=4)
    assert knobs(scfg) == (64, 8, 0.75, 4, 64)
    bare = eval_sampling(EvalConfig.from_config(load_config(CONFIG)), [2])
    assert knobs(bare) == (0, 0, 0.5, 0, 0)


@pytest.mark.slow
def test_end_to_end_gsm8k_with_resume(tmp_path, smollm2):
    config = load_config(CONFIG)
    config.num_problems = 3
    config.sampling.temperature = 0.0
    config.batch_size = 4
    config.operators = [
        dict(type="long_cot", max_new_tokens=24),
        dict(type="sr", rounds=1, max_new_tokens=16, candidate_max_tokens=16, truncation_head=4),
        dict(type="pdr", schedule=(2, 1), distill="shared_topk", k=2, selector="random",
             max_new_tokens=16, candidate_max_tokens=12, truncation_head=4, kappa=16),
        dict(type="best_of_n", n=4, selector="pairwise_v1", max_new_tokens=16, candidate_max_tokens=12,
             truncation_head=4, judge=dict(max_new_tokens=8, budget_multiple=1)),
    ]
    workdir = str(tmp_path / "eval")
    table = evaluate(config, workdir, model=smollm2, progress=False)
    with open(os.path.join(workdir, "results.jsonl")) as f:
        rows = [json.loads(line) for line in f]
    assert len(rows) == 12 and {r["problem_id"] for r in rows} == {"gsm8k-test-0", "gsm8k-test-1", "gsm8k-test-2"}
    for r in rows:
        assert r["b_total"] == sum(c["out_tokens"] for c in r["calls"])
        assert r["b_seq"] == sum(c["out_tokens"] for c in r["calls"] if c["accepted"])
        assert r["b_total_io"] == sum(c["in_tokens"] + c["out_tokens"] for c in r["calls"])
        assert r["b_seq_io"] == sum(c["in_tokens"] + c["out_tokens"] for c in r["calls"] if c["accepted"])
        assert isinstance(r["correct"], bool)
        if r["operator"].startswith(("sr", "long_cot")):
            assert r["b_seq"] == r["b_total"] and r["b_seq_io"] == r["b_total_io"]
        elif r["operator"].startswith("best_of_n"):  # 4 drafts + a Swiss tournament of <= 4 judge calls
            judge = [c for c in r["calls"] if c["name"] == "judge"]
            assert [c["name"] for c in r["calls"]][:4] == ["draft"] * 4 and 2 <= len(judge) <= 4
            assert sum(c["accepted"] for c in r["calls"][:4]) == 1
            assert all(c["out_tokens"] <= 8 + 40 for c in judge)  # reasoning + forced tags and ratings
            assert 0 <= r["judge_unparsed"] <= len(judge)
        else:  # pdr(2,1): 2 drafts + 1 refine, one draft on the accepted path
            assert len(r["calls"]) == 3 and sum(c["accepted"] for c in r["calls"]) == 2
            assert all(c["out_tokens"] <= 16 for c in r["calls"])
            assert r["b_seq"] < r["b_total"]
    assert os.path.getsize(os.path.join(workdir, "pareto.png")) > 10_000
    with open(os.path.join(workdir, "summary.md")) as f:
        assert "pdr(2-1,shared_topk,k=2,random-k,kappa=16,candidate_max_tokens=12,truncation_head=4,budget=16)" in f.read()
    # Rerun: every row is already there, nothing is recomputed or appended.
    again = evaluate(config, workdir, model=smollm2, progress=False)
    with open(os.path.join(workdir, "results.jsonl")) as f:
        assert sum(1 for _ in f) == 12
    assert again == table


def test_rerun_with_other_sampling_settings_is_refused(tmp_path):
    from prd_jax.eval_config import EvalConfig
    from prd_jax.evaluate import check_settings

    config = load_config(CONFIG)
    check_settings(EvalConfig.from_config(config), str(tmp_path))
    check_settings(EvalConfig.from_config(config), str(tmp_path))  # same settings: fine
    config.sampling.temperature = 0.5
    with pytest.raises(ValueError, match="temperature.*1.0.*0.5.*Use a new workdir"):
        check_settings(EvalConfig.from_config(config), str(tmp_path))


@pytest.mark.slow
def test_checkpoints_sharing_a_tokenizer_compile_each_operator_once(tmp_path):
    import types

    import jax

    from prd_jax.data import synthetic
    from prd_jax.model.config import NAMED_CONFIGS
    from prd_jax.model.decoder import init_params
    from prd_jax.operators.runner import _JITTED

    cfg = NAMED_CONFIGS["tiny"].replace(vocab_size=128, max_position=1024)
    vocab = synthetic.CharVocab()
    config = ml_collections.ConfigDict(dict(
        task="gsm8k", model="tiny", seed=0, k_samples=1, batch_size=2, num_problems=2,
        sampling=dict(temperature=1.0, top_p=1.0, top_k=0), max_problem_tokens=64, templates="compact",
        operators=[dict(type="long_cot", max_new_tokens=4), dict(type="sr", rounds=1, max_new_tokens=4)]))
    rows = synthetic.generate(2, 0, 1)
    sizes = [_JITTED._cache_size()]
    for seed in (0, 1):  # two "checkpoints": same config and tokenizer object, other params
        model = types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(seed)), tokenizer=vocab,
                                      mesh=None)
        table = evaluate(config, str(tmp_path / f"ev{seed}"), model=model, rows=rows, progress=False)
        assert [t["problems"] for t in table] == [2, 2]
        sizes.append(_JITTED._cache_size())
    assert sizes[1] - sizes[0] == 2 and sizes[2] == sizes[1]  # two operators, compiled for the first only
