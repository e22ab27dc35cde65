"""Build the pieces a training config names: mesh, model config, tokenizer, initial params, data.

Every function takes the typed `train.config.TrainConfig` (a raw ConfigDict is validated into one
first, `TrainConfig.from_config`). Config fields (see `configs/sft/tiny.py` for a complete example):
- `model.name` (a named config), `model.path` (local weights), `model.overrides` (ModelConfig
  fields), `model.init`: "random" (from scratch), "pretrained" (`prd_jax.model.load`) or
  "checkpoint" (params of the latest step in `model.init_workdir`, e.g. an SFT run);
- `tokenizer`: "char" (`data.synthetic.CharVocab`, for from-scratch models) or "model";
- the task, `config.task` (`prd_jax.tasks`): RL's problems, grader and reward; every stage asks
  the task for its problems (`training_task`). `config.split` picks the split (default "train";
  as in an eval config), `data.num_train` caps its rows (> 0), `config.data_dir` is the data dir. A synthetic
  family (`tasks.synthetic.DrawnTask`) draws with `config.seed` and `data.difficulty`.
- SFT data, first match: `data.mixture`, a registered seqio task or mixture (`data.module`, a
  module name or several separated by commas, is imported first, so a module that registers the
  task on import is enough; splits `config.split`, default "train", and `data.eval_split`, default
  "validation", no held-out loss when the task lacks it); `data.path`, a trace dir with
  train.jsonl / validation.jsonl chat traces (`data.chat_traces`, read through its TFDS
  builder); else `config.task`'s own problems: a synthetic family's traces
  (`data.synthetic.sft_traces`), or any other task's rows that carry a worked completion
  (`Task.sft_target`, default the row's `solution` field; rows without one are skipped and
  counted), prompted with the task's `solve` template (`task_sft_rows`): split `config.split`
  (default "train"), held out `data.eval_split` when the task has that split. For RL,
  `data.mixture` replaces the task's source (its rows, the task's grading).
- `data.source`, `data.family` and an eval's `dataset` were removed (issue 35 §1); a config that
  still sets one gets an error naming the field that replaced it (`tasks.REMOVED_FIELDS`).

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
tasks' JSONL files do.

Importing this module does not load TensorFlow: `data.seqio_rows` loads seqio (and TF) on
its first read.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from typing import Any, Optional

import jax

from prd_jax import fileio, prompts
from prd_jax.checkpoint import latest_params
from prd_jax.data import chat_traces, seqio_rows, sft, synthetic
from prd_jax.host import on_main
from prd_jax.model.config import NAMED_CONFIGS, ModelConfig
from prd_jax.model.loader import load, smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer, for_model
from prd_jax.model.weights import param_shardings
from prd_jax.tasks import SeqioData, get_task, require_data
from prd_jax.tasks.synthetic import DrawnTask
from prd_jax.train.config import TrainConfig
from prd_jax.train.rollout_mesh import train_mesh

log = logging.getLogger(__name__)


def model_overrides(config) -> dict:
    """The `ModelConfig` fields `config.model.overrides` replaces on the named model."""
    return dict(TrainConfig.from_config(config).model.overrides)


def build_mesh(config):
    """The training mesh: `config.mesh` over the training devices (`rollout_mesh.train_mesh`)."""
    return train_mesh(TrainConfig.from_config(config))


def build_model(config, mesh) -> tuple[ModelConfig, Optional[Any], Any]:
    """(ModelConfig, params or None for random init, tokenizer) from `config.model`."""
    tc = TrainConfig.from_config(config)
    m = tc.model
    require_task_data(tc)  # a built-in benchmark not yet fetched fails here, before params load
    params, tokenizer = None, None
    if m.init == "pretrained":
        loaded = load(m.name, m.path or None, mesh=mesh, **m.overrides)
        cfg, params, tokenizer = loaded.cfg, loaded.params, loaded.tokenizer
    else:
        if m.name not in NAMED_CONFIGS:
            raise ValueError(f"config.model.name={m.name!r}; allowed: {sorted(NAMED_CONFIGS)}")
        cfg = NAMED_CONFIGS[m.name].replace(**m.overrides)
    if tc.tokenizer == "char":
        tokenizer = synthetic.CharVocab()
        if cfg.vocab_size < tokenizer.vocab_size:
            raise ValueError(f"config.model.overrides.vocab_size={cfg.vocab_size} < CharVocab size "
                             f"{tokenizer.vocab_size}")
    elif tokenizer is None:
        tokenizer = model_tokenizer(m.name, m.path or None)
    tokenizer = for_model(tokenizer, cfg)  # the chat template's thinking switch (cfg.enable_thinking)
    if tc.continual:
        check_continual(tc)
    if m.init == "checkpoint":
        params = checkpoint_params(m.init_workdir, cfg, mesh)
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
    m = config.model  # a TrainConfig's ModelInit, or the config file's model sub-config
    path = os.path.join(m.init_workdir, "config.json")
    base = None
    if m.init == "checkpoint" and m.init_workdir:
        base = on_main(lambda: fileio.read_json(path) if fileio.exists(path) else None)
    if base is None:
        raise ValueError("config.continual=True needs config.model.init='checkpoint' and "
                         f"config.model.init_workdir set to a baseline RL workdir (no {path})")
    if base.get("stage") != "rl" or base.get("rl", {}).get("operator_fraction", 0.0) > 0:
        raise ValueError(f"config.model.init_workdir={m.init_workdir!r} is not a baseline RL run "
                         f"(stage={base.get('stage')!r}, operator_fraction="
                         f"{base.get('rl', {}).get('operator_fraction')}); continual mode needs one")


def checkpoint_params(workdir: str, cfg: ModelConfig, mesh):
    """Params of the latest readable step of another run's workdir, placed in this run's shardings."""
    if not workdir:
        raise ValueError("config.model.init='checkpoint' needs config.model.init_workdir (a training workdir)")
    step, host = latest_params(workdir)
    log.info("initialising params from %s step %d", workdir, step)
    return jax.device_put(host, param_shardings(cfg, mesh))


def synthetic_rows(data, seed: int, n: int, family: str) -> list:
    """The `n` synthetic problems of `family` at `data.difficulty` (`DataSettings`), drawn with
    `seed`, in order: the problems a synthetic task's RL stage and SFT traces draw (`training_task`)."""
    return synthetic.generate(n, seed, tuple(data.difficulty), family=family)


