"""Every program a config runs, as lowerable functions with abstract (sharded) arguments.

- training configs (`config.stage` sft / rl): the accumulated train step (`train.step`);
- RL with the decoupled loss or a KL term: the forward over the step's batch
  (`rl.policy_logp`, `train.policy_logp`);
- RL: the standard rollout sampler call, the operator-RL PDR round (the eval operator's
  whole program, as `OperatorRollouts` runs it), each distinct sampler call inside it
  (draft, summary, refine, judges), and the V1 verifier rows;
- eval configs (`config.operators`): each distinct sampler call of the operators (at the
  largest budget of operators that differ only in it), and with `whole_operators` each
  operator's whole program as `evaluate` runs it.

Sampler calls inside an operator are found by tracing the operator with a recording LM
(`jax.eval_shape`: nothing runs) that notes each call's name, prompt shape and sampling
config; each distinct one is then lowered as the sampler program alone.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from typing import Any, Callable, List, Optional

import jax
import jax.numpy as jnp
from jax.sharding import NamedSharding, PartitionSpec as P

from prd_jax.aot import estimate as E
from prd_jax.aot.collectives import reshard_lowered
from prd_jax.eval_config import EvalConfig
from prd_jax.eval_setup import EvalSetup
from prd_jax.mesh import batch_size_multiple
from prd_jax.model.config import NAMED_CONFIGS, ModelConfig
from prd_jax.model.decoder import param_shapes
from prd_jax.model.weights import param_shardings
from prd_jax.operators.call_budget import settings
from prd_jax.operators.core import Problems
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.registry import operator_for
from prd_jax.operators.runner import run
from prd_jax.sampling import SamplingConfig, generate
from prd_jax.train.config import TrainConfig
from prd_jax.train.policy_logp import lowered as logp_lowered, microbatches
from prd_jax.train.rl import RLStage
from prd_jax.train.sft import BATCH_KEYS, sft_loss_fn
from prd_jax.train.state import abstract_state, state_shardings
from prd_jax.train.step import batch_shardings, minibatch_updates, train_step
from prd_jax.train.trainer import optimizer_from


@dataclasses.dataclass
class Program:
    """One compiled program: `lower()` -> `jax.stages.Lowered`; analytic FLOPs, time and memory."""

    name: str
    lower: Callable
    flops: float
    est_seconds: float
    analytic_bytes: Optional[float] = None  # per device: params/state + KV cache (None: not modelled)
    detail: str = ""
    knob: str = ""  # the config field that shrinks this program's memory
    calls: tuple = ()  # the sampler calls it makes, in order (`prd-jax compile --estimate` reads them)
    mesh: Any = None  # the mesh it runs on when not the config's (RL's rollout mesh, `config.rollout`)


def mesh3(mesh) -> E.Mesh3:
    return E.Mesh3(mesh.shape["data"], mesh.shape["fsdp"], mesh.shape["tensor"])


def _abstract_params(cfg: ModelConfig, mesh):
    return jax.tree.map(lambda s, sh: jax.ShapeDtypeStruct(s.shape, s.dtype, sharding=sh),
                        param_shapes(cfg), param_shardings(cfg, mesh))


def _batch_struct(shape, dtype, mesh):
    spec = P(("data", "fsdp")) if shape[0] % batch_size_multiple(mesh) == 0 else P()
    return jax.ShapeDtypeStruct(shape, dtype, sharding=NamedSharding(mesh, P(*spec, *([None] * (len(shape) - 1)))))


def _keys(n: int, mesh):
    return _batch_struct((n,), jax.eval_shape(lambda: jax.random.key(0)).dtype, mesh)


# ----------------------------------------------------------------------------- sampler calls

@dataclasses.dataclass(frozen=True)
class SamplerCall:
    name: str
    prompts: int
    prompt_len: int
    scfg: object  # sampling.SamplingConfig

    def shape(self) -> E.SamplerShape:
        return E.SamplerShape(self.prompts, self.prompt_len, self.scfg.num_samples, self.scfg.max_new_tokens,
                              self.scfg.max_rows)


def sampler_program(cfg: ModelConfig, mesh, call: SamplerCall, chip, pad_id: int = 0, knob: str = "") -> Program:
    """The sampler (`sampling.generate`, prefill + decode loop) for one call's shapes."""
    def lower():
        fn = jax.jit(functools.partial(generate, cfg, gen_len=call.scfg.max_new_tokens, pad_id=pad_id,
                                       fanout=True, mesh=mesh, scfg=call.scfg))
        return fn.lower(_abstract_params(cfg, mesh), _batch_struct((call.prompts, call.prompt_len), jnp.int32, mesh),
                        _batch_struct((call.prompts,), jnp.int32, mesh), _keys(call.prompts, mesh),
                        jax.ShapeDtypeStruct((), jnp.int32))

    s, m = call.shape(), mesh3(mesh)
    kv = E.kv_cache_bytes_per_device(cfg, s, m)
    detail = (f"{s.prompts} prompts x {s.samples} = {s.rows} rows ({s.rows_in_flight} in flight), prompt {s.prompt_len} "
              f"+ gen {s.gen_len}; KV cache {kv / 1e9:.1f} GB/device")
    return Program(call.name, lower, E.sampler_flops(cfg, s), E.sampler_seconds(cfg, s, m, chip),
                   E.params_bytes_per_device(cfg, m) + kv, detail, knob, (call,))


