"""Build the pieces a training config names: mesh, model config, tokenizer, initial params, data.

Config fields (see `configs/sft/tiny.py` for a complete example):
- `model.name` (a named config), `model.path` (local weights), `model.overrides` (ModelConfig
  fields), `model.init`: "random" (from scratch), "pretrained" (`prd_jax.model.load`) or
  "checkpoint" (params of the latest step in `model.init_workdir`, e.g. an SFT run);
- `tokenizer`: "char" (`data.synthetic.CharVocab`, for from-scratch models) or "model";
- `data.source`: "synthetic" (the verifiable task of `data.synthetic`), "jsonl" (a directory
  with train.jsonl / validation.jsonl chat traces, see `data.chat_traces`) or a benchmark
  name from `data.paths.DATASETS` (problems only: RL).
"""

from __future__ import annotations

import logging
from typing import Any, Optional

import numpy as np

from prd_jax.mesh import make_mesh
from prd_jax.model.config import NAMED_CONFIGS, ModelConfig

log = logging.getLogger(__name__)

INITS = ("random", "pretrained", "checkpoint")
TOKENIZERS = ("char", "model")


def _overrides(config) -> dict:
    o = config.model.get("overrides", None)
    return {} if o is None else (o.to_dict() if hasattr(o, "to_dict") else dict(o))


def build_mesh(config):
    return make_mesh(config.get("mesh") or None)


def build_model(config, mesh) -> tuple[ModelConfig, Optional[Any], Any]:
    """(ModelConfig, params or None for random init, tokenizer) from `config.model`."""
    init = config.model.init
    if init not in INITS:
        raise ValueError(f"config.model.init={init!r}; allowed: {INITS}")
    if config.tokenizer not in TOKENIZERS:
        raise ValueError(f"config.tokenizer={config.tokenizer!r}; allowed: {TOKENIZERS}")
    params, tokenizer = None, None
    if init == "pretrained":
        from prd_jax.model import load

        loaded = load(config.model.name, config.model.get("path") or None, mesh=mesh, **_overrides(config))
        cfg, params, tokenizer = loaded.cfg, loaded.params, loaded.tokenizer
    else:
        if config.model.name not in NAMED_CONFIGS:
            raise ValueError(f"config.model.name={config.model.name!r}; allowed: {sorted(NAMED_CONFIGS)}")
        cfg = NAMED_CONFIGS[config.model.name].replace(**_overrides(config))
    if config.tokenizer == "char":
        from prd_jax.data.synthetic import CharVocab

        tokenizer = CharVocab()
        if cfg.vocab_size < tokenizer.vocab_size:
            raise ValueError(f"config.model.overrides.vocab_size={cfg.vocab_size} < CharVocab size "
                             f"{tokenizer.vocab_size}")
    elif tokenizer is None:
        tokenizer = model_tokenizer(config.model.name, config.model.get("path") or None)
    from prd_jax.model.tokenizer import for_model

    tokenizer = for_model(tokenizer, cfg)  # the chat template's thinking switch (cfg.enable_thinking)
    if config.get("continual"):
        check_continual(config)
    if init == "checkpoint":
        params = checkpoint_params(config.model.init_workdir, cfg, mesh)
    return cfg, params, tokenizer


def model_tokenizer(name: str, path: Optional[str]):
    """The tokenizer of a named/local model without loading its weights."""
    import os

    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer

    if path is None and name == "smollm2-135m":
        path = smollm2_gguf_path()
    if path is None:
        raise ValueError(f"config.model.path is required for the tokenizer of {name!r} (no hub downloads)")
    return Tokenizer.from_gguf(path) if path.endswith(".gguf") else Tokenizer.from_hf_dir(os.fspath(path))


