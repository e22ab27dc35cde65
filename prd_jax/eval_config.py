"""`EvalConfig`: an eval config file's settings, validated once at the edge (`prd-jax eval`).

An eval config (`configs/eval/*.py`) is a ConfigDict; `EvalConfig.from_config` turns it
into typed fields, so the harness (`prd_jax.evaluate`) reads `ec.k_samples`, not
`config.get("k_samples", 1)`, and passes typed sub-configs down: `ec.sampling` (the one
sampling config, `prd_jax.sampling.Sampling`) and `ec.backend` (`backends.config.BackendConfig`).
Every error names the field and says what is allowed; a key that moved (`config_schema.MOVED`)
names its new place. Metrics and the operator grid follow the PDR paper (arXiv 2510.01123 §4).
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from prd_jax.backends.config import BackendConfig
from prd_jax.checkpoint import parse_checkpoint
from prd_jax.config_schema import check_moved
from prd_jax.model.config import REASONING_EFFORTS
from prd_jax.prompts import template_set
from prd_jax.sampling import Sampling
from prd_jax.tracking import WandbConfig, check_loggers


@dataclasses.dataclass(frozen=True)
class EvalConfig:
    """Validated eval settings.

    - `model`, `model_path`, `dtype` ("" = the model's own), `enable_thinking` and
      `reasoning_effort` (GPT-OSS; None = the chat template's default): the model to load;
    - `task`, `dataset`, `split`, `data_dir`, `num_problems`: the problems (a task names
      its data; `dataset` names a JSONL file of the data layer);
    - `operators`: the operator entries, each `{"type": registered name, field: value, ...}`;
    - `k_samples` per (problem, operator), `batch_size` problems per operator run, each
      problem cut to `max_problem_tokens`; `seed` (required: there is no default seed);
    - `templates`: a prompt set name ("" = the task's); `mesh` ("" = one device, or all
      devices on `data` on several processes); `target`: the `prd-jax compile` topology;
    - `sampling`: how every operator call samples (`config.sampling`);
    - `backend`: in-graph (default) or a remote server (`config.backend`);
    - `checkpoint`: "WORKDIR" or "WORKDIR@STEP" of a `prd-jax train` run: evaluate its policy
      in-graph with the run's own model and tokenizer (`checkpoint.load_workdir`; no @STEP: its
      newest saved step) instead of `model`; the workdir and step are recorded in the settings;
    - `loggers`: where the summary also goes (`prd_jax.tracking.LOGGERS`; default none: the
      workdir's files are the record), `wandb`: the W&B run (`tracking.WandbConfig`).
    """

    model: str
    operators: tuple
    num_problems: int
    batch_size: int
    max_problem_tokens: int
    seed: int
    k_samples: int = 1
    model_path: str = ""
    dtype: str = ""
    enable_thinking: Optional[bool] = None
    reasoning_effort: Optional[str] = None
    task: str = ""
    dataset: str = ""
    split: str = ""
    data_dir: str = ""
    templates: str = ""
    mesh: str = ""
    target: str = ""
    sampling: Sampling = Sampling()
    backend: BackendConfig = BackendConfig()
    checkpoint: str = ""
    loggers: tuple = ()
    wandb: WandbConfig = WandbConfig()

    def __post_init__(self):
        object.__setattr__(self, "loggers", check_loggers(self.loggers))
        if not isinstance(self.wandb, WandbConfig):
            object.__setattr__(self, "wandb", WandbConfig.from_config(self.wandb))
        for f in ("num_problems", "batch_size", "max_problem_tokens", "k_samples"):
            value = getattr(self, f)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"config.{f}={value!r}; must be an integer >= 1")
        if isinstance(self.seed, bool) or not isinstance(self.seed, int):
            raise ValueError(f"config.seed={self.seed!r}; must be an integer (there is no default seed)")
        for f in ("model", "model_path", "dtype", "task", "dataset", "split", "data_dir", "templates", "mesh",
                  "target", "checkpoint"):
            if not isinstance(getattr(self, f), str):
                raise ValueError(f"config.{f}={getattr(self, f)!r}; must be a string")
        if not self.model:
            raise ValueError("config.model is empty; give a named model (e.g. 'smollm2-135m')")
        if self.templates:
            template_set(self.templates)  # an unknown prompt set names the sets allowed
        if self.enable_thinking not in (None, True, False):
            raise ValueError(f"config.enable_thinking={self.enable_thinking!r}; allowed: None, True, False")
        if self.reasoning_effort not in (None,) + REASONING_EFFORTS:
            raise ValueError(f"config.reasoning_effort={self.reasoning_effort!r}; allowed: None or one of "
                             f"{REASONING_EFFORTS}")
        if not self.operators:
            raise ValueError("config.operators is empty; give at least one operator entry, e.g. "
                             "dict(type='long_cot', max_new_tokens=512)")
        for i, entry in enumerate(self.operators):
            if not isinstance(entry, dict):
                raise ValueError(f"config.operators[{i}]={entry!r}; must be a dict with `type` a registered operator")
        if not isinstance(self.sampling, Sampling):
            object.__setattr__(self, "sampling", Sampling.from_config(self.sampling))
        self.sampling.check_in_graph()
        if not isinstance(self.backend, BackendConfig):
            object.__setattr__(self, "backend", BackendConfig.from_config(self.backend))
        if self.checkpoint:
            parse_checkpoint(self.checkpoint, "config.checkpoint")
            if self.backend.remote:
                raise ValueError(f"config.checkpoint={self.checkpoint!r} evaluates in-graph; with config.backend.kind="
                                 f"{self.backend.kind!r} serve the workdir instead (prd-jax serve --workdir W) or "
                                 "leave config.checkpoint empty")

    def settings(self) -> dict:
        """What a workdir's result rows depend on beyond their (problem, operator, sample) key
        (`evaluate.check_settings`); the sampling keys keep the names older workdirs used."""
        return {"model": self.model, "model_path": self.model_path, "dataset": self.dataset, "task": self.task,
                "temperature": self.sampling.temperature, "top_p": self.sampling.top_p,
                "top_k": self.sampling.top_k, "seed": self.seed, "max_problem_tokens": self.max_problem_tokens,
                "templates": self.templates, "enable_thinking": self.enable_thinking,
                **({"reasoning_effort": self.reasoning_effort} if self.reasoning_effort else {})}

    def model_overrides(self) -> dict:
        """ModelConfig overrides, when set: `dtype` (the paper configs compute in bf16),
        `enable_thinking` (the chat template's thinking switch) and `reasoning_effort` (the
        GPT-OSS template's variable)."""
        out = {"dtype": self.dtype} if self.dtype else {}
        if self.enable_thinking is not None:
            out["enable_thinking"] = self.enable_thinking
        if self.reasoning_effort is not None:
            out["reasoning_effort"] = self.reasoning_effort
        return out

    @classmethod
    def from_config(cls, config) -> "EvalConfig":
        """From an eval ConfigDict (or dict). Unknown keys raise naming the allowed ones; a
        key that moved raises naming its new place (`--config.temperature` ->
        `config.sampling.temperature`)."""
        check_moved(config)
        raw = config.to_dict() if hasattr(config, "to_dict") else dict(config)
        names = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(raw) - set(names))
        if unknown:
            raise ValueError(f"eval config: unknown keys {unknown}; allowed: {names}")
        missing = [f.name for f in dataclasses.fields(cls)
                   if f.default is dataclasses.MISSING and f.name not in raw]
        if missing:
            raise ValueError(f"eval config: missing keys {missing} (each is required)")
        for f in ("model_path", "dtype", "task", "dataset", "split", "data_dir", "templates", "mesh", "target",
                  "checkpoint"):
            if raw.get(f) is None and f in raw:
                raw[f] = ""  # None and "" both mean unset
        raw["operators"] = tuple(dict(e) for e in raw["operators"])
        raw["sampling"] = Sampling.from_config(raw.get("sampling"))
        raw["backend"] = BackendConfig.from_config(raw.get("backend"))
        raw["wandb"] = WandbConfig.from_config(raw.get("wandb"))
        return cls(**raw)
