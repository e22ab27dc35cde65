"""A trained char-vocabulary workdir (configs/sft/tiny.py, 2 steps) is evaluated with
`config.checkpoint=WORKDIR@STEP` exactly as its params are when handed to `evaluate` directly,
a resumed eval on another checkpoint is refused, bad `config.checkpoint` values fail naming
the field, and `prd-jax serve --workdir` serves it over HTTP with the tokens our sampler gives."""

import json
import os
import types

import httpx
import jax
import numpy as np
import pytest

from prd_jax.checkpoint import read_params
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.data.synthetic import CharVocab
from prd_jax.evaluate import evaluate
from prd_jax.model import NAMED_CONFIGS
from prd_jax.sampling import Sampler, Sampling, SamplingConfig
from servers import prd_serve

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TRAIN_OVERRIDES = ["--config.steps=2", "--config.checkpoint_every=1", "--config.keep_checkpoints=3",
                   "--config.batch_size=4", "--config.data.num_train=32", "--config.data.num_eval=0",
                   "--config.data.seq_len=128", "--config.eval_every=0", "--config.optim.warmup_steps=1"]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """(workdir, train config) of 2 SFT steps of configs/sft/tiny.py, steps 1 and 2 saved."""
    from prd_jax.train.run import train

    workdir = str(tmp_path_factory.mktemp("sft_tiny"))
    config = apply_overrides(load_config(os.path.join(ROOT, "configs", "sft", "tiny.py")), TRAIN_OVERRIDES)
    train(config, workdir, progress=False)
    return workdir, config


def _eval_config(checkpoint=""):
    import ml_collections

    c = ml_collections.ConfigDict()
    c.task, c.model, c.seed, c.templates = "modchain", "tiny", 0, "compact"
    c.k_samples, c.batch_size, c.num_problems, c.max_problem_tokens = 1, 2, 2, 96
    c.sampling = Sampling(temperature=1.0, top_p=1.0, top_k=0).to_config()
    c.operators = [dict(type="long_cot", max_new_tokens=24), dict(type="sr", rounds=1, max_new_tokens=12)]
    c.checkpoint = checkpoint
    return c


def _rows(workdir):
    with open(os.path.join(workdir, "results.jsonl")) as f:
        return {(r["problem_id"], r["operator"]): r for r in map(json.loads, f)}


@pytest.mark.slow
def test_checkpoint_eval_equals_eval_of_the_steps_params(trained, tmp_path):
    workdir, config = trained
    cfg = NAMED_CONFIGS["tiny"].replace(**config.model.overrides.to_dict())
    step1, step2 = read_params(workdir, 1)[1], read_params(workdir, 2)[1]
    assert any(not np.array_equal(a, b) for a, b in zip(jax.tree.leaves(step1), jax.tree.leaves(step2)))
    direct = types.SimpleNamespace(cfg=cfg, params=jax.device_put(step1), tokenizer=CharVocab(), mesh=None)
    evaluate(_eval_config(), str(tmp_path / "direct"), model=direct, progress=False)
    evaluate(_eval_config(f"{workdir}@1"), str(tmp_path / "ckpt"), progress=False)
    a, b = _rows(tmp_path / "direct"), _rows(tmp_path / "ckpt")
    assert a.keys() == b.keys() and len(a) == 4
    for key in a:
        for field in ("completion", "correct", "b_seq", "b_total", "b_seq_io", "b_total_io", "calls"):
            assert a[key][field] == b[key][field], (key, field)
    assert sum(r["b_total"] for r in b.values()) > 0
    with open(tmp_path / "ckpt" / "settings.json") as f:
        assert json.load(f)["checkpoint"] == f"{workdir}@1"
    # rows and summary name the checkpoint evaluated, not the config's model name
    assert {r["model"] for r in b.values()} == {f"{workdir}@1"}
    assert (tmp_path / "ckpt" / "summary.md").read_text().splitlines()[0].endswith(f": {workdir}@1")
    with pytest.raises(FileNotFoundError, match=r"config.checkpoint='.*@9'.*no step 9; saved steps: \[1, 2\]"):
        evaluate(_eval_config(f"{workdir}@9"), str(tmp_path / "e2"), progress=False)
    # the same eval workdir on another checkpoint (the newest, step 2) is refused, naming the field
    for spec in (f"{workdir}@2", workdir):
        with pytest.raises(ValueError, match=r"'checkpoint': '.*@1'.*'checkpoint': '.*@2'"):
            evaluate(_eval_config(spec), str(tmp_path / "ckpt"), progress=False)


