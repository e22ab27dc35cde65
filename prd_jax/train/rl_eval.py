"""Held-out accuracy during RL: named operators on the task's held-out split (PDR paper §4.2).

Every `config.eval_every` steps `RLStage.evaluate` runs `HeldOutEval`: each operator of
`rl.eval_operators` (default: Long-CoT with the rollout budget `rl.max_new_tokens` and, for
operator RL, the RL operator's own spec, PDR §4.2's Long-CoT vs. PDR comparison) on the first
`rl.eval_problems` problems of `rl.eval_split` ("" = the task's default split, "test" for the
built-in tasks), through `runner.run_operator`, the function `prd-jax eval` and the RL
operator rollouts call, on the current params.

Sampling is the run's (`config.sampling`, T = 1.0 in the paper's setting) with fixed keys, the
keys `prd_jax.evaluate.evaluate` draws for seed `config.seed`, batch size `rl.eval_problems` and
one sample: operator i, problem j gets `fold_in(fold_in(fold_in(key(seed), i), j), 0)`. Each
eval thus sees the same problems with the same keys (only the params change between steps,
so the curve is not noise from re-drawn keys), and the eval at step s equals `prd-jax eval` of
checkpoint s with those settings (tests/test_rl_eval.py holds them equal). The problems, keys
and operator context are built once, so every eval after the first reuses the compiled
programs.

Metrics per operator name: `eval/<name>/accuracy` (mean correct over the problems, k = 1),
`eval/<name>/unparsed` (share of completions with no answer), `eval/<name>/b_seq`,
`/b_total`, `/b_seq_io`, `/b_total_io` (mean budgets, PDR §3.1), and `time/eval_s`.
"""

from __future__ import annotations

import logging
import time

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.host import to_host
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.runner import answer_texts, encode_problems, make_context, run_operator
from prd_jax.tasks import require_data
from prd_jax.tasks.grading import TaskGrader, TaskGrouper

log = logging.getLogger(__name__)

BUDGETS = ("b_seq", "b_total", "b_seq_io", "b_total_io")


def eval_rows(config, rl, task) -> list:
    """The held-out problems: the first `rl.eval_problems` rows of split `rl.eval_split` (or the
    task's default split) of `task`, from `config.data_dir` (`config`: a `TrainConfig`)."""
    split = rl.eval_split or task.default_split
    data_dir = config.data_dir_or_none
    if not config.data.mixture:
        require_data(task, split, data_dir)  # a built-in benchmark not yet fetched: names `prd-jax data get`
    try:
        rows = task.problems(split, limit=rl.eval_problems, data_dir=data_dir)
    except (ValueError, KeyError, FileNotFoundError) as e:
        raise ValueError(f"config.rl.eval_split={split!r} of task {task.name!r}: {e}") from None
    if not rows:
        raise ValueError(f"config.rl.eval_split={split!r}: task {task.name!r} has no problems there")
    return rows


class HeldOutEval:
    """`rl.eval_specs()` on fixed held-out problems; `__call__(params) -> metrics` (module docstring)."""

    def __init__(self, config, rl, cfg, tokenizer, mesh, task):
        self.cfg, self.tok, self.mesh, self.task = cfg, tokenizer, mesh, task
        self.rows = eval_rows(config, rl, task)
        width = rl.problem_tokens
        self.problems, self.kept, skipped = encode_problems(
            tokenizer, [task.problem_text(r) for r in self.rows], [task.gold_key(r) for r in self.rows],
            width, width=width)
        if not self.kept:
            raise ValueError(f"config.rl.eval_problems: none of the {len(self.rows)} held-out problems fits "
                             f"config.rl.max_problem_tokens={width} (0 = max_prompt_tokens)")
        if skipped:
            log.warning("held-out eval: %d of %d problems are longer than %d tokens and are left out",
                        len(skipped), len(self.rows), width)
        self.sampling = rl.call_sampling(tokenizer.stop_ids)
        self.operators = []  # (name, spec, context, keys [B])
        for index, (name, spec) in enumerate(rl.eval_specs()):
            ctx = make_context(tokenizer, self.sampling, grader=TaskGrader(task, tokenizer, self.rows),
                               grouper=TaskGrouper(task, tokenizer), kappa=spec.kappa, k_max=spec.k_max,
                               templates=rl.templates)
            op_key = jax.random.fold_in(jax.random.key(config.seed), index)
            keys = jnp.stack([jax.random.fold_in(jax.random.fold_in(op_key, j), 0) for j in self.kept])
            self.operators.append((name, spec, ctx, keys))
        log.info("held-out eval: %d problems of %s, operators %s", len(self.kept), task.name,
                 {name: spec.label for name, spec, _, _ in self.operators})

    def run(self, params, name: str):
        """(OperatorResult on the host, graded dicts) of operator `name` on the held-out problems."""
        _, spec, ctx, keys = next(o for o in self.operators if o[0] == name)
        lm = ModelLM(params, self.cfg, self.tok.pad_id, self.mesh, self.sampling.max_rows)
        res = to_host(run_operator(lm, self.problems, keys, spec, ctx))
        answers = answer_texts(self.tok, np.asarray(res.final_tokens), np.asarray(res.final_lengths))
        return res, self.task.grade_many([self.rows[j] for j in self.kept], answers)

    def __call__(self, params) -> dict:
        t0 = time.perf_counter()
        metrics = {}
        for name, *_ in self.operators:
            res, grades = self.run(params, name)
            metrics[f"eval/{name}/accuracy"] = float(np.mean([bool(g["correct"]) for g in grades]))
            metrics[f"eval/{name}/unparsed"] = float(np.mean([not g["parsed"] for g in grades]))
            for b in BUDGETS:
                metrics[f"eval/{name}/{b}"] = float(np.mean(np.asarray(getattr(res.calls, b))))
        metrics["time/eval_s"] = time.perf_counter() - t0
        return metrics