class RecordingLM:
    """The model interface operators call, recording each call's shapes (used under eval_shape)."""

    def __init__(self, lm, calls: list):
        self.lm, self.calls = lm, calls

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="model call", live=None):
        self.calls.append(SamplerCall(name, prompts.shape[0], prompts.shape[1], scfg))
        return self.lm.generate(prompts, lengths, keys, scfg, fanout, name)

    def next_logits(self, prompts, lengths, name="model call", live=None):
        self.calls.append(SamplerCall(name + ".logits", prompts.shape[0], prompts.shape[1],
                                      SamplingConfig(1, max_rows=self.lm.max_rows)))
        return self.lm.next_logits(prompts, lengths, name)


def operator_calls(cfg: ModelConfig, mesh, spec, ctx, problems_shape, pad_id: int) -> List[SamplerCall]:
    """The sampler calls one operator makes on `problems_shape = (B, width)` (traced, not run)."""
    calls: list = []
    b, w = problems_shape

    def go(params, problems, keys):
        return run(RecordingLM(ModelLM(params, cfg, pad_id, mesh, ctx.sampling.max_rows), calls), problems, keys,
                   spec, ctx)

    jax.eval_shape(go, _abstract_params(cfg, mesh), _problems(b, w, mesh), _keys(b, mesh))
    return calls


def _problems(b: int, width: int, mesh):
    return Problems(_batch_struct((b, width), jnp.int32, mesh), _batch_struct((b,), jnp.int32, mesh),
                    _batch_struct((b, 64), jnp.int32, mesh), _batch_struct((b,), jnp.int32, mesh))


def operator_program(name: str, cfg: ModelConfig, mesh, spec, ctx, problems_shape, pad_id: int,
                     calls: List[SamplerCall], chip) -> Program:
    """The whole operator (every round, one jitted program, as eval and operator RL run it)."""
    b, w = problems_shape

    def lower():
        fn = jax.jit(lambda params, problems, keys: run(ModelLM(params, cfg, pad_id, mesh, ctx.sampling.max_rows),
                                                        problems, keys, spec, ctx))
        return fn.lower(_abstract_params(cfg, mesh), _problems(b, w, mesh), _keys(b, mesh))

    m = mesh3(mesh)
    shapes = [c.shape() for c in calls if not c.name.endswith(".logits")]
    flops = sum(E.sampler_flops(cfg, s) for s in shapes)
    secs = sum(E.sampler_seconds(cfg, s, m, chip) for s in shapes)
    kv = max([E.kv_cache_bytes_per_device(cfg, s, m) for s in shapes] or [0.0])
    return Program(name, lower, flops, secs, E.params_bytes_per_device(cfg, m) + kv,
                   f"{len(calls)} model calls on {b} problems of width {w}", "sampling.max_rows", tuple(calls))


def call_key(c: SamplerCall) -> tuple:
    """Calls with equal keys compile to the same program: (kind, prompts, prompt width, sampling config)."""
    return (c.name.endswith(".logits"), c.prompts, c.prompt_len, c.scfg)


