"""seqio is the one data path (issue 14 §4): built-in tasks read back exactly the JSONL rows
through the seqio tasks their `JsonlFiles` declarations register (issue 35 §1),
SFT / RL data built through seqio equals the direct numpy path, a user's own seqio task
trains with no code change, and TensorFlow stays out of the core import path."""

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from prd_jax.config_io import apply_overrides, load_config
from prd_jax.data import chat_traces, paths, preimage, seqio_rows, sft, synthetic
from prd_jax.tasks import get_task

pytestmark = pytest.mark.slow  # loads TensorFlow, seqio and TFDS

ROOT = os.path.join(os.path.dirname(__file__), "..")
SFT_TINY = os.path.join(ROOT, "configs", "sft", "tiny.py")
SMALL = ["--config.model.overrides.hidden=32", "--config.model.overrides.intermediate=64",
         "--config.model.overrides.num_layers=1", "--config.data.seq_len=96", "--config.batch_size=8"]
VOCAB = synthetic.CharVocab()


@pytest.fixture(scope="module")
def builtin(tmp_path_factory):
    """The built-in tasks' data, read over a fresh TFDS cache dir."""
    old = os.environ.get(paths.TFDS_DIR_ENV)
    os.environ[paths.TFDS_DIR_ENV] = str(tmp_path_factory.mktemp("tfds"))
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(paths.TFDS_DIR_ENV)
        else:
            os.environ[paths.TFDS_DIR_ENV] = old


FILES = {"gsm8k_train": ("gsm8k", "train"), "gsm8k_test": ("gsm8k", "test"), "math500": ("math500", "test"),
         "aime2024": ("aime2024", "test"), "aime2025": ("aime2025", "test"), "humaneval": ("humaneval", "test")}


def _jsonl(name, limit=None):
    task, split = FILES[name]
    out = []
    with open(os.path.join(paths.data_dir(), *dict(get_task(task).source.splits)[split].split("/")),
              encoding="utf-8") as f:
        for line in f:
            if line.strip() and (limit is None or len(out) < limit):
                out.append(json.loads(line))
    return out


@pytest.mark.parametrize("dataset,limit", [("aime2024", None), ("aime2025", None), ("math500", None),
                                           ("gsm8k_test", 40), ("gsm8k_train", 40)])
def test_math_rows_equal_jsonl(builtin, dataset, limit):
    task, split = FILES[dataset]
    rows = get_task(task).problems(split, limit=limit)
    fields = get_task(task).source.fields  # id, problem, answer (+ solution where published)
    assert rows == [{k: r[k] for k in fields} for r in _jsonl(dataset, limit)]
    assert all(type(v) is str for r in rows for v in r.values())


def test_humaneval_rows_equal_jsonl(builtin):
    rows = get_task("humaneval").problems()
    lines = _jsonl("humaneval")
    assert len(rows) == len(lines) == 164
    assert rows == [dict(r, id=r["task_id"], problem=r["prompt"], answer=r["task_id"]) for r in lines]
    assert get_task("humaneval").problems(limit=3) == rows[:3]  # deterministic, file order
    # the task's first read registered its seqio task, which reads the same rows
    assert seqio_rows.read("prd_humaneval", "test", limit=3) == rows[:3]


def test_read_errors_name_the_allowed_values(builtin, tmp_path):
    get_task("aime2024").problems(limit=1)  # registers prd_aime2024
    with pytest.raises(ValueError, match=r"unknown seqio task or mixture 'no_such_task'; allowed names \(registered\)") as err:
        seqio_rows.read("no_such_task", "train")
    assert "prd_aime2024" in str(err.value)
    with pytest.raises(ValueError, match=r"no split 'train'; allowed splits: \['test'\]"):
        get_task("aime2024").problems("train")
    with pytest.raises(FileNotFoundError) as err:
        get_task("humaneval").problems(data_dir=str(tmp_path))
    assert str(tmp_path / "code" / "humaneval.jsonl") in str(err.value)
    with pytest.raises(ValueError, match="limit=-1"):
        get_task("aime2024").problems(limit=-1)
    with pytest.raises(ValueError, match="limit=-1"):
        seqio_rows.read("prd_aime2024", "test", limit=-1)


def _register_function_task(name, rows_by_split, preprocessors=()):
    import seqio
    import tensorflow as tf

    def dataset_fn(split, shuffle_files, seed=None):
        rows = rows_by_split[split]
        return tf.data.Dataset.from_tensor_slices({k: [r[k] for r in rows] for k in rows[0]})

    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(name, source=seqio.FunctionDataSource(dataset_fn, splits=tuple(rows_by_split)),
                           preprocessors=list(preprocessors), output_features={}, metric_fns=[])
    return name


