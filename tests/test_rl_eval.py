"""RL's held-out eval and sample rollouts (prd_jax/train/rl_eval.py, rollout_log.py).

- `config.rl.eval_*` / `log_rollouts*` reach RLConfig through `--config.rl.x=v`; the default
  eval operators are Long-CoT (plus the RL operator for operator RL); bad entries name the field.
- `StepSamples.pick` on hand-made rows: evenly spaced rows, right-aligned prompts decoded.
- configs/rl/tiny_pdr.py, 2 steps with eval_every=1 (trained on a reward with spread, so the
  params move): metrics.jsonl's eval/<op>/* at steps 1 and 2 equal `prd_jax.evaluate.evaluate`
  of each step's checkpoint (the independent path), and the second eval compiles nothing;
  rollouts.jsonl holds the picked rollouts, each reward that of its own text.
- configs/rl/tiny.py with the task's grader: the logged rewards equal the grader on the logged texts.
"""

from __future__ import annotations

import contextlib
import json
import os
import types

import jax
import ml_collections
import numpy as np
import pytest

from prd_jax.config_io import apply_overrides, load_config
from prd_jax.data.synthetic import CharVocab
from prd_jax.train import rl as rl_mod
from prd_jax.train.rl import RLConfig
from prd_jax.train.rollout_log import StepSamples

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
RL_TINY_PDR = os.path.join(ROOT, "configs", "rl", "tiny_pdr.py")
SMALL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
         "--config.model.overrides.num_layers=1", "--config.data.num_train=64", "--config.data.difficulty=(1,)"]
RL_SMALL = SMALL + ["--config.rl.prompts_per_step=2", "--config.rl.samples_per_prompt=2",
                    "--config.rl.max_new_tokens=16", "--config.optim.weight_decay=0.0"]


# ----------------------------------------------------------------------------- fields and defaults

def test_eval_and_rollout_fields_reach_rlconfig_with_defaults():
    rl = RLConfig.from_config(load_config(RL_TINY))
    assert (rl.eval_split, rl.eval_problems, rl.log_rollouts_every, rl.log_rollouts) == ("", 8, 0, 4)
    [(name, spec)] = rl.eval_specs()  # no operator RL: Long-CoT at the rollout budget
    assert (name, spec.label) == ("long_cot", f"long_cot(budget={rl.max_new_tokens})")
    pdr = RLConfig.from_config(load_config(RL_TINY_PDR))
    assert [(n, s) for n, s in pdr.eval_specs()] == [("long_cot", spec), ("pdr", pdr.operator)]

    config = apply_overrides(load_config(RL_TINY), [
        "--config.rl.eval_split=train", "--config.rl.eval_problems=3", "--config.rl.log_rollouts_every=2",
        "--config.rl.log_rollouts=5",
        "--config.rl.eval_operators=({'type': 'long_cot', 'max_new_tokens': 8, 'name': 'short'}, "
        "{'type': 'sr', 'rounds': 1, 'max_new_tokens': 8})"])
    rl = RLConfig.from_config(config)
    assert (rl.eval_split, rl.eval_problems, rl.log_rollouts_every, rl.log_rollouts) == ("train", 3, 2, 5)
    assert [(n, s.label) for n, s in rl.eval_specs()] == [("short", "long_cot(budget=8)"),
                                                          ("sr", "sr(rounds=1,budget=8)")]


@pytest.mark.parametrize("override,message", [
    ("eval_problems=0", r"config\.rl\.eval_problems=0; must be >= 1"),
    ("log_rollouts_every=-1", r"config\.rl\.log_rollouts_every=-1; must be >= 0"),
    ("log_rollouts=0", r"config\.rl\.log_rollouts=0; must be >= 1"),
    ("eval_operators=()", r"config\.rl\.eval_operators=\(\); must be None"),
    ("eval_operators=({'type': 'long_cot', 'budget': 8},)",  # the budget is a CallBudget (max_new_tokens=8 flat)
     r"config\.rl\.eval_operators\[0\]: LongCoT: budget=8; must be a CallBudget or a dict of its fields"),
    ("eval_operators=({'type': 'long_cot', 'kappa': 8},)", r"config\.rl\.eval_operators\[0\]: .*unknown fields \['kappa'\]"),
    ("eval_operators=({'max_new_tokens': 8},)", r"config\.rl\.eval_operators\[0\]: operator type None; allowed"),
    ("eval_operators=({'type': 'long_cot'}, {'type': 'long_cot', 'max_new_tokens': 8})",
     r"share the name\(s\) \['long_cot'\]; give each a distinct `name`"),
])
def test_bad_eval_fields_name_the_field(override, message):
    with pytest.raises(ValueError, match=message):
        RLConfig.from_config(apply_overrides(load_config(RL_TINY), [f"--config.rl.{override}"]))


