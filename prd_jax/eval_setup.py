"""One eval setup: what `prd-jax eval`, `prd-jax compile` and `prd-jax compile --estimate` share.

`EvalSetup.from_config(config)` checks an eval config once and holds its typed settings
(`EvalConfig`), its task, and its prompt set (`config.templates`, "" = the task's own);
`open_lm(...)` opens the LM `config.backend` names (the one place that tells the in-graph
decoder from a remote endpoint) and `with_lm(lm, tokenizer)` adds it (None where nothing
runs, as in AOT compiles), the tokenizer and the sampling every call shares; the LM's
`check` refuses there any spec or sampling field it cannot honour (`operators.lm_protocol`).
`context(spec)` is the operator Context of one operator spec. Eval, the compile path and
the remote estimate all build their contexts here, so they cannot drift apart (issue 45
§7: compile once read `templates=''` where eval read the task's set).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import jax

from prd_jax.backends import for_eval
from prd_jax.checkpoint import load_workdir
from prd_jax.eval_config import EvalConfig
from prd_jax.mesh import make_mesh
from prd_jax.model import load
from prd_jax.operators import registry
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.runner import make_context
from prd_jax.prompts import template_set
from prd_jax.sampling import Sampling
from prd_jax.tasks import Task, task_for_config
from prd_jax.tasks.grading import TaskGrader, TaskGrouper

__all__ = ["EvalSetup", "build_spec", "eval_sampling", "eval_task", "run_settings"]


def build_spec(entry: dict):
    """Operator spec from a config entry {"type": "pdr", "schedule": (8, 4, 1), ...}.

    `type` is a registered operator name (`operators.registry`: long_cot, sr, pdr, best_of_n,
    rsa and any operator registered by an imported module); a `judge` field may be a dict
    of Judge fields."""
    return registry.build_spec(entry)


def eval_task(config) -> Task:
    """The task an eval config reads its problems from and grades with: `config.task`
    (`tasks.task_for_config`; a config still naming `dataset` gets an error naming `task`)."""
    return task_for_config(config)


def eval_sampling(ec: EvalConfig, stop_ids) -> Sampling:
    """The sampling every operator call of an eval run shares: `config.sampling` (the one
    sampling config: T, top-p, top-k and the sampler's cost options, none of which changes
    a row's tokens) with the tokenizer's stop ids."""
    return dataclasses.replace(ec.sampling, stop_ids=tuple(stop_ids))


def run_settings(ec: EvalConfig, checkpoint: str = "") -> dict:
    """What a workdir's rows depend on beyond their key (`evaluate.check_settings`): the
    config's `EvalConfig.settings`, the resolved `checkpoint` ("WORKDIR@STEP") when set, and a
    remote backend's `BackendConfig.settings` (in-graph workdirs keep no "backend" key)."""
    out = ec.settings()
    if checkpoint:
        out["checkpoint"] = checkpoint
    if ec.backend.remote:
        out["backend"] = ec.backend.settings()
    return out


_CONTEXTS: dict = {}


def _context(tok, sampling: Sampling, kappa, k_max: int, templates: str, task: Task):
    """One operator Context per (tokenizer, settings, task), reused across calls: the compiled
    operator is cached per context, so evaluating several checkpoints that share a tokenizer
    object (the demo) compiles each operator once."""
    key = (id(tok), sampling, kappa, k_max, templates, task)
    if key not in _CONTEXTS:  # the entry holds `tok`, so its id is not reused while cached
        _CONTEXTS[key] = (tok, make_context(tok, sampling, grader=TaskGrader(task, tok),
                                            grouper=TaskGrouper(task, tok), kappa=kappa, k_max=k_max,
                                            templates=templates))
    return _CONTEXTS[key][1]


@dataclasses.dataclass(frozen=True)
class EvalSetup:
    """An eval config's task, prompt set, tokenizer, LM and sampling (see the module docstring)."""

    config: EvalConfig
    task: Task
    templates: str
    tokenizer: Any = None
    lm: Any = None
    sampling: Optional[Sampling] = None

    @classmethod
    def from_config(cls, config) -> "EvalSetup":
        """Check `config` (task first: a removed data field is named before anything else)."""
        task = eval_task(config)
        ec = EvalConfig.from_config(config)
        templates = ec.templates or task.templates
        template_set(templates)  # an unknown set names the allowed ones before any work
        return cls(ec, task, templates)

    def open_lm(self, workdir: str, *, model=None, checkpoint=None, progress: bool = True) -> "EvalSetup":
        """`with_lm` of the LM `config.backend` names: a remote endpoint (`backends.for_eval.eval_lm`:
        its request cache in `workdir`; nothing is sent yet), else the in-graph decoder over
        `model` (anything with cfg, params, tokenizer, mesh), the training `checkpoint`
        (workdir, step) or `config.model`, loaded on `config.mesh` (several processes: one
        global mesh, every device on `data`)."""
        ec = self.config
        if ec.backend.remote:
            return self.with_lm(*for_eval.eval_lm(ec, ec.backend, workdir, progress))
        if model is None:
            mesh = make_mesh(ec.mesh or None) if ec.mesh or jax.process_count() > 1 else None
            model = (load_workdir(*checkpoint, mesh=mesh, **ec.model_overrides()) if checkpoint else
                     load(ec.model, ec.model_path or None, mesh=mesh, **ec.model_overrides()))
        tok = model.tokenizer
        return self.with_lm(ModelLM(model.params, model.cfg, tok.pad_id, model.mesh, ec.sampling.max_rows), tok)

    def with_lm(self, lm, tokenizer) -> "EvalSetup":
        """This setup with the LM operators call (None: nothing runs) and its tokenizer. An LM
        is asked first to refuse what it cannot honour (`LanguageModel.check`)."""
        sampling = eval_sampling(self.config, tokenizer.stop_ids)
        if lm is not None:
            lm.check(self.specs(), sampling)
        return dataclasses.replace(self, lm=lm, tokenizer=tokenizer, sampling=sampling)

    def specs(self) -> list:
        """The operator specs of `config.operators`, in order."""
        return [build_spec(dict(e)) for e in self.config.operators]

    def context(self, spec):
        """The operator Context for `spec` (the task's grader and grouper, this prompt set)."""
        if self.tokenizer is None:
            raise ValueError("EvalSetup.context: no tokenizer yet; call with_lm(lm, tokenizer) first")
        return _context(self.tokenizer, self.sampling, spec.kappa, spec.k_max, self.templates, self.task)
