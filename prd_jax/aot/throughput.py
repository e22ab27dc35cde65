"""`prd-jax compile --estimate`: decode tok/s per chip and the RL step's time, read from compiled programs.

For each distinct sampler call of a config (RL rollouts, operator and verifier calls, eval
operators' calls) one decode step is compiled (`aot.decode_step`) per cache size the call
decodes through (`sampling.cache_window`) and its per-device cost
(`aot.hlo_cost`) is set against the chip (`aot.roofline.bound`): step time, the bound that
sets it, tok/s per chip, beside the analytic figure (`estimate.decode_tok_s_per_chip`).

Training configs also compile the train step. Its program loops (gradient accumulation, the
scanned layer stack), and XLA counts a loop body once, so its FLOPs term is the larger of
the cost analysis' and the analytic count (`estimate.train_flops`); its collectives are
counted with their loops' trip counts. RL configs with the decoupled loss or a KL term add the
forward over the step's batch (`rl.policy_logp`), estimated alike and counted in the update's
time. The RL step's rollout time is the decode time of
every sampler call of one step (each row to its budget, prefill left out): per call,
row chunks x `max_new_tokens` x the step time of its program.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from typing import List, Optional

from prd_jax.aot import estimate as E
from prd_jax.aot import programs as PG
from prd_jax.aot.chips import Target
from prd_jax.aot.decode_step import abstract_weights, decode_step_lowered, rows_in_flight
from prd_jax.aot.hlo_cost import Cost
from prd_jax.aot.report import build
from prd_jax.aot.roofline import DecodeEstimate, bound, rl_step_seconds
from prd_jax.model.attention import compiling_for
from prd_jax.sampling import cache_windows

log = logging.getLogger(__name__)
STEP_PARTS = ("rl.rollout", "operator_rl.", "verifier.")  # the programs one RL step runs (their calls)


def decode_estimate(cfg, mesh, call: PG.SamplerCall, chip, weights=None) -> DecodeEstimate:
    """Compile the decode step of `call` at each cache size it decodes through (its last step's
    when `cache_window` is 0) and model it on `chip` (`weights`: `abstract_weights`, shared by calls)."""
    rows = rows_in_flight(call.prompts, call.scfg, mesh)
    t0 = time.perf_counter()
    gens = cache_windows(call.scfg.max_new_tokens, call.scfg.cache_window)
    phases, done = [], 0
    for gen in gens:  # the steps done..gen-1 write into a cache of prompt + gen slots
        compiled = decode_step_lowered(cfg, mesh, call.scfg, rows, call.prompt_len, gen, weights).compile()
        phases.append((call.prompt_len + gen, gen - done, Cost.of(compiled, mesh.devices.size)))
        done = gen
    shape = dataclasses.replace(call.shape(), max_rows=rows)
    analytic = E.decode_tok_s_per_chip(cfg, shape, PG.mesh3(mesh), chip)
    est = DecodeEstimate.over(call.name, rows, mesh.devices.size, phases, chip, analytic)
    log.info("decode steps of %s (%d cache sizes) compiled in %.1f s: %.0f tok/s per chip (%s-bound)", call.name,
             len(gens), time.perf_counter() - t0, est.tok_s_per_chip, est.bound)
    return est


@dataclasses.dataclass(frozen=True)
class TrainEstimate:
    cost: Cost
    analytic_flops: float  # per device
    seconds: float
    bound: str


def train_estimate(program: PG.Program, chip, devices: int) -> TrainEstimate:
    cost = Cost.of(program.lower().compile(), devices)
    per_device = program.flops / devices
    seconds, which = bound(dataclasses.replace(cost, flops=max(cost.flops, per_device)), chip)
    return TrainEstimate(cost, per_device, seconds, which)


@dataclasses.dataclass
class Estimate:
    decode: List[DecodeEstimate]
    train: Optional[TrainEstimate] = None
    forward: Optional[TrainEstimate] = None  # rl.policy_logp: the proximal / reference forward, per step
    rollout_tokens: float = 0.0  # generated per RL step (every row to its budget)
    rollout_seconds: float = 0.0  # their decode time on the rollout mesh
    chips: int = 0  # the training mesh's
    rollout_chips: int = 0  # the rollout mesh's (`config.rollout.mesh`; the training mesh by default)

    @property
    def has_step(self) -> bool:
        return self.train is not None and self.rollout_seconds > 0

    @property
    def rollout_tok_s_per_chip(self) -> float:
        """The step's decode rate over all its sampler calls (tokens / their decode time / chips)."""
        return self.rollout_tokens / (self.rollout_seconds * (self.rollout_chips or self.chips))

    @property
    def update_seconds(self) -> float:
        """The training chips' work per step: the train step and, where the config runs it, the forward."""
        return self.train.seconds + (self.forward.seconds if self.forward else 0.0)

    def step(self, placement: str = "colocated", sample_fraction: float = 0.5, off_policy_steps: int = 0) -> dict:
        """The RL step's modelled time (`roofline.rl_step_seconds`)."""
        return rl_step_seconds(self.rollout_tokens, self.rollout_tok_s_per_chip, self.update_seconds, self.chips,
                               placement=placement, sample_fraction=sample_fraction,
                               off_policy_steps=off_policy_steps)


def estimate_all(config, target: Target, only: Optional[List[str]] = None) -> Estimate:
    """Decode estimates of every distinct sampler call; for RL configs the train step and the step's rollout."""
    with compiling_for(target.chip.platform):  # the target's decode attention (a GPU's on simulated CPUs)
        return _estimate_all(config, target, only)


