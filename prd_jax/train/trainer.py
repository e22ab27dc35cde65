"""The one training loop (big_vision style), shared by SFT and RL stages.

A *stage* supplies the data side: `abstract_batch()`, `loss_fn()`, `next_batch(state, step,
rows) -> (batch, host_metrics)` (only the global batch rows `rows` this process feeds), `data_state()` / `restore_data(state)` and optionally
`evaluate(params, step) -> metrics`. The loop owns the rest:

- workdir (a local path or a URI such as gs://bucket/run; files via `prd_jax.fileio`,
  written by process 0 only): the resolved config (`config.json`), orbax checkpoints
  (`checkpoints/`), `metrics.jsonl` (one JSON line per step) and the trackers of
  `config.loggers` (`prd_jax.tracking`; default TensorBoard events through clu): each step's
  metrics and the resolved config. A stage with `use_tracker(tracker)` is handed the run's
  `Tracker` before the first step (to write texts such as sample rollouts); a stage with
  `rollout_records(step)` has them written after each step to `rollouts.jsonl` and the tracker
  (`rollout_log.RolloutLog`, RL's sample rollouts);
- resume: the latest restorable step, the data position and the RNG come back, so a run
  killed and restarted ends bit-identical to an uninterrupted one on the same devices;
  metrics.jsonl lines after the restored step are dropped;
- the step: compiled once with `.lower().compile()` (memory analysis logged), explicit
  shardings, donated state; each process builds only the batch rows its devices hold and
  they are assembled into global arrays (multi-host: no host holds the global batch);
- saves every `config.checkpoint_every` steps (async, last `config.keep_checkpoints`), on
  SIGTERM, and at the end; a progress bar with ETA.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import time
from typing import Any

import jax
from tqdm import tqdm

from prd_jax import fileio
from prd_jax.checkpoint import Checkpointer
from prd_jax.config_io import save_config
from prd_jax.host import is_main, to_host
from prd_jax.tracking import Tracker, open_tracker
from prd_jax.train.config import TrainConfig
from prd_jax.train.optim import make_optimizer, make_schedule
from prd_jax.train.rollout_log import RolloutLog
from prd_jax.train.state import TrainState, abstract_state, create_state, state_shardings
from prd_jax.train.step import compile_step, minibatch_updates, train_step

log = logging.getLogger(__name__)


def as_tree(state: TrainState) -> dict:
    return {"step": state.step, "params": state.params, "opt_state": state.opt_state, "rng": state.rng}


def from_tree(tree: dict) -> TrainState:
    return TrainState(tree["step"], tree["params"], tree["opt_state"], tree["rng"])


def optimizer_from(config):
    """(optimizer, schedule) of `config.optim` (`OptimConfig`)."""
    optim = TrainConfig.from_config(config).optim
    return make_optimizer(optim), make_schedule(optim)


def local_rows(batch_shardings: dict, abstract_batch: dict) -> list:
    """Global batch rows this process's devices hold, for a microbatched `[A, B/A, ...]` layout
    (row = a * B/A + i), sorted. Loaders materialise only these rows."""
    key = next(iter(abstract_batch))
    shape = abstract_batch[key].shape
    per = shape[1]
    rows = set()
    for idx in batch_shardings[key].addressable_devices_indices_map(shape).values():
        for a in range(*idx[0].indices(shape[0])):
            rows.update(a * per + i for i in range(*idx[1].indices(per)))
    return sorted(rows)


def put_local(batch: dict, rows: list, shardings: dict, abstract_batch: dict) -> dict:
    """This process's rows `[len(rows), ...]` -> global microbatched jax arrays `[A, B/A, ...]`.

    Each device's block is gathered from the local rows (`make_array_from_callback` only asks
    for addressable blocks), so the global batch never exists on one host.
    """
    where = {r: i for i, r in enumerate(rows)}

    def place(x, sh, spec):
        per = spec.shape[1]

        def block(idx):
            a_range = range(*idx[0].indices(spec.shape[0]))
            i_range = range(*idx[1].indices(per))
            take = [where[a * per + i] for a in a_range for i in i_range]
            out = x[take].reshape(len(a_range), len(i_range), *x.shape[1:])
            return out[(slice(None), slice(None)) + tuple(idx[2:])]

        return jax.make_array_from_callback(spec.shape, sh, block)

    return {k: place(batch[k], shardings[k], abstract_batch[k]) for k in abstract_batch}


class MetricsLog:
    """Scalars to `tracker` (`config.loggers`) + metrics.jsonl + a tqdm bar; files on process 0 only."""

    def __init__(self, workdir: str, start: int, total: int, progress: bool, tracker: Tracker):
        self.main = is_main()
        self.tracker = tracker
        self.path = os.path.join(workdir, "metrics.jsonl")
        if self.main and fileio.exists(self.path):  # drop lines after the restored step
            lines = fileio.read_text(self.path).splitlines(keepends=True)
            keep = [ln for ln in lines if ln.strip() and _step_of(ln) is not None and _step_of(ln) <= start]
            fileio.write_text(self.path, "".join(keep))
        self.file = fileio.open(self.path, "a") if self.main else None
        self.bar = tqdm(total=total, initial=start, desc="train", dynamic_ncols=True,
                        disable=not (progress and self.main))

    def write(self, step: int, metrics: dict) -> None:
        scalars = {k: float(v) for k, v in metrics.items()}
        self.tracker.scalars(step, scalars)
        if self.file:
            self.file.write(json.dumps({"step": step, **scalars}) + "\n")
            self.file.flush()
        self.bar.update(1)
        self.bar.set_postfix({k: f"{scalars[k]:.4g}" for k in ("loss", "reward/mean") if k in scalars})

    def close(self) -> None:
        self.bar.close()
        self.tracker.close()
        if self.file:
            self.file.close()


def _step_of(line: str):
    try:
        return json.loads(line)["step"]
    except (json.JSONDecodeError, KeyError, TypeError):
        return None


def fit(config, workdir: str, stage, *, mesh, cfg, init_params: Any = None, progress: bool = True) -> dict:
    """Train `stage` for `config.steps` steps in `workdir` (resuming); returns the last metrics.
    `config` is the run's ConfigDict: it is saved as given (`config.json`, which later runs and
    `checkpoint.load_workdir` read) and read through its validated `TrainConfig`."""
    tc = TrainConfig.from_config(config)
    fileio.makedirs(workdir)
    save_config(config, workdir)
    optimizer, schedule = optimizer_from(tc)
    shardings = state_shardings(cfg, optimizer, mesh)
    abstract = abstract_state(cfg, optimizer, mesh)
    ckpt = Checkpointer(workdir, save_every=tc.checkpoint_every, keep=tc.keep_checkpoints)
    restored = ckpt.restore_latest(as_tree(abstract))
    if restored is not None:
        step, tree, meta = restored
        state = from_tree(tree)
        stage.restore_data(meta["data"])
        log.info("resumed %s at step %d", workdir, step)
    else:
        step = 0
        state = create_state(cfg, optimizer, mesh, jax.random.key(tc.seed), init_params)
    if step >= tc.steps:  # already done: a rerun resumes at the end (nothing to compile)
        ckpt.close()
        log.info("%s is already at step %d >= config.steps=%d", workdir, step, tc.steps)
        return dict(meta.get("metrics") or {})
    accum = tc.grad_accum_steps
    step_fn = functools.partial(train_step, loss_fn=stage.loss_fn(), optimizer=optimizer, schedule=schedule)
    step_fn = minibatch_updates(step_fn, getattr(stage, "minibatches", 1), getattr(stage, "updates_per_batch", 1))
    abstract_batch = jax.tree.map(
        lambda s: jax.ShapeDtypeStruct((accum, s.shape[0] // accum, *s.shape[1:]), s.dtype), stage.abstract_batch())
    t0 = time.perf_counter()
    compiled, batch_sh = compile_step(step_fn, abstract, abstract_batch, mesh, shardings)
    log.info("train step compiled in %.1f s", time.perf_counter() - t0)
    rows = local_rows(batch_sh, abstract_batch)
    holder = {"state": state, "step": step}
    ckpt.install_preemption_handler(
        lambda: (holder["step"], as_tree(holder["state"]), {"data": stage.data_state()}))
    tracker = open_tracker(tc.loggers, workdir, tc.wandb, is_main())
    tracker.config(config.to_dict() if hasattr(config, "to_dict") else dict(config))
    if hasattr(stage, "use_tracker"):
        stage.use_tracker(tracker)
    metrics_log = MetricsLog(workdir, step, tc.steps, progress, tracker)
    rollout_log = RolloutLog(workdir, step, tracker) if hasattr(stage, "rollout_records") else None
    metrics: dict = {}
    bad_in_a_row, max_bad = 0, tc.max_nonfinite_steps
    try:
        while step < tc.steps:
            t_data = time.perf_counter()
            batch, host_metrics = stage.next_batch(state, step, rows)
            t_step = time.perf_counter()
            state, device_metrics = compiled(state, put_local(batch, rows, batch_sh, abstract_batch))
            device_metrics = to_host(device_metrics)
            t_end = time.perf_counter()
            step += 1
            holder.update(state=state, step=step)
            metrics = {**{k: float(v) for k, v in device_metrics.items()}, **host_metrics,
                       "time/data_s": t_step - t_data, "time/train_s": t_end - t_step,
                       "train/tokens_per_s": float(device_metrics["tokens"]) / max(t_end - t_step, 1e-9)}
            if hasattr(stage, "evaluate") and tc.eval_every and step % tc.eval_every == 0:
                metrics.update(stage.evaluate(state.params, step))
            metrics_log.write(step, metrics)
            if rollout_log is not None:
                rollout_log.write(step, stage.rollout_records(step))
            bad_in_a_row = bad_in_a_row + 1 if metrics["nonfinite"] > 0 else 0
            if bad_in_a_row >= max_bad:
                raise FloatingPointError(
                    f"halting at step {step}: {bad_in_a_row} steps in a row had a non-finite loss or gradient "
                    f"(updates rejected; config.max_nonfinite_steps={max_bad}). Lower config.optim.learning_rate "
                    f"or check the data; the last good state is in {workdir}/checkpoints")
            ckpt.save(step, as_tree(state), {"data": stage.data_state(), "metrics": metrics},
                      force=step == tc.steps)
    finally:
        ckpt.wait()
        ckpt.close()
        metrics_log.close()
    return metrics


def eval_loss(loss_fn, params, batches) -> float:
    """Mean of a (sum, count) loss over host batches (held-out split)."""
    jitted = jax.jit(loss_fn)
    total = count = 0.0
    for batch in batches:
        s, c, _ = jitted(params, batch)
        total, count = total + float(s), count + float(c)
    return total / max(count, 1.0)

