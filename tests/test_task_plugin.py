"""A task is one file, and data enters only through it (issue 35 §1).

`tests/jsonl_benchmark_task.py` adds a JSONL benchmark out of tree in one module; here its rows
are read back exactly as the files hold them (through its TFDS builder and seqio task), eval
grades every row against the file's answers, RL trains a step on its train split with its
grader as the reward, and SFT trains on the rows' worked solutions. Configs that still name
data beside the task get an error naming the new
field."""

import json
import os

import ml_collections
import numpy as np
import pytest

from prd_jax.config_io import apply_overrides, load_config
from prd_jax.rewards.math import grade
from prd_jax.tasks import get_task, task_for_config

ROOT = os.path.join(os.path.dirname(__file__), "..")
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")

TRAIN = [{"id": f"tr{i}", "problem": f"{i}+{i + 1}", "answer": str(2 * i + 1), "level": str(i % 3),
          "solution": f"{i}+{i + 1}={2 * i + 1} \\boxed{{{2 * i + 1}}}"} for i in range(6)]
TEST = [{"id": f"te{i}", "problem": f"{i}*3", "answer": str(3 * i), "solution": f"\\boxed{{{3 * i}}}"}
        for i in range(3)]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """A data dir with the benchmark's two files, and a fresh TFDS cache."""
    root = tmp_path / "data" / "tiny_arith"
    root.mkdir(parents=True)
    for split, rows in (("train", TRAIN), ("test", TEST)):
        (root / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    monkeypatch.setenv("PRD_TFDS_DIR", str(tmp_path / "tfds"))
    return str(tmp_path / "data")


def test_removed_data_fields_name_the_new_field():
    cfg = lambda **kw: ml_collections.ConfigDict(kw)
    with pytest.raises(ValueError, match=r"config.dataset was removed: use config.task") as err:
        task_for_config(cfg(dataset="gsm8k_test", task="gsm8k"))
    assert "'gsm8k'" in str(err.value) and "'humaneval'" in str(err.value)  # the allowed tasks
    with pytest.raises(ValueError, match=r"config.data.source was removed: use config.task .*config.data.path"):
        task_for_config(cfg(task="gsm8k", data=dict(source="gsm8k_train")))
    with pytest.raises(ValueError, match=r"config.data.family was removed: use config.task"):
        task_for_config(cfg(task="modchain", data=dict(family="preimage")))
    with pytest.raises(ValueError, match=r"config.task is unset; set it to one of \["):
        task_for_config(cfg(data=dict(num_train=4)))
    from prd_jax.train import setup

    old_sft = apply_overrides(load_config(SFT_TINY), [])
    with old_sft.unlocked():
        old_sft.data.source = "synthetic"
    with pytest.raises(ValueError, match=r"config.data.source was removed"):
        setup.sft_task(old_sft)
    with pytest.raises(ValueError, match=r"config.task='gsm8k': its SFT rows come from the task itself"):
        setup.sft_task(apply_overrides(load_config(SFT_TINY), ["--config.task=gsm8k"]))


def test_one_declaration_is_the_whole_task():
    import jsonl_benchmark_task as plugin

    task = get_task("tiny_arith")
    assert task is plugin.TINY_ARITH and task.source.split_names == ("train", "test")
    # its grader and reward option: boxed answers only, checked by math-verify
    assert task.grade(TEST[2], "so \\boxed{6}")["correct"] and task.reward(TEST[2], "\\boxed{6.0}") == 1.0
    assert task.grade(TEST[2], "it is 6")["parsed"] is False  # last_number_fallback=False
    assert get_task("gsm8k").grade(TEST[2], "it is 6")["correct"]  # the default would take it


@pytest.mark.slow  # loads TensorFlow, seqio and TFDS
def test_jsonl_task_rows_equal_the_files(data_dir):
    import seqio

    import jsonl_benchmark_task  # noqa: F401

    task = get_task("tiny_arith")
    want = [{k: r[k] for k in ("id", "problem", "answer", "solution")} for r in TRAIN]  # the declared fields
    assert task.problems("train", data_dir=data_dir) == want
    assert task.problems("train", limit=2, data_dir=data_dir) == want[:2]
    assert task.problems(data_dir=data_dir) == TEST  # default split "test"
    assert "prd_tiny_arith" in seqio.TaskRegistry.names()  # read through its seqio task
    with pytest.raises(ValueError, match=r"no split 'valid'; allowed splits: \['test', 'train'\]"):
        task.problems("valid", data_dir=data_dir)
    with pytest.raises(FileNotFoundError, match="tiny_arith/test.jsonl"):
        task.problems("test", data_dir=os.path.join(data_dir, "nowhere"))


def _tiny_model():
    import jax

    from prd_jax.data.synthetic import CharVocab
    from prd_jax.model import get_model_config, init_params

    cfg = get_model_config("tiny", vocab_size=128, max_position=512)
    import types

    return types.SimpleNamespace(cfg=cfg, params=init_params(cfg, jax.random.key(0)), tokenizer=CharVocab(),
                                 mesh=None)


@pytest.mark.slow  # TFDS + an eval compile + an RL step (about a minute on 2 cores)
def test_jsonl_task_runs_through_eval_and_rl(data_dir, tmp_path):
    import jsonl_benchmark_task  # noqa: F401
    from prd_jax.evaluate import evaluate
    from prd_jax.train.rl import RLStage
    from prd_jax.train.run import train

    # eval: config.task alone names the problems; every row is graded against the file's answer
    from prd_jax.demo import CONFIGS, eval_config

    config = eval_config(load_config(os.path.join(CONFIGS, "demo.py")))  # an eval config of a tiny model
    config.task, config.data_dir, config.seed = "tiny_arith", data_dir, 0
    config.k_samples, config.batch_size, config.num_problems, config.max_problem_tokens = 2, 2, 3, 16
    config.operators = [dict(type="long_cot", max_new_tokens=8)]
    (table,) = evaluate(config, str(tmp_path / "ev"), model=_tiny_model(), progress=False)
    rows = [json.loads(line) for line in open(tmp_path / "ev" / "results.jsonl")]
    assert sorted((r["problem_id"], r["sample"]) for r in rows) == [(t["id"], s) for t in TEST for s in (0, 1)]
    answers = {t["id"]: t["answer"] for t in TEST}
    for r in rows:
        assert r["task"] == "tiny_arith"
        assert r["correct"] == grade(r["completion"], answers[r["problem_id"]], last_number_fallback=False)
    assert table["problems"] == 3 and table["k"] == 2
    assert (tmp_path / "ev" / "summary.md").read_text().startswith("# tiny_arith: tiny")

    # RL: the task's train split are the prompts, its grader the reward
    rl_config = apply_overrides(load_config(RL_TINY), [
        "--config.task=tiny_arith", f"--config.data_dir={data_dir}", "--config.data.num_train=0",
        "--config.model.init=random", "--config.steps=1", "--config.rl.prompts_per_step=2",
        "--config.rl.samples_per_prompt=2", "--config.rl.max_new_tokens=8", "--config.model.overrides.num_layers=1",
        "--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64"])
    from prd_jax.train import setup

    mesh = setup.build_mesh(rl_config)
    cfg, _, tok = setup.build_model(rl_config, mesh)
    stage = RLStage(rl_config, cfg, tok, mesh)
    assert [(key, text) for _, key, text in stage.problems] == [(r["answer"], r["problem"]) for r in TRAIN]
    assert stage.reward_fn.task.name == "tiny_arith"
    got = stage.reward_fn.grades(["\\boxed{1}", "1", "the answer is 11"], ["1", "1", "11"])
    assert [g["reward"] for g in got] == [1.0, 0.0, 1.0]  # no last-number fallback: the task's option
    train(rl_config, str(tmp_path / "rl"), progress=False)
    metrics = [json.loads(line) for line in open(tmp_path / "rl" / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [1]
    assert np.isfinite(metrics[0]["loss"]) and 0.0 <= metrics[0]["reward/mean"] <= 1.0

    # SFT: the task's train rows that carry a worked solution, prompted with its solve template
    sft_config = apply_overrides(load_config(SFT_TINY), [
        "--config.task=tiny_arith", f"--config.data_dir={data_dir}", "--config.steps=2",
        "--config.batch_size=4", "--config.eval_every=2", "--config.checkpoint_every=2",
        "--config.model.overrides.num_layers=1", "--config.model.overrides.hidden=32",
        "--config.model.overrides.intermediate=64"])
    train_ex, held = setup.sft_examples(sft_config, tok)
    assert len(train_ex) == len(TRAIN) and held == []  # the task declares no validation split
    assert [list(c[:-1]) for _, c in train_ex] == [tok.encode(r["solution"]) for r in TRAIN]  # + end of turn
    assert TRAIN[0]["problem"] in tok.decode(train_ex[0][0].tolist())
    train(sft_config, str(tmp_path / "sft"), progress=False)
    metrics = [json.loads(line) for line in open(tmp_path / "sft" / "metrics.jsonl")]
    assert [m["step"] for m in metrics if "loss" in m] == [1, 2] and all(np.isfinite(m["loss"]) for m in metrics if "loss" in m)


def _memory_task(rows_by_split):
    from prd_jax.tasks.math import MathTask

    class MemoryTask(MathTask):
        def problems(self, split=None, limit=None, data_dir=None):
            return rows_by_split[split or "test"][:limit]

    return MemoryTask("memory_arith", templates="compact")


def test_task_sft_rows_prompt_with_the_solve_template_and_skip_rows_without_a_solution():
    from prd_jax import prompts
    from prd_jax.train.setup import task_sft_rows

    task = _memory_task({"train": TRAIN})
    rows = [dict(r, solution="") if i == 2 else r for i, r in enumerate(TRAIN)]  # row 2 has no solution
    solve = prompts.template_set("compact")["solve"]
    assert task_sft_rows(task, rows, "memory") == [
        {"inputs": prompts.render(solve, problem=r["problem"]), "targets": r["solution"]} for i, r in enumerate(TRAIN) if i != 2]
    assert task.sft_target(rows[2]) is None and task.sft_target({"id": "x"}) is None
    with pytest.raises(ValueError, match=r"memory: none of its 2 rows has an SFT target .*'solution'.*\['answer', 'id'"):
        task_sft_rows(task, [{"id": "a", "answer": "1"}, {"id": "b", "answer": "2"}], "memory")