def test_step_samples_pick_evenly_spaced_rows_and_decode_right_aligned_prompts():
    tok = CharVocab()
    enc = lambda s, w: np.array([tok.pad_id] * (w - len(tok.encode(s))) + tok.encode(s))
    samples = StepSamples(tok)
    prompts = np.stack([enc("p0", 4), enc("p1", 4), enc("q22", 4)])  # right-aligned, width 4
    comps = np.stack([np.array(tok.encode(s) + [tok.pad_id] * (5 - len(s))) for s in ("aa", "bbb", "c")])
    samples.add("standard", prompts, [2, 2, 3], comps, [2, 3, 1], ["aa", "bbb", "c"], [1.0, 0.0, 0.5], ["7", "8", "9"])
    samples.add("operator", prompts[:2], [2, 2], comps[:2], [2, 3], ["aa", "b"], [0.0, 1.0], ["7", "8"])
    assert samples.size == 5
    got = samples.pick(3)  # rows linspace(0, 4, 3) = 0, 2, 4
    assert [(r["kind"], r["index"], r["prompt"], r["completion"], r["reward"], r["gold"]) for r in got] == [
        ("standard", 0, "p0", "aa", 1.0, "7"), ("standard", 2, "q22", "c", 0.5, "9"),
        ("operator", 4, "p1", "bbb", 1.0, "8")]
    assert "answer_text" not in got[0] and got[2]["answer_text"] == "b"  # the graded text differed
    assert [r["index"] for r in samples.pick(10)] == [0, 1, 2, 3, 4]


def test_rollout_log_writes_lines_and_text_and_drops_lines_after_the_restored_step(tmp_path):
    from prd_jax.tracking import Tracker
    from prd_jax.train.rollout_log import RolloutLog

    class Texts(Tracker):
        def __init__(self):
            self.got = []

        def text(self, step, name, text):
            self.got.append((step, name, text))

    record = {"kind": "standard", "index": 0, "gold": "7", "prompt": "p", "completion": "c", "reward": 1.0}
    texts = Texts()
    log = RolloutLog(str(tmp_path), 0, texts)
    for step in (1, 2, 3):
        log.write(step, [dict(record, index=step)])
    log.write(4, [])  # nothing picked this step: no line, no text
    assert [r["step"] for r in _lines(tmp_path, "rollouts.jsonl")] == [1, 2, 3]
    assert [(s, n) for s, n, _ in texts.got] == [(1, "rollouts"), (2, "rollouts"), (3, "rollouts")]
    assert "reward 1" in texts.got[0][2] and "```\np\n```" in texts.got[0][2]
    RolloutLog(str(tmp_path), 2, Tracker())  # resumed at step 2
    assert _lines(tmp_path, "rollouts.jsonl") == [{"step": s, **record, "index": s} for s in (1, 2)]


# ----------------------------------------------------------------------------- runs

@pytest.fixture(scope="module")
def sft_workdir(tmp_path_factory):
    from prd_jax.train.run import train

    workdir = str(tmp_path_factory.mktemp("sft"))
    train(apply_overrides(load_config(os.path.join(ROOT, "configs", "sft", "tiny.py")), SMALL + [
        "--config.steps=2", "--config.eval_every=0", "--config.data.seq_len=96", "--config.batch_size=8"]),
        workdir, progress=False)
    return workdir


@contextlib.contextmanager
def compiles():
    """[count] of XLA backend compilations while the block runs (`jax.monitoring` events)."""
    seen = [0]

    def listen(event, duration, **kwargs):
        if event == "/jax/core/compile/backend_compile_duration":
            seen[0] += 1

    jax.monitoring.register_event_duration_secs_listener(listen)
    try:
        yield seen
    finally:
        jax.monitoring.unregister_event_duration_listener(listen)


def _lines(workdir, name):
    with open(os.path.join(workdir, name)) as f:
        return [json.loads(x) for x in f]


def _grade(task, rows, record):
    row = task.row_for_key(record["gold"], {task.gold_key(r): r for r in rows})
    return task.grade_many([row], [record.get("answer_text", record["completion"])])[0]


