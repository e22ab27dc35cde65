"""The V1 paper's configs (issue 33 §2; arXiv 2603.04304 §3-5) carry the paper's numbers, read
from the built operator specs and RL configs (not from docstrings): N = 16, budgets 1x-3x N,
d_min = 2, h = 8, tau = 0.1, top-p 0.95, T = 0.6 code / 1.0 math; 64 calls in both arms of the
matched comparison; 48 verification calls against RSA; PairRL lambda = 1, threshold 0.2, lr
1e-6, batch 64, clip 0.2 / 0.28, Dr.GRPO. The RL configs train on a code task, and the RL
reward path grades CodeContests train rows. No model is loaded."""

import json
import math
import os

import pytest

from prd_jax.aot.chips import parse_target
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.evaluate import build_spec
from prd_jax.mesh import parse_mesh_shape
from prd_jax.tasks import get_task
from prd_jax.tasks.contest import ContestTask
from prd_jax.train.rl import RLConfig, TaskReward, run_task

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
EVAL = os.path.join(ROOT, "configs", "eval")
RL = os.path.join(ROOT, "configs", "rl")
BENCHES = ("codecontests", "livecodebench_v5", "livecodebench_v6", "hmmt_feb2025")
CODE = BENCHES[:3]
EVAL_CONFIGS = ("gptoss20b_v1_infer", "gptoss20b_v1_vs_rsa", "gptoss20b_v1_claims", "qwen3_4b_v1_matched_calls",
                "qwen3_4b_v1_after_rl")
RL_CONFIGS = ("qwen3_4b_pairrl", "qwen3_4b_pairrl_frozen", "qwen3_4b_pointrl", "qwen3_4b_rl_baseline")
DEVICES = {"8xh200": 8, "v5p-128": 64, "v5p-64": 32}


def _eval(name, arg):
    return load_config(os.path.join(EVAL, f"{name}.py") + ("" if arg is None else f":{arg}"))


def _specs(config):
    return [build_spec(dict(e)) for e in config.operators]


def _calls(spec) -> int:
    """Model calls per problem of a best-of-N spec: N candidates + its judge calls."""
    judge_calls = {"pairwise_v1": spec.judge.budget_multiple * spec.n, "self_pointwise": spec.n}
    return spec.n + judge_calls.get(spec.selector, 0)


def _check_common(config, bench):
    """Paper settings every V1 config shares, read off the built specs."""
    code = bench in CODE
    assert config.task == bench and get_task(config.task).name == bench
    assert (config.sampling.temperature, config.sampling.top_p) == ((0.6 if code else 1.0), 0.95)  # V1 §4
    for spec in _specs(config):
        if spec.__class__.__name__ == "BestOfN":
            assert spec.n == 16
            if spec.selector in ("pairwise_v1", "self_pointwise"):
                j = spec.judge
                assert (j.d_min, j.window, j.tau) == (2, 8, 0.1)
                assert j.domain == ("code" if code else "math")
        if spec.__class__.__name__ == "RSA":
            assert spec.population == 16


@pytest.mark.parametrize("bench", BENCHES)
def test_gptoss_v1_infer_budgets_on_each_benchmark(bench):
    config = _eval("gptoss20b_v1_infer", bench)
    _check_common(config, bench)
    specs = _specs(config)
    pairwise = [s for s in specs if getattr(s, "selector", "") == "pairwise_v1"]
    assert sorted(s.judge.budget_multiple for s in pairwise) == [1, 2, 3]
    assert sorted(_calls(s) - s.n for s in pairwise) == [16, 32, 48]  # 1x, 2x, 3x N verification calls
    assert [s.selector for s in specs if getattr(s, "selector", "") == "self_pointwise"] == ["self_pointwise"]
    assert config.model == "gpt-oss-20b"


def test_remote_backend_takes_the_tokenizer_from_the_environment(monkeypatch):
    monkeypatch.delenv("GPT_OSS_20B_DIR", raising=False)
    config = _eval("gptoss20b_v1_infer", "livecodebench_v6")
    b = config.backend
    assert (b.kind, b.api, b.model, b.api_key_env, b.tokenizer) == ("openai", "completions", "openai/gpt-oss-20b", "",
                                                                    "")
    assert config.model_path == ""  # nothing loaded locally
    monkeypatch.setenv("GPT_OSS_20B_DIR", "ckpt/gpt-oss-20b")
    assert _eval("gptoss20b_v1_infer", "livecodebench_v6").backend.tokenizer == "ckpt/gpt-oss-20b"
    pod = _eval("gptoss20b_v1_infer", "codecontests,8xh200")
    assert pod.model_path == "ckpt/gpt-oss-20b" and "backend" not in pod