def synthetic_traces(rng, problem, data, templates: str, family: str = "modchain") -> list:
    """SFT rows of one synthetic problem (`data.synthetic.sft_traces`): its single-pass trace,
    then, each with its probability, a PDR refine trace (`data.pdr_fraction`; `data.pdr_k`
    candidates, 0..k of them wrong, uniformly), an SR refine trace (`data.sr_fraction`) and a
    pairwise judge trace (`data.judge_fraction`); `data` is a `DataSettings`."""
    return synthetic.sft_traces(rng, problem, templates=templates, **data.trace_settings(family))


def _digest(settings: dict) -> str:
    return hashlib.sha256(json.dumps(settings, sort_keys=True).encode("utf-8")).hexdigest()[:12]


def synthetic_sft_task(config, templates: str, family: str) -> str:
    """Register the seqio SFT task of a synthetic config: splits "train" (`data.num_train`
    problems, seed `config.seed`) and "validation" (`data.num_eval`, seed + 10_000), text
    `inputs`/`targets` (`data.synthetic.sft_split_rows`)."""
    tc = TrainConfig.from_config(config)
    data = tc.data
    settings = {"seed": tc.seed, "num_train": data.num_train, "num_eval": data.num_eval,
                "difficulty": list(data.difficulty), "family": family, "templates": templates,
                **data.trace_settings(family)}
    name = f"prd_synthetic_sft_{_digest(settings)}"
    return synthetic.register_sft_task(name, settings["seed"], settings["num_train"], settings["num_eval"],
                                       tuple(data.difficulty), settings["family"], templates,
                                       **data.trace_settings(family))


def require_task_data(config) -> None:
    """`tasks.require_data` for the split a training run reads from `config.task` (`config.split`,
    default "train"); nothing when `data.mixture` or `data.path` replaces it."""
    tc = TrainConfig.from_config(config)
    if tc.data.mixture or tc.data.path or not tc.task:
        return
    require_data(get_task(tc.task), tc.split, tc.data_dir_or_none)


def training_task(config):
    """The task a training config names (`tasks.task_for_config`: `config.task`, required), with
    its data as the config sets it: `data.mixture` (+ `data.module`) replaces its source by that
    seqio task or mixture; a synthetic family (`DrawnTask`) draws with `config.seed` and
    `data.difficulty`."""
    tc = TrainConfig.from_config(config)
    if not tc.task:
        raise ValueError("config.task is unset; SFT on data.mixture or data.path has no task")
    task, data = get_task(tc.task), tc.data
    if data.mixture:
        source = SeqioData(data.mixture, data.module)
        source.import_modules("config.data.module")
        task = task.options(source=source)
    if isinstance(task, DrawnTask):
        opts = {"seed": tc.seed}
        if data.difficulty is not None:
            opts["difficulty"] = data.difficulty
        task = task.options(**opts)
    return task


