"""RL's forward over the step's batch (`train.policy_logp`): the proximal log-probabilities of
the decoupled loss and the KL reference, in the update's microbatches. Against the plain
forward of the whole batch; its program in `prd-jax compile` and its time in `--estimate`."""

import importlib.util
import os

import jax
import numpy as np
import pytest

from prd_jax.aot import programs as PG
from prd_jax.aot.chips import parse_target
from prd_jax.aot.hlo_cost import Cost
from prd_jax.aot.roofline import rl_step_seconds
from prd_jax.aot.throughput import Estimate, TrainEstimate
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.mesh import make_mesh
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.model.decoder import forward, init_params
from prd_jax.model.weights import param_shardings
from prd_jax.train.losses import token_logprobs
from prd_jax.train.policy_logp import PolicyLogp, microbatches, micro_shapes

ROOT = os.path.join(os.path.dirname(__file__), "..")
RL_TINY = os.path.join(ROOT, "configs", "rl", "tiny.py")
HAS_LIBTPU = importlib.util.find_spec("libtpu") is not None


def _batch(rows, width, vocab, seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(2, width + 1, rows)
    inputs = rng.integers(1, vocab, (rows, width)).astype(np.int32)
    positions = np.tile(np.arange(width, dtype=np.int32), (rows, 1))
    segment_ids = (positions < lengths[:, None]).astype(np.int32)  # right padding is segment 0
    targets = np.where(segment_ids > 0, np.roll(inputs, -1, axis=1), 0).astype(np.int32)
    return dict(inputs=inputs, positions=positions, segment_ids=segment_ids, targets=targets)


def test_microbatch_count_falls_back_to_one_where_it_does_not_divide():
    assert microbatches(16, 4) == 4 and microbatches(16, 3) == 1 and microbatches(16, 0) == 1
    assert {k: s.shape for k, s in micro_shapes(16, 5, 4).items()} == {
        k: (4, 4, 5) for k in ("inputs", "positions", "segment_ids", "targets")}


@pytest.mark.parametrize("spec,accum", [("fsdp=4", 4), ("data=2,tensor=2", 2), ("fsdp=2,tensor=2", 3)])
def test_microbatched_forward_equals_the_whole_batch_forward(spec, accum):
    cfg = NAMED_CONFIGS["tiny"].replace(dtype="float32")
    mesh = make_mesh(spec, jax.devices()[:4])
    params = jax.jit(lambda: init_params(cfg, jax.random.key(1)), out_shardings=param_shardings(cfg, mesh))()
    rows, width = 8, 12
    batch = _batch(rows, width, cfg.vocab_size)
    fn = PolicyLogp(cfg, mesh, rows, width, accum)
    got = fn(params, batch)
    whole = np.asarray(token_logprobs(forward(cfg, params, batch["inputs"], batch["positions"],
                                              segment_ids=batch["segment_ids"])[0], batch["targets"]))
    assert got.shape == (rows, width) and got.dtype == np.float32
    live = batch["segment_ids"] > 0
    np.testing.assert_allclose(got[live], whole[live], atol=2e-5, rtol=1e-5)
    assert np.all(got[live] < 0)
    with pytest.raises(ValueError, match="batch is 4 x 12; this forward was built for 8 x 12"):
        fn(params, {k: v[:4] for k, v in batch.items()})


def _rl(*overrides):
    return apply_overrides(load_config(RL_TINY), ["--config.mesh=fsdp=4"] + list(overrides))


def _names(config):
    from prd_jax.aot.report import tokenizer_for
    tok, _ = tokenizer_for(config)
    mesh = make_mesh("fsdp=4", jax.devices()[:4])
    progs = PG.training_programs(config, PG.model_config(config), mesh, tok, parse_target("v5e:2x2").chip)
    return [p.name for p in progs]


@pytest.mark.parametrize("overrides,present", [
    ((), False),
    (("--config.sampling.kv_cache_dtype=float8_e4m3fn",), True),
    (("--config.rl.kl_coef=0.01",), True),
    (("--config.rl.decoupled_loss=on",), True),
])
def test_the_forward_is_a_program_where_the_run_needs_it(overrides, present):
    names = _names(_rl(*overrides))
    assert ("rl.policy_logp" in names) is present
    assert names[0] == "train_step" and "rl.rollout" in names


def test_the_estimate_counts_the_forward_in_the_update():
    cost = Cost(flops=0.0, bytes_accessed=0.0, collective_bytes={})
    train, fwd = TrainEstimate(cost, 0.0, 80.0, "FLOPs"), TrainEstimate(cost, 0.0, 20.0, "FLOPs")
    est = Estimate([], train=train, forward=fwd, rollout_tokens=1e6, rollout_seconds=100.0, chips=4, rollout_chips=4)
    assert est.update_seconds == 100.0
    for placement, off in (("colocated", 0), ("split", 0), ("split", 1)):
        assert est.step(placement, 0.5, off) == rl_step_seconds(1e6, est.rollout_tok_s_per_chip, 100.0, 4,
                                                                placement=placement, off_policy_steps=off)
    # colocated: rollout 1e6 / (2500 tok/s x 4) = 100 s, plus 80 + 20 s
    assert est.step()["step_seconds"] == pytest.approx(200.0)


@pytest.mark.skipif(not HAS_LIBTPU, reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
@pytest.mark.slow
def test_the_forward_compiles_for_a_tpu_in_microbatches():
    from prd_jax.aot.report import compile_all

    config = _rl("--config.rl.kl_coef=0.01")
    (row,) = compile_all(config, parse_target("v5e:2x2"), only=["rl.policy_logp"])
    assert row.name == "rl.policy_logp" and row.fits and row.arguments > 0 and row.flops > 0
    accum = int(config.grad_accum_steps)
    assert f"{microbatches(row_count(config), accum)} microbatches" in row.detail


def row_count(config):
    from prd_jax.train.rl import batch_rows
    from prd_jax.train.rl_config import RLConfig
    return batch_rows(RLConfig.from_config(config))