def test_mixture_rows_are_each_task_in_name_order():
    import seqio

    a = _register_function_task("test_mix_a", {"train": [{"x": "a0", "n": 1}, {"x": "a1", "n": 2}]})
    b = _register_function_task("test_mix_b", {"train": [{"x": "b0", "n": 3}]})
    if "test_mix" in seqio.MixtureRegistry.names():
        seqio.MixtureRegistry.remove("test_mix")
    seqio.MixtureRegistry.add("test_mix", [(b, 1.0), (a, 3.0)])
    assert seqio_rows.read("test_mix", "train") == [{"x": "a0", "n": 1}, {"x": "a1", "n": 2}, {"x": "b0", "n": 3}]
    assert seqio_rows.read("test_mix", "train", limit=2) == [{"x": "a0", "n": 1}, {"x": "a1", "n": 2}]
    assert seqio_rows.splits("test_mix") == ("train",)


def _same(a, b):
    return len(a) == len(b) and all(np.array_equal(x[0], y[0]) and np.array_equal(x[1], y[1])
                                    for x, y in zip(a, b))


def _numpy_sft_examples(config, tokenizer):
    """The pre-seqio SFT path of train.setup, written out: one rng over train then eval problems."""
    data, templates = config.data, config.data.get("templates", "default")
    rng = np.random.default_rng(config.seed)
    out = []
    for n, seed in ((data.num_train, config.seed), (data.num_eval, config.seed + 10_000)):
        rows = []
        for p in synthetic.generate(n, seed, tuple(data.difficulty), family=config.task):
            if p["family"] == "preimage":  # its own trace builder (drafts quoted as the eval quotes them)
                knobs = {k: data[k] for k in preimage.TRACE_DEFAULTS if data.get(k) is not None}
                rows += preimage.sft_traces(rng, p, pdr_fraction=data.pdr_fraction, pdr_k=data.pdr_k,
                                            sr_fraction=data.get("sr_fraction", 0.0),
                                            judge_fraction=data.get("judge_fraction", 0.0), templates=templates, **knobs)
                continue
            rows.append(synthetic.solve_example(p, templates))
            if rng.random() < data.pdr_fraction:
                rows.append(synthetic.pdr_trace(rng, p, data.pdr_k, int(rng.integers(0, data.pdr_k + 1)), templates))
            if rng.random() < data.get("sr_fraction", 0.0):
                rows.append(synthetic.sr_trace(rng, p, bool(rng.integers(2)), templates))
            if rng.random() < data.get("judge_fraction", 0.0):
                rows.append(synthetic.judge_trace(rng, p, tuple(bool(w) for w in rng.integers(0, 2, 2)), templates))
        out.append(sft.examples_from_rows(tokenizer, rows))
    return tuple(out)


def _demo_sft_config():
    from prd_jax.demo import CONFIGS, stage_configs

    demo = load_config(os.path.join(CONFIGS, "demo.py"))
    demo.quick = True
    return stage_configs(demo, "/nonexistent")["sft"]


@pytest.mark.parametrize("which", ["tiny", "demo_quick"])
def test_synthetic_sft_through_seqio_equals_numpy_path(which):
    from prd_jax.train import setup

    config = load_config(SFT_TINY) if which == "tiny" else _demo_sft_config()
    train, held_out = setup.sft_examples(config, VOCAB)
    want_train, want_held_out = _numpy_sft_examples(config, VOCAB)
    assert len(train) > config.data.num_train and len(held_out) >= config.data.num_eval
    assert _same(train, want_train) and _same(held_out, want_held_out)


