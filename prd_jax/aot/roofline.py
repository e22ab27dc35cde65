"""Modelled time of a compiled program on a chip, decode tok/s per chip, and an RL step's time.

A program's time per device is modelled as the largest of three floors (our model; the
chip constants and their sources are in `aot.chips`):

    time = max(flops / peak_flops, bytes_accessed / hbm_bandwidth, collective_bytes / ici_bandwidth)

with the per-device figures of `aot.hlo_cost.Cost`. The term that sets the maximum names the
bound: "FLOPs", "HBM" or "ICI". Compute, memory traffic and communication are assumed to
overlap perfectly and to reach the vendors' peaks, so this is a floor on time (a ceiling on
throughput), not a measurement.

Decode: one step of the sampler advances every row in flight by one token, so
tok/s per chip = rows in flight / chips / step time. A call whose cache grows
(`sampling.cache_window` > 0) decodes through several cache sizes: each is compiled, and the
step time is the mean over the call's steps (every row to its budget).

RL step (`rl_step_seconds`): rollout time = generated tokens / (tok/s per chip x sampling
chips); train time = the train step's modelled time on all chips, scaled by
chips / training chips when only some chips train. Colocated: rollout + train (+ reshard).
Split (a fraction f of the chips samples, the rest trains): with `off_policy_steps=0` the
two still run one after the other (rollout on f N chips, then train on (1 - f) N);
with `off_policy_steps=1` the rollouts of step t+1 run while step t trains, so a step
takes max(rollout, train) (+ reshard). Per-chip decode tok/s is taken as measured on the
full mesh (the sampling sub-mesh's own layout is not compiled here).
"""

from __future__ import annotations

import dataclasses
from typing import Tuple

from prd_jax.aot.chips import Chip
from prd_jax.aot.hlo_cost import Cost

BOUNDS = ("FLOPs", "HBM", "ICI")


def bound(cost: Cost, chip: Chip) -> Tuple[float, str]:
    """(seconds, the bound that sets them) for one device running `cost` on `chip`."""
    ici = cost.ici_bytes / chip.ici_bandwidth if chip.ici_bandwidth else 0.0
    terms = (cost.flops / chip.peak_flops, cost.bytes_accessed / chip.hbm_bandwidth, ici)
    i = max(range(3), key=lambda j: terms[j])
    return terms[i], BOUNDS[i]


@dataclasses.dataclass(frozen=True)
class Phase:
    """Steps of a sampler call that decode over one cache size (`sampling.cache_windows`)."""

    slots: int  # cache slots per row (prompt + generation slots of this size)
    steps: int
    cost: Cost
    step_seconds: float
    bound: str


@dataclasses.dataclass(frozen=True)
class DecodeEstimate:
    """One sampler call's decode steps, read from their compiled programs: one per cache size
    the call grows through (one when `sampling.cache_window` is 0), every row to its budget."""

    name: str
    rows: int  # rows in flight per step (all chips)
    chips: int
    phases: Tuple[Phase, ...]
    analytic_tok_s: float  # `estimate.decode_step_seconds`' figure (full cache), per chip

    @property
    def steps(self) -> int:
        return sum(p.steps for p in self.phases)

    @property
    def step_seconds(self) -> float:
        """The mean step time over the call's steps."""
        return sum(p.steps * p.step_seconds for p in self.phases) / self.steps

    @property
    def bound(self) -> str:
        """The bound of the phases that take most of the call's time."""
        time = {b: sum(p.steps * p.step_seconds for p in self.phases if p.bound == b) for b in BOUNDS}
        return max(BOUNDS, key=lambda b: time[b])

    @property
    def cost(self) -> Cost:
        """Per-step costs averaged over the call's steps (the full cache's when there is one phase)."""
        w = [p.steps / self.steps for p in self.phases]
        kinds = self.phases[-1].cost.collective_bytes
        return Cost(sum(x * p.cost.flops for x, p in zip(w, self.phases)),
                    sum(x * p.cost.bytes_accessed for x, p in zip(w, self.phases)),
                    {k: sum(x * p.cost.collective_bytes[k] for x, p in zip(w, self.phases)) for k in kinds},
                    self.phases[-1].cost.loops)

    @property
    def tok_s_per_chip(self) -> float:
        return self.rows / self.chips / self.step_seconds if self.step_seconds else float("inf")

    @classmethod
    def over(cls, name: str, rows: int, chips: int, phases, chip: Chip, analytic_tok_s: float) -> "DecodeEstimate":
        """`phases`: `(slots, steps, cost)` per cache size, in decode order."""
        out = []
        for slots, steps, cost in phases:
            seconds, which = bound(cost, chip)
            out.append(Phase(slots, steps, cost, seconds, which))
        return cls(name, rows, chips, tuple(out), analytic_tok_s)


PLACEMENTS = ("colocated", "split")


def rl_step_seconds(tokens: float, tok_s_per_chip: float, train_seconds: float, chips: int, *,
                    placement: str = "colocated", sample_fraction: float = 0.5, off_policy_steps: int = 0,
                    reshard_seconds: float = 0.0) -> dict:
    """Modelled RL step (module docstring): `tokens` generated per step at `tok_s_per_chip`;
    `train_seconds` the train step's modelled time on all `chips`. Returns the rollout, train
    and step seconds.

    `placement` ("colocated" | "split"), `sample_fraction` (split: the share of chips that
    sample, 0 < f < 1) and `off_policy_steps` (0 | 1) are the config's
    `rollout.placement`, its device fraction and `rl.off_policy_steps`, passed in as plain values."""
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}; allowed: {PLACEMENTS}")
    if off_policy_steps not in (0, 1):
        raise ValueError(f"off_policy_steps={off_policy_steps}; allowed: 0, 1")
    if placement == "colocated":
        sampling, training = chips, chips
    else:
        if not 0 < sample_fraction < 1:
            raise ValueError(f"sample_fraction={sample_fraction}: split placement needs 0 < fraction < 1")
        sampling = max(1, round(sample_fraction * chips))
        training = chips - sampling
        if training < 1:
            raise ValueError(f"sample_fraction={sample_fraction} of {chips} chips leaves none to train")
    rollout = tokens / (tok_s_per_chip * sampling)
    train = train_seconds * chips / training
    overlap = placement == "split" and off_policy_steps == 1
    step = (max(rollout, train) if overlap else rollout + train) + reshard_seconds
    return {"rollout_seconds": rollout, "train_seconds": train, "step_seconds": step,
            "sampling_chips": sampling, "training_chips": training}