def _estimate_all(config, target: Target, only: Optional[List[str]]) -> Estimate:
    mesh, progs, _ = build(config, target)
    cfg = PG.model_config(config)
    chips = mesh.devices.size
    keep = lambda name: not only or any(name.startswith(o) for o in only)
    by_key, out, weights = {}, Estimate([], chips=chips), {}
    for p in progs:
        on = p.mesh or mesh  # RL's sampler programs run on the rollout mesh
        for c in p.calls:
            if c.name.endswith(".logits") or PG.call_key(c) in by_key or not keep(c.name):
                continue
            if on not in weights:
                weights[on] = abstract_weights(cfg, on)
            by_key[PG.call_key(c)] = decode_estimate(cfg, on, c, target.chip, weights[on])
            out.decode.append(by_key[PG.call_key(c)])
            if p.name.startswith(STEP_PARTS):
                out.rollout_chips = on.devices.size
    train = [p for p in progs if p.name == "train_step" and keep(p.name)]
    if train:
        out.train = train_estimate(train[0], target.chip, chips)
        forward = [p for p in progs if p.name == "rl.policy_logp" and keep(p.name)]
        if forward:
            out.forward = train_estimate(forward[0], target.chip, chips)
        for p in progs:
            if not p.name.startswith(STEP_PARTS):
                continue
            for c in p.calls:
                est = by_key.get(PG.call_key(c))
                if est is None:
                    continue
                s = c.shape()
                chunks = s.rows // est.rows
                out.rollout_tokens += s.rows * s.gen_len
                out.rollout_seconds += chunks * s.gen_len * est.step_seconds
    return out


def table(est: Estimate) -> str:
    lines = ["| program | rows in flight | cache sizes | TFLOPs/step | GB/step | collective GB/step | step ms | bound | "
             "tok/s per chip | analytic tok/s per chip |", "|---|---|---|---|---|---|---|---|---|---|"]
    for d in est.decode:
        lines.append(f"| {d.name} decode step | {d.rows} | {len(d.phases)} | {d.cost.flops / 1e12:.4g} | "
                     f"{d.cost.bytes_accessed / 1e9:.4g} | "
                     f"{d.cost.ici_bytes / 1e9:.4g} | {d.step_seconds * 1e3:.4g} | {d.bound} | "
                     f"{d.tok_s_per_chip:.4g} | {d.analytic_tok_s:.4g} |")
    for name, t in (("train_step", est.train), ("rl.policy_logp", est.forward)):
        if t:
            lines.append(f"| {name} | - | - | {max(t.cost.flops, t.analytic_flops) / 1e12:.4g} | "
                         f"{t.cost.bytes_accessed / 1e9:.4g} | {t.cost.ici_bytes / 1e9:.4g} | {t.seconds * 1e3:.4g} | "
                         f"{t.bound} | - | - |")
    return "\n".join(lines)


def step_table(est: Estimate, sample_fraction: float = 0.5) -> str:
    """The RL step's modelled time, colocated against split (one step off-policy and not)."""
    lines = [f"RL step: {est.rollout_tokens:.4g} tokens generated (every row to its budget), decode only, "
             f"{est.rollout_tok_s_per_chip:.4g} tok/s per chip over the step's sampler calls",
             "| placement | off_policy_steps | rollout s | train s | step s |", "|---|---|---|---|---|"]
    for placement, off in (("colocated", 0), ("split", 0), ("split", 1)):
        s = est.step(placement, sample_fraction, off)
        label = placement if placement == "colocated" else f"split ({s['sampling_chips']} sample, " \
                                                           f"{s['training_chips']} train)"
        lines.append(f"| {label} | {off} | {s['rollout_seconds']:.4g} | {s['train_seconds']:.4g} | "
                     f"{s['step_seconds']:.4g} |")
    return "\n".join(lines)


def as_json(est: Estimate, sample_fraction: float = 0.5) -> dict:
    doc = {"decode": [{"name": d.name, "rows": d.rows, "chips": d.chips, "flops": d.cost.flops,
                       "bytes_accessed": d.cost.bytes_accessed, "collective_bytes": d.cost.collective_bytes,
                       "step_seconds": d.step_seconds, "bound": d.bound, "tok_s_per_chip": d.tok_s_per_chip,
                       "analytic_tok_s_per_chip": d.analytic_tok_s,
                       "phases": [{"slots": p.slots, "steps": p.steps, "bytes_accessed": p.cost.bytes_accessed,
                                   "step_seconds": p.step_seconds, "bound": p.bound} for p in d.phases]}
                      for d in est.decode]}
    for name, t in (("train_step", est.train), ("rl.policy_logp", est.forward)):
        if t:
            doc[name] = {"flops": t.cost.flops, "analytic_flops": t.analytic_flops,
                         "bytes_accessed": t.cost.bytes_accessed, "collective_bytes": t.cost.collective_bytes,
                         "seconds": t.seconds, "bound": t.bound}
    if est.has_step:
        doc["rl_step"] = {"rollout_tokens": est.rollout_tokens, "sample_fraction": sample_fraction,
                          "rollout_tok_s_per_chip": est.rollout_tok_s_per_chip,
                          **{f"{p}_off{o}": est.step(p, sample_fraction, o)
                             for p, o in (("colocated", 0), ("split", 0), ("split", 1))}}
    return doc