def test_jsonl_traces_through_seqio_equal_rows(tmp_path, monkeypatch):
    from prd_jax.train import setup

    lines = [{"id": f"r{i}", "prompt": f"What is {i}+1?", "response": f"{i + 1}"} for i in range(12)]
    lines.append({"id": "m", "messages": [{"role": "system", "content": "Be brief."},
                                          {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]})
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    config = apply_overrides(load_config(SFT_TINY), [f"--config.data.path={tmp_path / 'traces'}",
                                                     "--config.data.validation_fraction=0.3"])
    monkeypatch.setenv(paths.TFDS_DIR_ENV, str(tmp_path / "tfds"))
    train, held_out = setup.sft_examples(config, VOCAB)
    splits = chat_traces.split_rows(tmp_path / "traces", 0.3)
    assert len(splits["train"]) + len(splits["validation"]) == 13 and splits["validation"]
    assert _same(train, sft.examples_from_rows(VOCAB, splits["train"]))
    assert _same(held_out, sft.examples_from_rows(VOCAB, splits["validation"]))


def test_rl_problems_through_seqio(builtin):
    from prd_jax.train import setup

    config = load_config(SFT_TINY)
    config.data.num_train = 50
    config.seed = 3
    assert setup.rl_problems(config) == setup.synthetic_rows(config.data, 3, 50, "modchain")  # the task's draws
    config.task = "aime2025"
    config.split = "test"
    config.data.num_train = 5
    assert setup.rl_problems(config) == [{k: r[k] for k in ("id", "problem", "answer")}
                                         for r in _jsonl("aime2025", 5)]
    config.data.source = "aime2025"
    with pytest.raises(ValueError, match=r"config.data.source was removed: use config.task"):
        setup.rl_problems(config)


USER_MODULE = '''
"""A user's own seqio task: registered on import, text inputs/targets made by a preprocessor."""
import seqio
import tensorflow as tf

ROWS = [{"question": "2+3", "result": "5"}, {"question": "7*6", "result": "42"},
        {"question": "9-4", "result": "5"}]


def _dataset(split, shuffle_files, seed=None):
    return tf.data.Dataset.from_tensor_slices({k: [r[k] for r in ROWS] for k in ROWS[0]})


@seqio.map_over_dataset
def _to_text(ex):
    return {"inputs": tf.strings.join(["Compute ", ex["question"], "."]), "targets": ex["result"]}


if "user_throwaway_sft" in seqio.TaskRegistry.names():
    seqio.TaskRegistry.remove("user_throwaway_sft")
seqio.TaskRegistry.add("user_throwaway_sft", source=seqio.FunctionDataSource(_dataset, splits=("train",)),
                       preprocessors=[_to_text], output_features={}, metric_fns=[])
'''


def test_user_seqio_task_trains_two_sft_steps(tmp_path, monkeypatch):
    from prd_jax.train import setup
    from prd_jax.train.run import train

    (tmp_path / "user_tasks_mod.py").write_text(textwrap.dedent(USER_MODULE))
    monkeypatch.syspath_prepend(str(tmp_path))
    config = apply_overrides(load_config(SFT_TINY), SMALL + ["--config.steps=2", "--config.eval_every=0",
                                                             "--config.checkpoint_every=2"])
    config.data.mixture = "user_throwaway_sft"
    config.data.module = "user_tasks_mod"
    train_examples, held_out = setup.sft_examples(config, VOCAB)
    want = [VOCAB.encode_chat([{"role": "user", "content": f"Compute {q}."}]) for q in ("2+3", "7*6", "9-4")]
    assert [list(p) for p, _ in train_examples] == want and held_out == []  # no "validation" split
    assert [VOCAB.decode(c) for _, c in train_examples] == ["5", "42", "5"]
    completion_tokens = sum(len(c) for _, c in train_examples)  # "5"+eos, "42"+eos, "5"+eos = 7
    assert completion_tokens == 7

    train(config, str(tmp_path / "w"), progress=False)
    metrics = [json.loads(x) for x in open(tmp_path / "w" / "metrics.jsonl")]
    assert [m["step"] for m in metrics] == [1, 2]
    assert all(math.isfinite(m["loss"]) for m in metrics)
    # one epoch = the 3 examples in one packed batch: every step trains on exactly their tokens
    assert [m["tokens"] for m in metrics] == [7.0, 7.0]


def test_user_task_errors_name_the_fields(tmp_path):
    from prd_jax.train import setup

    _register_function_task("user_bad_fields", {"train": [{"question": "1+1", "result": "2"}]})
    config = load_config(SFT_TINY)
    config.data.mixture = "user_bad_fields"
    with pytest.raises(ValueError, match=r"no text field among \['prompt_messages', 'inputs_pretokenized', "
                                         r"'inputs'\] \(got fields \['question', 'result'\]\)"):
        setup.sft_examples(config, VOCAB)
    config.data.module = "no_such_module_xyz"
    with pytest.raises(ValueError, match="config.data.module='no_such_module_xyz': cannot import"):
        setup.sft_examples(config, VOCAB)
    config.data.module = ""
    config.split = "dev"
    with pytest.raises(ValueError, match=r"config.split='dev': seqio task 'user_bad_fields' has splits \['train'\]"):
        setup.sft_examples(config, VOCAB)


def test_core_import_path_has_no_tensorflow():
    code = ("import sys; import prd_jax.train.step, prd_jax.operators, prd_jax.sampling, prd_jax.model, "
            "prd_jax.train.setup, prd_jax.data.seqio_rows, prd_jax.data.synthetic, prd_jax.data.sft; "
            "bad = [m for m in ('tensorflow', 'seqio', 'tensorflow_datasets') if m in sys.modules]; "
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=300)