def test_bad_checkpoint_values_name_the_field(tmp_path):
    from prd_jax.eval_config import EvalConfig

    workdir = str(tmp_path / "run")
    with pytest.raises(ValueError, match=r"config.checkpoint='.*@x': step 'x' is not an integer >= 0"):
        EvalConfig.from_config(_eval_config(f"{workdir}@x"))
    with pytest.raises(FileNotFoundError, match=r"config.checkpoint='.*typo'.*does not exist"):
        evaluate(_eval_config(str(tmp_path / "typo")), str(tmp_path / "e1"), progress=False)
    remote = _eval_config(workdir)
    remote.backend = dict(kind="openai", base_url="http://127.0.0.1:1/v1", model="m", api="completions")
    with pytest.raises(ValueError, match="config.checkpoint=.*evaluates in-graph"):
        EvalConfig.from_config(remote)
    assert not os.path.exists(tmp_path / "e1")  # nothing written before the check


@pytest.mark.slow
def test_serve_workdir_of_a_char_vocabulary_run(trained):
    workdir, config = trained
    with prd_serve("--workdir", workdir) as url:
        name = httpx.get(url + "/v1/models", timeout=60).json()["data"][0]["id"]
        assert name == "tiny@2"  # the newest step
        vocab = CharVocab()
        cfg = NAMED_CONFIGS["tiny"].replace(**config.model.overrides.to_dict())
        sampler = Sampler(cfg, None, pad_id=vocab.pad_id)
        params = jax.device_put(read_params(workdir, 2)[1])

        def greedy(ids, n):
            out = sampler(params, [ids], jax.random.key(0), SamplingConfig(
                max_new_tokens=n, temperature=0.0, top_p=1.0, top_k=0, num_samples=1, stop_ids=vocab.stop_ids))
            return [int(t) for t in np.asarray(out.tokens[0, :int(out.lengths[0])])]

        text = "<|user|>Compute 3+4 mod 7.\n<|assistant|>"
        for prompt in (text, vocab.encode(text)):
            r = httpx.post(url + "/v1/completions", timeout=120, json={
                "model": name, "prompt": prompt, "max_tokens": 12, "temperature": 0, "return_token_ids": True})
            assert r.status_code == 200, r.text
            choice = r.json()["choices"][0]
            assert choice["token_ids"] == greedy(vocab.encode(text), 12)
            assert choice["text"] == vocab.decode(choice["token_ids"])
            assert r.json()["usage"]["prompt_tokens"] == len(vocab.encode(text))
        messages = [{"role": "user", "content": "Compute 3+4 mod 7."}]
        r = httpx.post(url + "/v1/chat/completions", timeout=120,
                       json={"model": name, "messages": messages, "max_tokens": 12, "temperature": 0})
        assert r.status_code == 200, r.text
        assert r.json()["choices"][0]["message"]["content"] == vocab.decode(greedy(vocab.encode_chat(messages), 12))
        r = httpx.post(url + "/v1/chat/completions", timeout=60, json={
            "model": name, "messages": messages, "chat_template_kwargs": {"enable_thinking": True}})
        assert r.status_code == 400 and r.json()["error"]["param"] == "chat_template_kwargs", r.text
        assert "char vocabulary" in r.json()["error"]["message"]
        r = httpx.post(url + "/v1/completions", timeout=60, json={"model": name, "prompt": [5, 120]})
        assert r.status_code == 400 and r.json()["error"]["param"] == "prompt"  # id 120: model row, no character