def distinct_calls(calls: List[SamplerCall]) -> List[SamplerCall]:
    """The first call of each `call_key`; a forced-rating read (`.logits`, one forward) is its own kind."""
    seen, out = set(), []
    for c in calls:
        key = call_key(c)
        if key in seen:
            continue
        seen.add(key)
        out.append(c)
    return out


def logits_program(cfg: ModelConfig, mesh, call: SamplerCall, chip, pad_id: int = 0, knob: str = "") -> Program:
    """A judge's forced-rating read (`ModelLM.next_logits`: a prefill, in row chunks of `max_rows`)."""
    def lower():
        fn = jax.jit(lambda params, prompts, lengths: ModelLM(params, cfg, pad_id, mesh, call.scfg.max_rows)
                     .next_logits(prompts, lengths, call.name))
        return fn.lower(_abstract_params(cfg, mesh), _batch_struct((call.prompts, call.prompt_len), jnp.int32, mesh),
                        _batch_struct((call.prompts,), jnp.int32, mesh))

    s, m = E.SamplerShape(call.prompts, call.prompt_len, 1, 0, call.scfg.max_rows), mesh3(mesh)
    kv = E.kv_cache_bytes_per_device(cfg, s, m)
    detail = f"{s.prompts} rows ({s.rows_in_flight} in flight), prompt {s.prompt_len}; KV cache {kv / 1e9:.1f} GB/device"
    return Program(call.name, lower, E.sampler_flops(cfg, s), E.sampler_seconds(cfg, s, m, chip),
                   E.params_bytes_per_device(cfg, m) + kv, detail, knob, (call,))


def call_programs(cfg: ModelConfig, mesh, calls: List[SamplerCall], chip, pad_id: int, knob: str) -> List[Program]:
    """One program per distinct call: the sampler, or the rating read for `.logits` calls."""
    return [(logits_program if c.name.endswith(".logits") else sampler_program)(cfg, mesh, c, chip, pad_id, knob)
            for c in distinct_calls(calls)]


# ----------------------------------------------------------------------------- training