def check_continual(config) -> None:
    """Continual PDR-RL (PDR paper §4.2) starts from a *baseline RL* run: its workdir's config
    must be an RL stage without operator rollouts. The workdir may be local or a URI
    (gs://...); process 0 reads its config.json and hands it to the others."""
    import os

    from prd_jax import fileio
    from prd_jax.host import on_main

    path = os.path.join(config.model.init_workdir or "", "config.json")
    base = None
    if config.model.init == "checkpoint" and config.model.init_workdir:
        base = on_main(lambda: fileio.read_json(path) if fileio.exists(path) else None)
    if base is None:
        raise ValueError("config.continual=True needs config.model.init='checkpoint' and "
                         f"config.model.init_workdir set to a baseline RL workdir (no {path})")
    if base.get("stage") != "rl" or base.get("rl", {}).get("operator_fraction", 0.0) > 0:
        raise ValueError(f"config.model.init_workdir={config.model.init_workdir!r} is not a baseline RL run "
                         f"(stage={base.get('stage')!r}, operator_fraction="
                         f"{base.get('rl', {}).get('operator_fraction')}); continual mode needs one")


def checkpoint_params(workdir: str, cfg: ModelConfig, mesh):
    """Params of the latest readable step of another run's workdir, placed in this run's shardings."""
    import jax

    from prd_jax.checkpoint import latest_params
    from prd_jax.model.weights import param_shardings

    if not workdir:
        raise ValueError("config.model.init='checkpoint' needs config.model.init_workdir (a training workdir)")
    step, host = latest_params(workdir)
    log.info("initialising params from %s step %d", workdir, step)
    return jax.device_put(host, param_shardings(cfg, mesh))


def synthetic_rows(data, seed: int, n: int) -> list:
    from prd_jax.data import synthetic

    return synthetic.generate(n, seed, tuple(data.difficulty), family=data.get("family", "modchain"))


def synthetic_traces(rng, problem, data, templates: str) -> list:
    """SFT rows of one synthetic problem: its single-pass trace, then, each with its
    probability, a PDR refine trace (`data.pdr_fraction`; `data.pdr_k` candidates, 0..k of
    them wrong, uniformly), an SR refine trace (`data.sr_fraction`; the earlier attempt
    wrong with probability 1/2) and a pairwise judge trace (`data.judge_fraction`; each
    candidate wrong with probability 1/2)."""
    from prd_jax.data import synthetic

    rows = [synthetic.solve_example(problem, templates)]
    if rng.random() < data.pdr_fraction:
        rows.append(synthetic.pdr_trace(rng, problem, data.pdr_k, int(rng.integers(0, data.pdr_k + 1)), templates))
    if rng.random() < data.get("sr_fraction", 0.0):
        rows.append(synthetic.sr_trace(rng, problem, bool(rng.integers(2)), templates))
    if rng.random() < data.get("judge_fraction", 0.0):
        rows.append(synthetic.judge_trace(rng, problem, tuple(bool(w) for w in rng.integers(0, 2, 2)), templates))
    return rows


def sft_examples(config, tokenizer) -> tuple[list, list]:
    """(train, validation) SFT examples `(prompt_ids, completion_ids)` from `config.data`."""
    from prd_jax.data import sft

    data = config.data
    if data.source == "synthetic":
        from prd_jax.operators.prompts import TEMPLATE_SETS

        templates = data.get("templates", "default")
        if templates not in TEMPLATE_SETS:
            raise ValueError(f"config.data.templates={templates!r}; allowed: {sorted(TEMPLATE_SETS)}")
        rng = np.random.default_rng(config.seed)
        train_rows, eval_rows = [], []
        for rows, n, seed, out in ((train_rows, data.num_train, config.seed, "train"),
                                   (eval_rows, data.num_eval, config.seed + 10_000, "eval")):
            for p in synthetic_rows(data, seed, n):
                rows += synthetic_traces(rng, p, data, templates)
        return sft.examples_from_rows(tokenizer, train_rows), sft.examples_from_rows(tokenizer, eval_rows)
    if data.source == "jsonl":
        from prd_jax.data import chat_traces

        splits = chat_traces.split_rows(data.path, data.get("validation_fraction", 0.05))
        return (sft.examples_from_rows(tokenizer, splits["train"]),
                sft.examples_from_rows(tokenizer, splits.get("validation", [])))
    raise ValueError(f"config.data.source={data.source!r} for SFT; allowed: 'synthetic', 'jsonl'")


def rl_problems(config) -> list:
    """Problems {id, problem, answer} for RL rollouts from `config.data`."""
    data = config.data
    if data.source == "synthetic":
        return synthetic_rows(data, config.seed, data.num_train)
    from prd_jax.data.jsonl import read_problems

    return read_problems(data.source, data.get("data_dir") or None, limit=data.get("num_train") or None)
