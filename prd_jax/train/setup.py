"""Build the pieces a training config names: mesh, model config, tokenizer, initial params, data.

Config fields (see `configs/sft/tiny.py` for a complete example):
- `model.name` (a named config), `model.path` (local weights), `model.overrides` (ModelConfig
  fields), `model.init`: "random" (from scratch), "pretrained" (`prd_jax.model.load`) or
  "checkpoint" (params of the latest step in `model.init_workdir`, e.g. an SFT run);
- `tokenizer`: "char" (`data.synthetic.CharVocab`, for from-scratch models) or "model";
- data, always read through seqio (`data.seqio_rows.read`):
  - `data.mixture` (optional): the name of a registered seqio task or mixture; when set it
    wins over `data.source`. `data.module` (optional: a module name, or several separated by
    commas) is imported first, so a module that registers the task on import is enough:
    `data.module="my_pkg.my_tasks"`, `data.mixture="my_task"`. Splits: `data.split`
    (default "train") and, for SFT, `data.eval_split` (default "validation"; no held-out loss
    when the task lacks that split).
  - `data.source`: "synthetic" (the verifiable task of `data.synthetic`, registered as a
    seqio task per config), "jsonl" (a trace dir `data.path` with train.jsonl /
    validation.jsonl chat traces, see `data.chat_traces`, read through its TFDS builder) or a
    benchmark name of `data.paths.DATASETS` ("gsm8k_train", "math500", ...: problems, RL only).

What an SFT task must output (each row is checked; an error names the row and the fields):
- the completion as text: `targets` (a str), or `targets_pretokenized` (preferred when present,
  e.g. after `seqio.preprocessors.tokenize` turned `targets` into ids);
- the prompt as text: `inputs` (or `inputs_pretokenized`), one user turn; or
  `prompt_messages`, a JSON list of {role, content} for system or multi-turn context.
The prompt is wrapped in the model's chat template and the completion gets the template's
end-of-turn token (`data.sft.render_example`), as inference prompts the model; the task's own
vocabulary, if any, is not used. Mixture rates are not applied: every task of a mixture gives
all its rows (the SFT iterator shuffles them per epoch).

An RL task or mixture must output text `problem` and `answer` (and `id`), as the built-in
`prd_gsm8k`, `prd_math500`, ... tasks do.

Importing this module does not load TensorFlow: `data.seqio_rows` loads seqio (and TF) on
its first read.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
from typing import Any, Optional

import jax

from prd_jax import fileio, prompts
from prd_jax.checkpoint import latest_params
from prd_jax.data import chat_traces, preimage, seqio_rows, sft, synthetic
from prd_jax.host import on_main
from prd_jax.mesh import make_mesh
from prd_jax.model.config import NAMED_CONFIGS, ModelConfig
from prd_jax.model.loader import load, smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer, for_model
from prd_jax.model.weights import param_shardings
from prd_jax.tasks import get_task
from prd_jax.tasks.synthetic import SyntheticTask

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
        loaded = load(config.model.name, config.model.get("path") or None, mesh=mesh, **_overrides(config))
        cfg, params, tokenizer = loaded.cfg, loaded.params, loaded.tokenizer
    else:
        if config.model.name not in NAMED_CONFIGS:
            raise ValueError(f"config.model.name={config.model.name!r}; allowed: {sorted(NAMED_CONFIGS)}")
        cfg = NAMED_CONFIGS[config.model.name].replace(**_overrides(config))
    if config.tokenizer == "char":
        tokenizer = synthetic.CharVocab()
        if cfg.vocab_size < tokenizer.vocab_size:
            raise ValueError(f"config.model.overrides.vocab_size={cfg.vocab_size} < CharVocab size "
                             f"{tokenizer.vocab_size}")
    elif tokenizer is None:
        tokenizer = model_tokenizer(config.model.name, config.model.get("path") or None)
    tokenizer = for_model(tokenizer, cfg)  # the chat template's thinking switch (cfg.enable_thinking)
    if config.get("continual"):
        check_continual(config)
    if init == "checkpoint":
        params = checkpoint_params(config.model.init_workdir, cfg, mesh)
    return cfg, params, tokenizer


def model_tokenizer(name: str, path: Optional[str]):
    """The tokenizer of a named/local model without loading its weights."""
    if path is None and name == "smollm2-135m":
        path = smollm2_gguf_path()
    if path is None:
        raise ValueError(f"config.model.path is required for the tokenizer of {name!r} (no hub downloads)")
    return Tokenizer.from_gguf(path) if path.endswith(".gguf") else Tokenizer.from_hf_dir(os.fspath(path))


def check_continual(config) -> None:
    """Continual PDR-RL (PDR paper §4.2) starts from a *baseline RL* run: its workdir's config
    must be an RL stage without operator rollouts. The workdir may be local or a URI
    (gs://...); process 0 reads its config.json and hands it to the others."""
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
    if not workdir:
        raise ValueError("config.model.init='checkpoint' needs config.model.init_workdir (a training workdir)")
    step, host = latest_params(workdir)
    log.info("initialising params from %s step %d", workdir, step)
    return jax.device_put(host, param_shardings(cfg, mesh))


def synthetic_rows(data, seed: int, n: int) -> list:
    """The `n` synthetic problems of `data` (family, difficulty) drawn with `seed`, in order:
    the rows the seqio task `synthetic_problems_task` serves (tests check the two agree)."""
    return synthetic.generate(n, seed, tuple(data.difficulty), family=data.get("family", "modchain"))


def synthetic_traces(rng, problem, data, templates: str) -> list:
    """SFT rows of one synthetic problem (`data.synthetic.sft_traces`): its single-pass trace,
    then, each with its probability, a PDR refine trace (`data.pdr_fraction`; `data.pdr_k`
    candidates, 0..k of them wrong, uniformly), an SR refine trace (`data.sr_fraction`) and a
    pairwise judge trace (`data.judge_fraction`)."""
    return synthetic.sft_traces(rng, problem, templates=templates, **_trace_settings(data))


def _trace_settings(data) -> dict:
    """The `synthetic.sft_traces` keywords of `data`; the "preimage" family adds its draft knobs
    (`preimage.TRACE_DEFAULTS`: draft_tokens, tail_tokens, refine_ignore, false_rate, drafts, ranking)
    where set."""
    out = {"pdr_fraction": data.pdr_fraction, "pdr_k": data.pdr_k,
           "sr_fraction": data.get("sr_fraction", 0.0), "judge_fraction": data.get("judge_fraction", 0.0)}
    if data.get("family", "modchain") == preimage.FAMILY:
        out.update({k: data[k] for k in preimage.TRACE_DEFAULTS if data.get(k) is not None})
    return out


def _digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def synthetic_problems_task(data, seed: int, n: int) -> str:
    """Register the seqio task of `synthetic_rows(data, seed, n)` (split "train"); its name
    carries a digest of the settings, so different configs never share a task."""
    settings = {"family": data.get("family", "modchain"), "difficulty": list(data.difficulty),
                "seed": int(seed), "n": int(n)}
    name = f"prd_synthetic_problems_{_digest(settings)}"
    return synthetic.register_problems_task(name, {"train": (n, seed)}, tuple(data.difficulty),
                                            family=settings["family"])


def synthetic_sft_task(config, templates: str) -> str:
    """Register the seqio SFT task of a synthetic config: splits "train" (`data.num_train`
    problems, seed `config.seed`) and "validation" (`data.num_eval`, seed + 10_000), text
    `inputs`/`targets` (`data.synthetic.sft_split_rows`)."""
    data = config.data
    settings = {"seed": int(config.seed), "num_train": int(data.num_train),
                "num_eval": int(data.get("num_eval", 0)), "difficulty": list(data.difficulty),
                "family": data.get("family", "modchain"), "templates": templates, **_trace_settings(data)}
    name = f"prd_synthetic_sft_{_digest(settings)}"
    return synthetic.register_sft_task(name, settings["seed"], settings["num_train"], settings["num_eval"],
                                       tuple(data.difficulty), settings["family"], templates,
                                       **_trace_settings(data))


def import_task_modules(data) -> list:
    """Import `data.module` (one module name, or several separated by commas) so that the
    seqio tasks it registers on import exist; returns the imported names."""
    spec = data.get("module") or ""
    if not isinstance(spec, str):
        raise ValueError(f"config.data.module={spec!r}; must be a module name string (or names separated by commas)")
    names = [m.strip() for m in spec.split(",") if m.strip()]
    for module in names:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise ValueError(f"config.data.module={spec!r}: cannot import {module!r} ({e}); give an importable "
                             "module that registers the seqio task named by config.data.mixture") from e
    return names


def with_task_family(config):
    """`config` with `data.family` set from `config.task` when the task is a synthetic family
    (`tasks.synthetic`): the task selects what SFT traces and RL problems are drawn from. A
    synthetic data source with a non-synthetic task raises, naming both fields."""
    name = config.get("task")
    if not name or config.data.get("mixture") or config.data.get("source") != "synthetic":
        return config
    task = get_task(name)
    if not isinstance(task, SyntheticTask):
        raise ValueError(f"config.task={name!r} is not a synthetic family but config.data.source='synthetic'; "
                         f"set config.data.source (or data.mixture) to {name!r}'s data")
    if config.data.get("family", task.family) == task.family:
        return config
    out = config.copy_and_resolve_references()
    with out.unlocked():
        out.data.family = task.family
    return out


def sft_task(config) -> tuple[str, str, Optional[str]]:
    """(seqio task or mixture name, train split, held-out split or None) for SFT: registers
    the synthetic or jsonl task, or imports `data.module` for `data.mixture` (module docstring).
    A synthetic `config.task` selects the family (`with_task_family`)."""
    config = with_task_family(config)
    data = config.data
    mixture = data.get("mixture") or ""
    if mixture:
        import_task_modules(data)
        name, split, eval_split = mixture, data.get("split") or "train", data.get("eval_split", "validation")
    elif data.source == "synthetic":
        templates = data.get("templates", "default")
        if templates not in prompts.TEMPLATE_SETS:
            raise ValueError(f"config.data.templates={templates!r}; allowed: {sorted(prompts.TEMPLATE_SETS)}")
        name, split, eval_split = synthetic_sft_task(config, templates), "train", "validation"
    elif data.source == "jsonl":
        if not data.get("path"):
            raise ValueError("config.data.source='jsonl' needs config.data.path: a directory with train.jsonl "
                             "(and optionally validation.jsonl)")
        name = chat_traces.register_chat_text_task(data.path, validation_fraction=data.get("validation_fraction", 0.05))
        split, eval_split = "train", "validation"
    else:
        raise ValueError(f"config.data.source={data.source!r} for SFT; allowed: 'synthetic', 'jsonl' "
                         "(or set config.data.mixture to a registered seqio task or mixture)")
    if split not in seqio_rows.splits(name):
        raise ValueError(f"config.data.split={split!r}: seqio task {name!r} has splits {sorted(seqio_rows.splits(name))}")
    if eval_split and eval_split not in seqio_rows.splits(name):
        eval_split = None
    return name, split, eval_split


def sft_examples(config, tokenizer) -> tuple[list, list]:
    """(train, validation) SFT examples `(prompt_ids, completion_ids)` from `config.data`, read
    through seqio (`sft_task`) and rendered with the chat template (`sft.examples_from_text_rows`)."""
    name, split, eval_split = sft_task(config)
    train = sft.examples_from_text_rows(tokenizer, seqio_rows.read(name, split, preprocess=True), f"{name}:{split}")
    held_out = [] if eval_split is None else sft.examples_from_text_rows(
        tokenizer, seqio_rows.read(name, eval_split, preprocess=True), f"{name}:{eval_split}")
    log.info("SFT data: seqio task %s: %d train examples (%s), %d held out (%s)", name, len(train), split,
             len(held_out), eval_split)
    return train, held_out


def rl_problems(config) -> list:
    """Problems {id, problem, answer, ...} for RL rollouts from `config.data`, read through seqio:
    `data.mixture` (split `data.split`, default "train"), the synthetic task, or a benchmark
    (`data.source` in `paths.DATASETS`; at most `data.num_train` rows when that is > 0). A
    synthetic `config.task` selects the family (`with_task_family`)."""
    config = with_task_family(config)
    data = config.data
    limit = data.get("num_train") or None
    if data.get("mixture"):
        import_task_modules(data)
        name, split = data.mixture, data.get("split") or "train"
        rows = seqio_rows.read(name, split, limit=limit, data_dir=data.get("data_dir") or None)
    elif data.source == "synthetic":
        rows = seqio_rows.read(synthetic_problems_task(data, config.seed, data.num_train), "train")
    elif data.source in seqio_rows.DATASET_TASKS:
        name, split = seqio_rows.DATASET_TASKS[data.source]
        rows = seqio_rows.read(name, split, limit=limit, data_dir=data.get("data_dir") or None)
    else:
        raise ValueError(f"config.data.source={data.source!r} for RL; allowed: 'synthetic', "
                         f"{sorted(seqio_rows.DATASET_TASKS)} (or set config.data.mixture)")
    for i, row in enumerate(rows[:1]):
        missing = [k for k in ("problem", "answer") if not isinstance(row.get(k), str)]
        if missing:
            raise ValueError(f"RL rows need text fields 'problem' and 'answer'; row {i} of the data has "
                             f"fields {sorted(row)} (missing {missing})")
    return rows
