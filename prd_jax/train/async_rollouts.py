"""One-step-asynchronous RL rollouts, `config.rl.off_policy_steps=1` (issue 48 §2).

The rollouts step t+1 trains on are sampled with the step-t weights theta_t, before step t's
update, so their sampling overlaps step t's host work and update (JAX async dispatch). In
`RLStage.next_batch(state, t)`, state.params being theta_t:

1. step t's rollouts are the ones launched at step t-1 with theta_{t-1}; at the run's first
   step (or a resume whose checkpoint has none) they are launched now with theta_t, on-policy;
2. step t+1's prompts are taken and its standard rollouts and operator runs dispatched with
   theta_t (`Launched`), not waited for;
3. step t's host work (`RLStage.batch`): decode, grade, advantages, KL reference, and the
   verifier rows of V1-PairRL / PointRL, which quote the step's graded candidates and so are
   sampled here with theta_t (their behaviour policy is the proximal one, weight 1);
4. the proximal log-probabilities `prox_logp`: one forward pass of theta_t over the batch, for
   the decoupled objective of `losses.policy_loss` (AReaL, arXiv 2505.24298, with a truncated
   behaviour weight); `old_logp` stays the sampler's record of the behaviour policy.

The trainer then dispatches update t; the device runs it after step t+1's sampling, and step
t+1's host work waits only for that sampling.

Checkpoints: `data_state` carries the in-flight rollouts of the next step (the sampler's host
arrays, base64 in the checkpoint's meta JSON) with the data position before their prompts were
taken; `restore` rewinds the position there, and the resumed step retakes the same prompts and
trains on the saved rollouts, so a killed run resumes bit-identical to an uninterrupted one.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
from typing import Optional

import jax
import numpy as np

from prd_jax.host import to_host

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Launched:
    """One step's rollouts in flight: its prompts (`chosen`, taken at data position `position`),
    the dispatched device outputs by row group ("standard", "operator") and the step whose
    params sampled them (`policy_step`)."""

    step: int
    policy_step: int
    position: tuple
    chosen: list
    outputs: dict
    record: Optional[dict] = None  # the checkpoint form, made once


def encode_arrays(tree) -> dict:
    """`{path: {dtype, shape, data (base64)}}` of a pytree of host arrays (JSON-serialisable)."""
    out = {}
    for path, x in jax.tree_util.tree_flatten_with_path(tree)[0]:
        x = np.ascontiguousarray(x)
        out[jax.tree_util.keystr(path)] = {"dtype": str(x.dtype), "shape": list(x.shape),
                                           "data": base64.b64encode(x.tobytes()).decode("ascii")}
    return out


def decode_arrays(encoded: dict, abstract):
    """The pytree `encode_arrays` wrote, in the structure of `abstract` (shape-dtype leaves);
    raises naming the leaf when one is missing or of another shape or dtype."""
    flat, treedef = jax.tree_util.tree_flatten_with_path(abstract)
    leaves = []
    for path, spec in flat:
        name = jax.tree_util.keystr(path)
        entry = encoded.get(name)
        want = {"dtype": str(np.dtype(spec.dtype)), "shape": list(spec.shape)}
        if entry is None or {k: entry[k] for k in want} != want:
            got = None if entry is None else {k: entry[k] for k in want}
            raise ValueError(f"checkpoint in-flight rollouts: leaf {name} is {got}; this config samples {want}")
        data = base64.b64decode(entry["data"])
        leaves.append(np.frombuffer(data, dtype=np.dtype(spec.dtype)).reshape(spec.shape).copy())
    return jax.tree_util.tree_unflatten(treedef, leaves)


def restore(stage, state: dict) -> None:
    """After `stage.restore_data`: with in-flight rollouts in `state`, rewind the data position to
    where their prompts were taken and keep them for their step. A run resumed with
    `off_policy_steps=0` retakes the same prompts and samples them on-policy."""
    record = state.get("in_flight")
    if record is None:
        return
    stage.epoch, stage.offset = int(record["epoch"]), int(record["offset"])
    if stage.async_rollouts is not None:
        stage.async_rollouts.restored = record
    else:
        log.info("checkpoint holds step %d's in-flight rollouts; config.rl.off_policy_steps=0 samples that step "
                 "again, on-policy, from the same prompts", record["step"])


class AsyncRollouts:
    """The one-step-asynchronous schedule of an `RLStage` (module docstring)."""

    def __init__(self, stage):
        self.stage = stage
        self.pending: Optional[Launched] = None
        self.restored: Optional[dict] = None  # a checkpoint's in-flight record, used at its step

    def _dispatch(self, params, key, chosen: list) -> dict:
        """Device outputs of a step's standard rollouts and operator runs from its step key (the
        keys `RLStage.batch` would use on-policy at that step)."""
        st = self.stage
        standard, operator = chosen[:st.num_standard], chosen[st.num_standard:]
        out = {}
        if standard:
            out["standard"] = st.launch_standard(params, jax.random.fold_in(key, 0), standard)
        if operator:
            out["operator"] = st.operator.launch(params, jax.random.fold_in(key, 1), [(c[2], c[1]) for c in operator])
        return out

    def launch(self, state, step: int, policy_step: int) -> Launched:
        """Take step `step`'s prompts and dispatch its rollouts with `state.params`, the params
        of step `policy_step`."""
        st = self.stage
        position = (st.epoch, st.offset)
        chosen = st._take(st.rl.prompts_per_step)
        key = st.layout.replicate(jax.random.fold_in(state.rng, step))
        return Launched(step, policy_step, position, chosen,
                        self._dispatch(st.rollout_params(state, policy_step), key, chosen))

    def _from_checkpoint(self, state, step: int) -> Optional[Launched]:
        record, self.restored = self.restored, None
        if record is None:
            return None
        if int(record["step"]) != step:
            log.warning("checkpoint in-flight rollouts are for step %s, the run resumes at step %d: step %d is "
                        "sampled on-policy", record["step"], step, step)
            return None
        st = self.stage
        position = (st.epoch, st.offset)
        chosen = st._take(st.rl.prompts_per_step)
        abstract = jax.eval_shape(lambda p, k: self._dispatch(p, k, chosen), state.params,
                                  jax.random.fold_in(state.rng, step))
        return Launched(step, int(record["policy_step"]), position, chosen,
                        decode_arrays(record["arrays"], abstract))

    def next_batch(self, state, step: int, rows=None):
        """Step `step`'s batch (its rollouts sampled at step - 1 where there were any) after
        launching step + 1's with `state.params` (`RLStage.batch` adds `prox_logp`), with the
        metric `rollout/policy_lag` (steps between the sampling params and these)."""
        current = self.pending if self.pending is not None and self.pending.step == step else None
        current = current or self._from_checkpoint(state, step)
        if current is None:  # the run's first step: on-policy
            if step:
                log.warning("step %d has no rollouts launched at step %d: sampling them on-policy", step, step - 1)
            current = self.launch(state, step, step)
        self.pending = self.launch(state, step + 1, step)
        batch, metrics = self.stage.batch(state, step, None, launched=current)  # adds prox_logp (decoupled)
        metrics["rollout/policy_lag"] = float(step - current.policy_step)
        if rows is not None:
            batch = {k: v[np.asarray(rows)] for k, v in batch.items()}
        return batch, metrics

    def data_state(self, state: dict) -> dict:
        """`state` (the data position) plus the next step's in-flight rollouts as host arrays
        and the position their prompts were taken at (waits for their sampling)."""
        p = self.pending
        if p is None:
            return state
        if p.record is None:
            p.outputs = to_host(p.outputs)
            p.record = {"step": p.step, "policy_step": p.policy_step, "epoch": p.position[0],
                        "offset": p.position[1], "arrays": encode_arrays(p.outputs)}
        return {**state, "in_flight": p.record}

