"""`TrainConfig`: a training config file's settings (`prd-jax train`, SFT and RL), validated once.

A training config (`configs/sft/*.py`, `configs/rl/*.py`) is a ConfigDict laid out in groups;
`TrainConfig.from_config` turns it into frozen dataclasses of the same layout, as
`eval_config.EvalConfig` does for eval, and the training code reads the typed object
(`tc.data.seq_len`, `tc.rl.max_new_tokens`), never the raw ConfigDict:

- the run (`RunSettings`, top level): stage, seed, task, split, data_dir, tokenizer, mesh, ...;
- the loop (`LoopSettings`, top level): batch size, steps, checkpoints, eval cadence;
- `model` (`ModelInit`), `data` (`DataSettings`), `optim` (`train.optim.OptimConfig`),
  `wandb` (`tracking.WandbConfig`), `rollout` (`train.rollout_mesh.RolloutSettings`: where RL
  rollouts sample) and, for RL only, `rl` (`train.rl_config.RLConfig`, which holds the
  top-level `sampling`).

Every field carries a one-line description (`describe`); `config_fields.declared` lists the
fields of these dataclasses, so `--config.x=v` and `--print-config` follow them. The problems'
split is `split` and their directory `data_dir`, spelled as in an eval config; the old training
spellings `task_split`, `data.split` and `data.data_dir` raise naming the new field
(`config_schema.MOVED`).
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Optional

from prd_jax import prompts
from prd_jax.config_schema import check_moved, doc_field
from prd_jax.data import preimage, synthetic
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.tasks import check_removed_fields, get_task, task_names
from prd_jax.tracking import WandbConfig, check_loggers
from prd_jax.train.optim import OptimConfig
from prd_jax.train.rl_config import RLConfig
from prd_jax.train.rollout_mesh import RolloutSettings

STAGES = ("sft", "rl")
INITS = ("random", "pretrained", "checkpoint")
TOKENIZERS = ("char", "model")
PACKING = ("pack", "pad")


_field = doc_field


def _trace_default(name: str):
    """The default of a `synthetic.sft_traces` keyword (the SFT trace knobs read from `config.data`)."""
    return synthetic.sft_traces.__kwdefaults__[name]


@dataclasses.dataclass(frozen=True, kw_only=True)
class ModelInit:
    """`config.model`: which model a run trains and where its first params come from."""

    name: str = _field("a named model (prd_jax.model.config.NAMED_CONFIGS), or any name with init='pretrained' "
                       "and `path`")
    init: str = _field(f"where the first params come from: one of {INITS}")
    path: str = _field("local weights (HF dir or GGUF) for init='pretrained' or the tokenizer", "")
    init_workdir: str = _field("a training workdir whose newest params init='checkpoint' starts from", "")
    overrides: dict = _field("ModelConfig fields replaced on the named model (dtype, sizes, remat, ...)",
                             factory=dict)


@dataclasses.dataclass(frozen=True, kw_only=True)
class DataSettings:
    """`config.data`: SFT rows and RL problem caps (`train.setup`'s module docstring says which source wins)."""

    seq_len: int = _field("SFT sequence length in tokens (unused by RL)", 0)
    mode: str = _field(f"SFT batch layout: one of {PACKING}", "pack")
    num_train: int = _field("training problems/rows: a cap on a task's rows, a synthetic family's draw (0 = all)", 0)
    num_eval: int = _field("held-out synthetic problems for SFT traces (seed + 10000)", 0)
    difficulty: Optional[tuple] = _field("synthetic difficulty levels to draw from (None = the family's)", None)
    mixture: str = _field("a registered seqio task or mixture that replaces the task's source", "")
    module: str = _field("modules to import first (comma-separated) so they register `mixture`", "")
    path: str = _field("an SFT chat-trace dir with train.jsonl / validation.jsonl", "")
    validation_fraction: float = _field("share of `path`'s rows held out when it has no validation.jsonl", 0.05)
    eval_split: str = _field("SFT held-out split (\"\" = none; skipped when the source lacks it)", "validation")
    templates: str = _field("prompt set of synthetic SFT traces (prompts.TEMPLATE_SETS)",
                            _trace_default("templates"))
    pdr_fraction: float = _field("share of synthetic problems that add a PDR refine trace",
                                 _trace_default("pdr_fraction"))
    pdr_k: int = _field("candidates quoted in a PDR refine trace", _trace_default("pdr_k"))
    sr_fraction: float = _field("share of synthetic problems that add an SR refine trace",
                                _trace_default("sr_fraction"))
    judge_fraction: float = _field("share of synthetic problems that add a pairwise judge trace",
                                   _trace_default("judge_fraction"))
    draft_tokens: Optional[int] = _field("preimage: tokens of a quoted draft (None = preimage.TRACE_DEFAULTS)", None)
    tail_tokens: Optional[int] = _field("preimage: tokens of a draft's tail kept in the workspace", None)
    refine_ignore: Optional[float] = _field("preimage: share of refine traces that ignore the workspace", None)
    false_rate: Optional[float] = _field("preimage: share of quoted drafts that are false", None)
    drafts: Optional[int] = _field("preimage: drafts drawn per refine trace", None)
    ranking: Optional[str] = _field(f"preimage: how the workspace ranks drafts, one of {preimage.RANKINGS}", None)

    def trace_settings(self, family: str) -> dict:
        """The `synthetic.sft_traces` keywords; the preimage family adds its draft knobs that are set."""
        out = {k: getattr(self, k) for k in ("pdr_fraction", "pdr_k", "sr_fraction", "judge_fraction")}
        if family == preimage.FAMILY:
            out.update({k: getattr(self, k) for k in preimage.TRACE_DEFAULTS if getattr(self, k) is not None})
        return out


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What a run is: its stage, task, data, tokenizer, devices and trackers (top level)."""

    stage: str = _field(f"the stage: one of {STAGES}")
    seed: int = _field("the seed of init, data order and rollouts (there is no default seed)")
    task: str = _field("the task (prd_jax.tasks): RL's problems and grader, SFT's rows unless data.mixture/path", "")
    split: str = _field("the task's split the run reads (with data.mixture: the mixture's split)", "train")
    data_dir: str = _field("the data dir of the task's files (\"\" = $PRD_DATA_DIR, else the user data dir)", "")
    tokenizer: str = _field(f"the tokenizer: one of {TOKENIZERS} (char: data.synthetic.CharVocab)")
    mesh: str = _field("mesh axes, e.g. 'data=2,fsdp=2,tensor=2' (\"\" = all devices on data)", "")
    target: str = _field("the `prd-jax compile` topology, e.g. 'v5p:4x4x4'", "")
    continual: bool = _field("continual PDR-RL from a baseline RL run (PDR paper §4.2; model.init_workdir)", False)
    loggers: tuple = _field("metric trackers (prd_jax.tracking.LOGGERS)", ("tensorboard",))
    wandb: WandbConfig = _field("the W&B run of the 'wandb' logger", factory=WandbConfig)


@dataclasses.dataclass(frozen=True, kw_only=True)
class LoopSettings:
    """How the shared loop (`trainer.fit`) steps, checkpoints and evaluates (top level)."""

    batch_size: int = _field("SFT rows per step (RL: rl.prompts_per_step x rl.samples_per_prompt)")
    grad_accum_steps: int = _field("microbatches per step, accumulated before the update", 1)
    steps: int = _field("optimizer steps of the run")
    checkpoint_every: int = _field("steps between checkpoints")
    keep_checkpoints: int = _field("checkpoints kept")
    eval_every: int = _field("steps between held-out evals (0 = none)", 0)
    max_nonfinite_steps: int = _field("halt after this many non-finite steps in a row", 5)


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig(RunSettings, LoopSettings):
    """A validated training config: the run and loop settings (top level) and the groups below."""

    model: ModelInit = _field("the model and its first params")
    data: DataSettings = _field("SFT rows and RL problem caps", factory=DataSettings)
    optim: OptimConfig = _field("learning-rate schedule and AdamW")
    rl: Optional[RLConfig] = _field("RL settings (config.rl, with config.sampling); None for SFT", None)
    rollout: RolloutSettings = _field("the mesh and devices RL rollouts sample on", factory=RolloutSettings)

    def __post_init__(self):
        for prefix, obj in (("", self), ("model.", self.model), ("data.", self.data)):
            _check_types(obj, prefix)
        object.__setattr__(self, "loggers", check_loggers(self.loggers))
        if self.stage not in STAGES:
            raise ValueError(f"config.stage={self.stage!r}; allowed: {STAGES}")
        if self.tokenizer not in TOKENIZERS:
            raise ValueError(f"config.tokenizer={self.tokenizer!r}; allowed: {TOKENIZERS}")
        for f in ("batch_size", "grad_accum_steps", "steps", "checkpoint_every", "keep_checkpoints",
                  "max_nonfinite_steps"):
            if getattr(self, f) < 1:
                raise ValueError(f"config.{f}={getattr(self, f)}; must be an integer >= 1")
        if self.eval_every < 0:
            raise ValueError(f"config.eval_every={self.eval_every}; must be >= 0 (0 = no held-out eval)")
        self._check_model()
        self._check_data()
        if self.stage == "rl":
            if self.rl is None:
                raise ValueError("config.stage='rl' needs config.rl (train.rl_config.RLConfig's fields)")
            if self.grad_accum_steps % self.rl.minibatches:
                raise ValueError(f"config.rl.minibatches={self.rl.minibatches} must divide config.grad_accum_steps="
                                 f"{self.grad_accum_steps} (a mini-batch is a whole number of microbatches)")
        elif self.rl is not None:
            raise ValueError("config.rl is set but config.stage='sft'; remove config.rl (and config.sampling) "
                             "or set config.stage='rl'")
        if self.stage == "sft" and self.rollout != RolloutSettings():
            raise ValueError(f"config.rollout={self.rollout} is set but config.stage='sft' (only RL samples); "
                             "remove config.rollout")

    def _check_model(self) -> None:
        m = self.model
        if m.init not in INITS:
            raise ValueError(f"config.model.init={m.init!r}; allowed: {INITS}")
        if m.name in NAMED_CONFIGS:
            try:
                NAMED_CONFIGS[m.name].replace(**m.overrides)
            except TypeError as e:  # an override that is no ModelConfig field
                raise ValueError(f"config.model.overrides: {e}") from None
        elif m.init != "pretrained" or not m.path:
            raise ValueError(f"config.model.name={m.name!r}; allowed: {sorted(NAMED_CONFIGS)} (or any name with "
                             "config.model.init='pretrained' and config.model.path)")
        if self.continual and m.init != "checkpoint":  # its workdir is checked when read (setup.check_continual)
            raise ValueError(f"config.continual=True needs config.model.init='checkpoint' (got {m.init!r}) and "
                             "config.model.init_workdir set to a baseline RL workdir")

    def _check_data(self) -> None:
        d = self.data
        if d.mode not in PACKING:
            raise ValueError(f"config.data.mode={d.mode!r}; allowed: {PACKING}")
        if d.templates not in prompts.TEMPLATE_SETS:
            raise ValueError(f"config.data.templates={d.templates!r}; allowed: {sorted(prompts.TEMPLATE_SETS)}")
        if d.ranking is not None and d.ranking not in preimage.RANKINGS:
            raise ValueError(f"config.data.ranking={d.ranking!r}; allowed: None or one of {preimage.RANKINGS}")
        if d.num_train < 0 or d.num_eval < 0:
            raise ValueError(f"config.data.num_train={d.num_train}, num_eval={d.num_eval}; must be >= 0 (0 = all)")
        if not 0.0 <= d.validation_fraction < 1.0:
            raise ValueError(f"config.data.validation_fraction={d.validation_fraction}; allowed: [0, 1)")
        if self.stage == "sft" and d.seq_len < 1:
            raise ValueError(f"config.data.seq_len={d.seq_len}; SFT needs an integer >= 1")
        if self.needs_task and not self.task:
            raise ValueError(f"config.task is unset; set it to one of {task_names()} (or register a task: "
                             "docs/extending.md, \"A task\")")
        if self.needs_task:
            try:
                get_task(self.task)
            except ValueError as e:  # names the tasks allowed
                raise ValueError(f"config.{e}") from None

    @property
    def needs_task(self) -> bool:
        """RL always reads a task; SFT unless `data.mixture` or `data.path` gives its rows."""
        return self.stage == "rl" or not (self.data.mixture or self.data.path)

    @property
    def data_dir_or_none(self) -> Optional[str]:
        """`data_dir`, None when unset (the task's reader then looks in $PRD_DATA_DIR, else the user data dir)."""
        return self.data_dir or None

    @classmethod
    def from_config(cls, config) -> "TrainConfig":
        """From a training ConfigDict (or dict); a `TrainConfig` is returned as is. Unknown keys
        raise naming the allowed ones; a key that moved (`config_schema.MOVED`) or was removed
        (`tasks.REMOVED_FIELDS`) raises naming its replacement."""
        if isinstance(config, cls):
            return config
        check_moved(config)
        check_removed_fields(config)
        raw = _plain(config)
        for key in ("model", "data", "optim"):
            if key in raw and not isinstance(raw[key], dict):
                raise ValueError(f"config.{key}={raw[key]!r}; must be a sub-config")
        top = _known(raw, cls, "", skip=("sampling",))
        model = _known(raw.get("model") or {}, ModelInit, "model.")
        model["overrides"] = dict(model.get("overrides") or {})
        top["model"] = ModelInit(**model)
        top["data"] = DataSettings(**_known(raw.get("data") or {}, DataSettings, "data."))
        if "optim" not in raw:
            raise ValueError("config.optim is missing; give learning_rate, warmup_steps and decay_steps "
                             "(train.optim.OptimConfig)")
        try:
            top["optim"] = OptimConfig(**raw["optim"])
        except TypeError as e:
            raise ValueError(f"config.optim: {e}") from None
        top["wandb"] = WandbConfig.from_config(raw.get("wandb"))
        top["rollout"] = RolloutSettings.from_config(raw.get("rollout"))
        if raw.get("rl") is not None:
            top["rl"] = RLConfig.from_config(config)  # with the top-level config.sampling
        elif raw.get("sampling") is not None:
            raise ValueError("config.sampling is set but config.rl is not; only RL samples (set config.stage='rl' "
                             "and config.rl, or remove config.sampling)")
        return cls(**top)


def _plain(config) -> dict:
    return config.to_dict() if hasattr(config, "to_dict") else {k: _plain(v) if hasattr(v, "keys") else v
                                                                 for k, v in dict(config).items()}


def _known(raw: dict, cls, prefix: str, skip=()) -> dict:
    """`raw`'s entries that are fields of `cls` (sub-groups left to the caller); unknown keys raise,
    required ones missing raise, each naming the fields."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    groups = {"model", "data", "optim", "rl", "wandb", "rollout"} if cls is TrainConfig else set()
    unknown = sorted(set(raw) - set(fields) - set(skip))
    if unknown:
        where = f"config.{prefix[:-1]}" if prefix else "training config"
        raise ValueError(f"{where}: unknown keys {unknown}; allowed: {sorted(set(fields) | set(skip))}")
    missing = [f"config.{prefix}{n}" for n, f in fields.items() if n not in groups and n not in raw
               and f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING]
    if missing:
        raise ValueError(f"training config: missing {missing} (each is required)")
    out = {k: v for k, v in raw.items() if k in fields and k not in groups}
    for name in ("difficulty", "loggers"):
        if isinstance(out.get(name), list):
            out[name] = tuple(out[name])
    return out


def _check_types(obj, prefix: str) -> None:
    """Each scalar field of `obj` has its declared type (an int is accepted, and kept as a float,
    for a float); raises naming the field and the type."""
    hints = typing.get_type_hints(type(obj))
    for f in dataclasses.fields(obj):
        tp, value = hints[f.name], getattr(obj, f.name)
        optional = typing.get_origin(tp) is typing.Union and type(None) in typing.get_args(tp)
        if optional:
            if value is None:
                continue
            tp = next(a for a in typing.get_args(tp) if a is not type(None))
        if tp not in (int, float, str, bool, tuple, dict):
            continue
        if tp is float and isinstance(value, int) and not isinstance(value, bool):
            object.__setattr__(obj, f.name, float(value))
        elif not isinstance(value, tp) or (isinstance(value, bool) and tp is not bool):
            allowed = f"None or {tp.__name__}" if optional else tp.__name__
            raise ValueError(f"config.{prefix}{f.name}={value!r}; must be {allowed}")


def describe() -> dict:
    """{dotted field: one-line description} of the run, loop, `model.*` and `data.*` fields and of
    each group (`optim.*`, `rl.*`, `wandb.*` are described by their own dataclasses' docstrings)."""
    return {prefix + f.name: f.metadata.get("doc", "")
            for prefix, cls in (("", TrainConfig), ("model.", ModelInit), ("data.", DataSettings))
            for f in dataclasses.fields(cls)}