def sft_task(config) -> tuple[str, str, Optional[str]]:
    """(seqio task or mixture name, train split, held-out split or None) for SFT (module
    docstring): `data.mixture` (its modules imported), the chat traces of `data.path`, or the
    synthetic traces of `config.task`'s family, registered as a seqio task."""
    tc = TrainConfig.from_config(config)
    data = tc.data
    if data.mixture:
        SeqioData(data.mixture, data.module).import_modules("config.data.module")
        name, split, eval_split = data.mixture, tc.split, data.eval_split
    elif data.path:
        name = chat_traces.register_chat_text_task(data.path, validation_fraction=data.validation_fraction)
        split, eval_split = "train", "validation"
    else:
        task = training_task(tc)
        if not isinstance(task, DrawnTask):
            raise ValueError(f"config.task={task.name!r}: its SFT rows come from the task itself (sft_examples), "
                             "not from a seqio task")
        name, split, eval_split = synthetic_sft_task(tc, data.templates, task.family), "train", "validation"
    if split not in seqio_rows.splits(name):
        raise ValueError(f"config.split={split!r}: seqio task {name!r} has splits {sorted(seqio_rows.splits(name))}")
    if eval_split and eval_split not in seqio_rows.splits(name):
        eval_split = None
    return name, split, eval_split


def task_sft_rows(task, rows: list, where: str) -> list:
    """SFT text rows `{inputs, targets}` of a task's problem rows: the prompt is the task's `solve`
    template filled with `task.problem_text(row)` (as eval prompts the model), the completion
    `task.sft_target(row)`. Rows whose target is None are skipped; none left raises naming the field."""
    solve = prompts.template_set(task.templates)["solve"]
    out = [{"inputs": prompts.render(solve, problem=task.problem_text(r)), "targets": t}
           for r in rows for t in [task.sft_target(r)] if t is not None]
    if rows and not out:
        raise ValueError(f"{where}: none of its {len(rows)} rows has an SFT target (Task.sft_target: the row's "
                         f"'solution' field by default; the rows have fields {sorted(rows[0])})")
    if len(out) < len(rows):
        log.info("SFT data: %s: %d of %d rows have no SFT target and are skipped", where, len(rows) - len(out), len(rows))
    return out


def _task_sft_examples(config, tokenizer, task) -> tuple[list, list]:
    """(train, held-out) examples of a non-synthetic `config.task`'s own rows (`task_sft_rows`)."""
    tc = TrainConfig.from_config(config)
    data_dir, split, eval_split = tc.data_dir_or_none, tc.split, tc.data.eval_split
    train = task.problems(split, limit=tc.data.num_train or None, data_dir=data_dir)
    held = []
    if eval_split and task.source is not None and eval_split in task.source.split_names:
        held = task.problems(eval_split, data_dir=data_dir)

    def examples(rows: list, name: str) -> list:
        where = f"task {task.name!r} split {name!r}"
        return sft.examples_from_text_rows(tokenizer, task_sft_rows(task, rows, where), f"{task.name}:{name}")

    train_ex, held_ex = examples(train, split), examples(held, eval_split) if held else []
    log.info("SFT data: task %s: %d train examples (%s), %d held out (%s)", task.name, len(train_ex), split,
             len(held_ex), eval_split if held else None)
    return train_ex, held_ex


def sft_examples(config, tokenizer) -> tuple[list, list]:
    """(train, validation) SFT examples `(prompt_ids, completion_ids)` from `config.data`, read
    through seqio (`sft_task`) and rendered with the chat template (`sft.examples_from_text_rows`);
    a non-synthetic `config.task` gives its own rows (`task_sft_rows`)."""
    tc = TrainConfig.from_config(config)
    if not tc.data.mixture and not tc.data.path:
        task = training_task(tc)
        if not isinstance(task, DrawnTask):
            return _task_sft_examples(tc, tokenizer, task)
    name, split, eval_split = sft_task(tc)
    train = sft.examples_from_text_rows(tokenizer, seqio_rows.read(name, split, preprocess=True), f"{name}:{split}")
    held_out = [] if eval_split is None else sft.examples_from_text_rows(
        tokenizer, seqio_rows.read(name, eval_split, preprocess=True), f"{name}:{eval_split}")
    log.info("SFT data: seqio task %s: %d train examples (%s), %d held out (%s)", name, len(train), split,
             len(held_out), eval_split)
    return train, held_out


def rl_problems(config, task=None) -> list:
    """Problems {id, problem, answer, ...} for RL rollouts: the task's (`training_task`, or `task`
    when given), split `config.split` (default "train"; with `data.mixture`, the mixture's split),
    at most `data.num_train` rows when that is > 0, from `config.data_dir`."""
    tc = TrainConfig.from_config(config)
    task = training_task(tc) if task is None else task
    rows = task.problems(tc.split, limit=tc.data.num_train or None, data_dir=tc.data_dir_or_none)
    for i, row in enumerate(rows[:1]):
        try:
            task.problem_text(row), task.gold_key(row)
        except KeyError as e:
            raise ValueError(f"RL rows of task {task.name!r}: row {i} has fields {sorted(row)}, but the task reads "
                             f"field {e} (its problem_text / gold_key)") from None
    return rows