@pytest.mark.parametrize("name,arg", [("gptoss20b_v1_infer", "codecontests,8xh200"),
                                      ("gptoss20b_v1_infer", "codecontests,v5p-128"),
                                      ("gptoss20b_v1_infer", "codecontests,v5p-64"),
                                      ("qwen3_4b_v1_matched_calls", "livecodebench_v6,8xh200"),
                                      ("qwen3_4b_v1_after_rl", "pairrl,livecodebench_v5,v5p-128")])
def test_in_graph_args_declare_a_target_their_mesh_fills(name, arg):
    config = _eval(name, arg)
    devices = DEVICES[arg.split(",")[-1]]
    assert parse_target(config.target).devices == devices == math.prod(parse_mesh_shape(config.mesh).values())
    assert config.dtype == "bfloat16" and config.model in ("gpt-oss-20b", "qwen3-4b-instruct-2507")


@pytest.mark.parametrize("bench", BENCHES)
def test_qwen3_4b_pairwise_and_pointwise_match_at_64_calls(bench):
    config = _eval("qwen3_4b_v1_matched_calls", bench)
    assert config.model == "qwen3-4b-instruct-2507"
    specs = _specs(config)
    pair, point = specs[0], specs[1]
    assert (pair.selector, pair.n, pair.judge.budget_multiple) == ("pairwise_v1", 16, 3)
    assert (point.selector, point.n) == ("self_pointwise", 32)
    assert _calls(pair) == _calls(point) == 64
    assert sorted(_calls(s) for s in specs[2:]) == [32, 32]  # the unmatched references
    temperature = 0.6 if bench in CODE else 1.0
    assert (config.sampling.temperature, config.sampling.top_p, config.task) == (temperature, 0.95, bench)


def test_lcb_v6_against_rsa_uses_48_verification_calls():
    config = _eval("gptoss20b_v1_vs_rsa", None)
    _check_common(config, "livecodebench_v6")
    specs = _specs(config)
    v1 = [s for s in specs if getattr(s, "selector", "") == "pairwise_v1"]
    assert len(v1) == 1 and _calls(v1[0]) - v1[0].n == 48 and v1[0].n == 16
    rsa = [s for s in specs if s.__class__.__name__ == "RSA"]
    assert [s.loops for s in rsa] == [1, 2, 3, 4] and {(s.population, s.subset) for s in rsa} == {(16, 4)}


def test_missing_claims_each_have_a_config():
    runs = {claim: _eval("gptoss20b_v1_claims", claim) for claim in ("pass_at_n", "self_ranking", "rsa_decay",
                                                                     "difficulty")}
    assert [s.__class__.__name__ for s in _specs(runs["pass_at_n"])] == ["LongCoT"]
    assert runs["pass_at_n"].k_samples == 16  # pass@16 = Pass@N, N = 16 independent samples
    selectors = [s.selector for s in _specs(runs["self_ranking"])]
    assert selectors == ["self_pointwise", "pairwise_v1", "pairwise_v1", "pairwise_v1", "random"]
    assert [s.loops for s in _specs(runs["rsa_decay"]) if s.__class__.__name__ == "RSA"] == [1, 2, 3, 4]
    assert runs["difficulty"].task == "livecodebench_v6"  # V1 §4: "hard LCB-v6 problems" (easy / medium / hard)
    assert [s.label for s in _specs(runs["difficulty"])] == [s.label for s in _specs(
        _eval("gptoss20b_v1_infer", "livecodebench_v6"))]
    for claim, config in runs.items():
        _check_common(config, config.task)
    hmmt = _eval("gptoss20b_v1_claims", "self_ranking,hmmt_feb2025")
    _check_common(hmmt, "hmmt_feb2025")