def train_program(config, cfg: ModelConfig, mesh, abstract_batch: dict, loss_fn, chip, updates: int = 1,
                  minibatches: int = 1) -> Program:
    """The accumulated optimizer step exactly as `trainer.fit` compiles it (donated state)."""
    accum = TrainConfig.from_config(config).grad_accum_steps
    rows, width = next(iter(abstract_batch.values())).shape[:2]
    if rows % accum:
        raise ValueError(f"config.grad_accum_steps={accum} does not divide the {rows} rows of a step")
    micro = jax.tree.map(lambda s: jax.ShapeDtypeStruct((accum, s.shape[0] // accum, *s.shape[1:]), s.dtype),
                         abstract_batch)

    def lower():
        optimizer, schedule = optimizer_from(config)
        step_fn = minibatch_updates(functools.partial(train_step, loss_fn=loss_fn, optimizer=optimizer,
                                                      schedule=schedule), minibatches, updates)
        sh = state_shardings(cfg, optimizer, mesh)
        replicated = NamedSharding(mesh, P())
        jitted = jax.jit(step_fn, in_shardings=(sh, batch_shardings(micro, mesh)), out_shardings=(sh, replicated),
                         donate_argnums=0)
        return jitted.lower(abstract_state(cfg, optimizer, mesh), micro)

    m = mesh3(mesh)
    return Program("train_step", lower, E.train_flops(cfg, rows, width, updates),
                   E.train_seconds(cfg, rows, width, m, chip, updates), E.train_state_bytes_per_device(cfg, m),
                   f"{rows} rows x {width} tokens, {accum} microbatches of {rows // accum}", "grad_accum_steps")


def policy_logp_program(config, cfg: ModelConfig, mesh, rows: int, width: int, chip) -> Program:
    """RL's forward over the step's batch for the proximal (`rl.decoupled`) or reference
    (`rl.kl_coef`) log-probabilities, in the update's microbatches (`train.policy_logp`)."""
    accum = TrainConfig.from_config(config).grad_accum_steps
    a = microbatches(rows, accum)
    flops = E.forward_flops(cfg, rows, width)
    return Program("rl.policy_logp", lambda: logp_lowered(cfg, mesh, _abstract_params(cfg, mesh), rows, width, accum),
                   flops, flops / mesh.devices.size / chip.peak_flops, E.params_bytes_per_device(cfg, mesh3(mesh)),
                   f"{rows} rows x {width} tokens, {a} microbatches of {rows // a}", "grad_accum_steps")


def model_config(config) -> ModelConfig:
    """The ModelConfig a training or eval config runs (named config + overrides / dtype)."""
    if isinstance(config.get("model"), str):  # eval config: as `evaluate` loads it

        name, over = config.model, EvalConfig.from_config(config).model_overrides()
    else:
        model = TrainConfig.from_config(config).model
        name, over = model.name, model.overrides
    if name not in NAMED_CONFIGS:
        raise ValueError(f"model {name!r} unknown; allowed: {sorted(NAMED_CONFIGS)}")
    return NAMED_CONFIGS[name].replace(**over)


def reshard_program(cfg: ModelConfig, mesh, rollout) -> Program:
    """The params' reshard from the training layout into the rollout layout (`train.rollout_mesh`), once per step."""
    return Program("rl.reshard", lambda: reshard_lowered(cfg, mesh, rollout), 0.0, 0.0,
                   E.params_bytes_per_device(cfg, mesh3(rollout)), "the policy's params into the rollout layout, "
                   "once per RL step", "rollout.mesh")


def training_programs(config, cfg, mesh, tokenizer, chip, devices=None) -> List[Program]:
    """The train step on `mesh`; RL's sampler programs on the rollout mesh (`config.rollout`; `devices`:
    the target's, which the split rule divides), and the reshard into it when it has the same devices."""
    config = TrainConfig.from_config(config)
    if config.stage == "sft":
        shape = (config.batch_size, config.data.seq_len)
        batch = {k: jax.ShapeDtypeStruct(shape, jnp.float32 if k == "weights" else jnp.int32) for k in BATCH_KEYS}
        return [train_program(config, cfg, mesh, batch, sft_loss_fn(cfg, mesh), chip)]

    stage = RLStage(config, cfg, tokenizer, mesh, load_data=False, devices=devices)
    rl, train_mesh = stage.rl, mesh
    progs = [train_program(config, cfg, mesh, stage.abstract_batch(), stage.loss_fn(), chip, rl.updates_per_batch,
                           rl.minibatches)]
    if rl.decoupled or rl.kl_coef:  # the proximal / reference forward over the step's batch
        progs.append(policy_logp_program(config, cfg, mesh, stage.rows, stage.width, chip))
    mesh, trained = stage.rollout_mesh, len(progs)  # the rollouts' programs below sample on it
    if mesh is not train_mesh and set(mesh.devices.flat) == set(train_mesh.devices.flat):
        progs.append(reshard_program(cfg, train_mesh, mesh))  # split: a transfer between device sets, no program
    if stage.num_standard:
        scfg = rl.sampler_config(rl.max_new_tokens, rl.samples_per_prompt, tokenizer.stop_ids)
        call = SamplerCall("rl.rollout", stage.num_standard, rl.max_prompt_tokens, scfg)
        progs.append(sampler_program(cfg, mesh, call, chip, tokenizer.pad_id, "sampling.max_rows"))
    if stage.operator:
        op = stage.operator
        shape = (stage.num_operator * rl.samples_per_prompt, rl.problem_tokens)
        calls = operator_calls(cfg, mesh, op.spec, op.ctx, shape, tokenizer.pad_id)
        name = f"operator_rl.{operator_for(op.spec).name}_round"  # the registered name: pdr_round, ...
        progs.append(operator_program(name, cfg, mesh, op.spec, op.ctx, shape, tokenizer.pad_id, calls, chip))
        progs += call_programs(cfg, mesh, calls, chip, tokenizer.pad_id, "sampling.max_rows")
    if stage.verifier:
        v = stage.verifier
        c = rl.verifier_candidate_max_tokens
        z = lambda w: (_batch_struct((v.rows, w), jnp.int32, mesh), _batch_struct((v.rows,), jnp.int32, mesh))
        prompts, _, _ = jax.eval_shape(v._generate_fn, _abstract_params(cfg, mesh), z(rl.problem_tokens), z(c), z(c),
                                       _keys(v.rows, mesh))

        scfg = rl.sampler_config(rl.verifier_max_new_tokens, 1, tokenizer.stop_ids)
        call = SamplerCall(f"verifier.{rl.verifier}", v.rows, prompts.shape[1], scfg)
        progs.append(sampler_program(cfg, mesh, call, chip, tokenizer.pad_id, "sampling.max_rows"))
    return progs[:trained] + [dataclasses.replace(p, mesh=mesh) for p in progs[trained:]]


def largest_budgets(specs: list) -> list:
    """One spec per group of specs equal in every setting but `budget.max_new_tokens`: the largest.

    Within a group every call has the same prompt shapes and only a longer generation
    (cache capacity, token buffers) at a larger budget, so the largest bounds the others."""
    best: dict = {}
    for spec in specs:
        key = (type(spec),) + tuple((name, value) for name, value, _ in settings(spec) if name != "max_new_tokens")
        if key not in best or spec.budget.max_new_tokens > best[key].budget.max_new_tokens:
            best[key] = spec
    return list(best.values())


@dataclasses.dataclass(frozen=True)
class EvalEstimate:
    """Whole-eval roofline: per operator, generated tokens (every row runs to its budget: an
    upper bound) and seconds (`estimate.sampler_seconds` summed over its calls), both times
    the number of (problem batch, sample) runs."""

    operator: str
    generated_tokens: float
    seconds: float


def eval_estimates(config, cfg, mesh, tokenizer, chip) -> List[EvalEstimate]:
    """Roofline estimate of an eval config, one row per operator (traced calls, nothing compiled).

    A tournament's judge batches run in one `lax.while_loop`, traced once as one batch of W
    calls per problem; its name carries the tournament's call budget B per problem
    (`judge.pairwise[B calls]`), so it counts B / W times: every budgeted call made (an upper
    bound, like the generated tokens). Forced-rating reads (one prefill each) are left out."""
    runs = -(-config.num_problems // config.batch_size) * config.k_samples
    m = mesh3(mesh)
    setup = eval_setup(config, tokenizer)

    def times(c: SamplerCall) -> float:
        budget = re.search(r"\[(\d+) calls\]$", c.name)
        return int(budget.group(1)) / (c.prompts / config.batch_size) if budget else 1.0

    out = []
    for spec in setup.specs():
        calls = [c for c in _eval_calls(setup, cfg, mesh, spec) if not c.name.endswith(".logits")]
        tokens = sum(times(c) * c.shape().rows * c.shape().gen_len for c in calls)
        secs = sum(times(c) * E.sampler_seconds(cfg, c.shape(), m, chip) for c in calls)
        out.append(EvalEstimate(spec.label, tokens * runs, secs * runs))
    return out


def eval_setup(config, tokenizer) -> EvalSetup:
    """The setup `evaluate` builds for `config` (task, prompt set, sampling), with no LM: nothing runs."""
    return EvalSetup.from_config(config).with_lm(None, tokenizer)


def _eval_calls(setup: EvalSetup, cfg, mesh, spec) -> List[SamplerCall]:
    ec = setup.config
    return operator_calls(cfg, mesh, spec, setup.context(spec), (ec.batch_size, ec.max_problem_tokens),
                          setup.tokenizer.pad_id)


def eval_programs(config, cfg, mesh, tokenizer, chip, whole_operators: bool = False) -> List[Program]:
    """Each distinct sampler call of the config's operators (at the largest budget of each
    group, `largest_budgets`) and, with `whole_operators`, each operator's whole program.

    The whole programs are off by default: they run the same calls one after another, so their
    memory is close to their largest call's, and they are slow to compile (docs/results/2026-11-30-aot-fit.md)."""
    setup = eval_setup(config, tokenizer)
    shape = (config.batch_size, config.max_problem_tokens)
    progs, all_calls = [], []
    for spec in largest_budgets(setup.specs()):
        calls = _eval_calls(setup, cfg, mesh, spec)
        if whole_operators:
            progs.append(operator_program(f"eval.{spec.label}", cfg, mesh, spec, setup.context(spec), shape,
                                          tokenizer.pad_id, calls, chip))
        all_calls += calls
    progs += call_programs(cfg, mesh, all_calls, chip, tokenizer.pad_id, "sampling.max_rows")
    return progs