@pytest.mark.slow
def test_held_out_eval_equals_evaluate_of_each_checkpoint_and_compiles_once(sft_workdir, tmp_path, monkeypatch):
    """Training rewards with spread (the parity of the graded text's length, `fakes.spread_rewards`)
    move the params between steps; the held-out eval grades with the task's own grader."""
    from fakes import spread_rewards
    from prd_jax.checkpoint import read_params
    from prd_jax.evaluate import evaluate
    from prd_jax.model.weights import param_shardings
    from prd_jax.train import setup
    from prd_jax.train.run import train

    config = apply_overrides(load_config(RL_TINY_PDR), RL_SMALL + [
        f"--config.model.init_workdir={sft_workdir}", "--config.steps=2", "--config.checkpoint_every=1",
        "--config.eval_every=1", "--config.rl.eval_problems=3", "--config.rl.log_rollouts_every=2",
        "--config.rl.log_rollouts=3", "--config.optim.learning_rate=3e-3"])
    monkeypatch.setattr(rl_mod.TaskReward, "grades", lambda self, texts, keys: spread_rewards(texts, keys))
    counts = {}
    evaluate_step = rl_mod.RLStage.evaluate

    def counted(self, params, step):
        with compiles() as seen:
            out = evaluate_step(self, params, step)
        counts[step] = seen[0]
        return out

    monkeypatch.setattr(rl_mod.RLStage, "evaluate", counted)
    workdir = str(tmp_path / "rl")
    train(config, workdir, progress=False)
    assert counts[1] > 0 and counts[2] == 0, counts  # the second eval reuses every compiled program

    metrics = {m["step"]: m for m in _lines(workdir, "metrics.jsonl")}
    rl = RLConfig.from_config(config)
    names = {"long_cot": {"type": "long_cot", "max_new_tokens": 16},
             "pdr": {"type": "pdr", **config.rl.operator.to_dict()}}
    task = setup.training_task(config)
    rows = task.problems("test", limit=3)  # the task's default split
    mesh = setup.build_mesh(config)
    cfg, _, tok = setup.build_model(config, mesh)
    ec = ml_collections.ConfigDict(dict(
        task=config.task, model="tiny", seed=config.seed, templates=rl.templates, k_samples=1, batch_size=3,
        num_problems=3, max_problem_tokens=rl.problem_tokens, sampling=config.sampling.to_dict(),
        operators=list(names.values())))
    seen_values = set()
    for step in (1, 2):
        params = jax.device_put(read_params(workdir, step)[1], param_shardings(cfg, mesh))
        model = types.SimpleNamespace(cfg=cfg, params=params, tokenizer=tok, mesh=mesh)
        table = evaluate(ec, str(tmp_path / f"eval{step}"), model=model, rows=rows, progress=False)
        for (name, _), row in zip(names.items(), table):
            assert row["problems"] == 3 and row["k"] == 1
            assert metrics[step][f"eval/{name}/accuracy"] == row["mean_at_k"], (step, name)
            assert metrics[step][f"eval/{name}/unparsed"] == row["parse_failures"] / 3, (step, name)
            for b in ("b_seq", "b_total", "b_seq_io", "b_total_io"):
                assert metrics[step][f"eval/{name}/{b}"] == row[b], (step, name, b)
                seen_values.add(row[b])
    assert metrics[1]["eval/pdr/b_total"] > metrics[1]["eval/pdr/b_seq"]  # drafts count in B_total only
    assert len(seen_values) > 2  # budgets vary: the equality is over real numbers, not zeros
    evals = [{k: v for k, v in metrics[s].items() if k.startswith("eval/")} for s in (1, 2)]
    assert evals[0] != evals[1]  # each eval saw its own step's params

    records = _lines(workdir, "rollouts.jsonl")
    assert [r["step"] for r in records] == [2, 2, 2]  # only step 2 (log_rollouts_every=2), 3 rollouts
    assert {r["kind"] for r in records} == {"standard", "operator"}
    train_rows = setup.rl_problems(config, task)
    for r in records:
        assert set(r) >= {"step", "kind", "index", "gold", "prompt", "completion", "reward"}
        assert r["reward"] == len(r.get("answer_text", r["completion"])) % 2  # the reward of this very text
        assert any(task.problem_text(x) in r["prompt"] for x in train_rows if task.gold_key(x) == r["gold"])


@pytest.mark.slow
def test_logged_rewards_equal_the_task_grader_on_the_logged_texts(sft_workdir, tmp_path):
    from prd_jax.train import setup
    from prd_jax.train.run import train

    config = apply_overrides(load_config(RL_TINY), RL_SMALL + [
        f"--config.model.init_workdir={sft_workdir}", "--config.steps=2", "--config.rl.log_rollouts_every=1",
        "--config.rl.log_rollouts=4", "--config.rl.samples_per_prompt=4"])
    workdir = str(tmp_path / "rl")
    train(config, workdir, progress=False)
    records = _lines(workdir, "rollouts.jsonl")
    assert [r["step"] for r in records] == [1] * 4 + [2] * 4
    assert [r["index"] for r in records[:4]] == [0, 2, 5, 7]  # linspace(0, 7, 4) of 2 prompts x 4 samples
    task = setup.training_task(config)
    train_rows = setup.rl_problems(config, task)
    for r in records:
        assert r["kind"] == "standard" and r["reward"] == float(_grade(task, train_rows, r)["reward"])
    assert not any(k.startswith("eval/") for m in _lines(workdir, "metrics.jsonl") for k in m)  # eval_every=0