def test_after_rl_eval_is_v1_infer_at_2x_on_code():
    """PairRL's rows: Pass@1 and V1-Infer at 1x and 2x (the per-policy selectors: test_v1_comparisons)."""
    for bench in ("livecodebench_v5", "livecodebench_v6", "codecontests"):
        config = _eval("qwen3_4b_v1_after_rl", f"pairrl,{bench}")
        _check_common(config, bench)
        v1 = [s for s in _specs(config) if getattr(s, "selector", "") == "pairwise_v1"]
        assert [(s.n, s.judge.budget_multiple) for s in v1] == [(16, 1), (16, 2)]
    with pytest.raises(ValueError, match="qwen3_4b_v1_after_rl.py.*allowed"):
        _eval("qwen3_4b_v1_after_rl", "pairrl,hmmt_feb2025")


@pytest.mark.parametrize("name,bad", [("gptoss20b_v1_infer", "aime2025"), ("gptoss20b_v1_infer", "codecontests,tpu"),
                                      ("gptoss20b_v1_claims", "top1"), ("qwen3_4b_v1_matched_calls", "a,b,c")])
def test_unknown_args_name_the_allowed_values(name, bad):
    with pytest.raises(ValueError, match=rf"{name}\.py: arg .* allowed"):
        _eval(name, bad)


# ----------------------------------------------------------------------------- RL on code (V1 §5)

@pytest.mark.parametrize("pod", ["v5p-128", "8xh200"])
def test_rl_configs_train_on_code_with_the_paper_numbers(pod):
    for name in RL_CONFIGS:
        c = load_config(os.path.join(RL, f"{name}.py") + f":{pod}")
        rl = RLConfig.from_config(c)
        task = run_task(c, rl)
        assert isinstance(task, ContestTask) and task.name == "codecontests" and c.split == "train"
        assert (rl.templates, task.reward_mode) == ("code", "all_pass")
        assert (rl.advantage, rl.loss, rl.eps_low, rl.eps_high, rl.kl_coef) == ("dr_grpo", "ppo", 0.2, 0.28, 0.0)
        assert (rl.prompts_per_step, c.optim.learning_rate) == (64, 1e-6)
        if rl.verifier != "none":
            assert (rl.verifier_coef, rl.verifier_threshold) == (1.0, 0.2)  # lambda, threshold
        math_variant = load_config(os.path.join(RL, f"{name}.py") + f":{pod},math")
        assert (math_variant.task, math_variant.split) == ("gsm8k", "train")
        assert RLConfig.from_config(math_variant).templates == "default"


@pytest.fixture(scope="module")
def cc_train_dir(tmp_path_factory):
    """A CodeContests train split in the published record format (one JSONL file)."""
    root = tmp_path_factory.mktemp("data")
    folder = root / "code" / "codecontests"
    folder.mkdir(parents=True)
    row = {"name": "1_A. Sum", "description": "Print the sum of two integers.",
           "public_tests": {"input": ["1 2\n"], "output": ["3\n"]},
           "private_tests": {"input": ["10 20\n"], "output": ["30\n"]},
           "generated_tests": {"input": ["0 0\n", "7 -7\n"], "output": ["0\n", "0\n"]},
           "difficulty": 7, "time_limit": {"seconds": 2, "nanos": 0}, "memory_limit_bytes": 256 << 20}
    (folder / "train.jsonl").write_text(json.dumps(row) + "\n")
    return str(root)


def test_rl_reward_path_grades_codecontests_train_rows(cc_train_dir):
    """The PairRL config's task reads the train split and its reward runs the tests: all-pass
    gives 1 / 0; the fraction mode gives the share of the 4 cases passed."""
    c = apply_overrides(load_config(os.path.join(RL, "qwen3_4b_pairrl.py:8xh200")),
                        [f"--config.data_dir={cc_train_dir}"])
    rl = RLConfig.from_config(c)
    task = run_task(c, rl)
    rows = task.problems(c.split, data_dir=c.data_dir)
    assert [r["id"] for r in rows] == ["1_A. Sum"]
    key = task.gold_key(rows[0])
    right = "```python\na, b = map(int, input().split())\nprint(a + b)\n```"
    half = "```python\na, b = map(int, input().split())\nprint(a + b if b > 0 else 1)\n```"  # 1 2 and 10 20 only
    reward = TaskReward(task, rows)
    assert [g["reward"] for g in reward.grades([right, half], [key, key])] == [1.0, 0.0]
    fraction = TaskReward(task.options(reward_mode="fraction"), rows)
    assert fraction.many([right, half], [key, key]) == [1.0, 0.5]
