"""`prd-jax compile --estimate`: costs read from compiled programs, by hand (8 simulated CPU devices)."""

import importlib.util
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import pytest

from prd_jax.aot import estimate as E
from prd_jax.aot.chips import CHIPS, Chip, parse_target
from prd_jax.aot.decode_step import decode_step_lowered, rows_in_flight
from prd_jax.aot.hlo_cost import Cost, collectives, group_size, moved_bytes
from prd_jax.aot.roofline import bound, rl_step_seconds
from prd_jax.aot.throughput import estimate_all
from prd_jax.config_io import apply_overrides, load_config
from prd_jax.mesh import make_mesh
from prd_jax.model.config import NAMED_CONFIGS
from prd_jax.sampling import SamplingConfig

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _cost(fn, *args):
    ca = jax.jit(fn).lower(*args).compile().cost_analysis()
    return ca[0] if isinstance(ca, list) else ca


def test_cost_analysis_counts_a_loop_body_once():
    """Why the estimate compiles one decode step: a 10-trip loop reads as one trip."""
    w, x = jnp.zeros((256, 256)), jnp.zeros((64, 256))
    one = _cost(lambda w, x: jnp.tanh(x @ w), w, x)["flops"]
    assert one >= 2 * 64 * 256 * 256
    ten = [_cost(lambda w, x: jax.lax.fori_loop(0, 10, lambda i, x: jnp.tanh(x @ w), x), w, x)["flops"],
           _cost(lambda w, x: jax.lax.scan(lambda x, _: (jnp.tanh(x @ w), None), x, None, length=10)[0], w, x)["flops"]]
    assert all(one <= f < 1.01 * one for f in ten), (one, ten)


HLO = """HloModule m, num_partitions=8

%body (p: (s32[], f32[16])) -> (s32[], f32[16]) {
  %p = (s32[], f32[16]{0}) parameter(0)
  %x = f32[16]{0} get-tuple-element(%p), index=1
  %ar = f32[16]{0} all-reduce(%x), channel_id=2, replica_groups={{0,1,2,3},{4,5,6,7}}, to_apply=%add
  ROOT %t = (s32[], f32[16]{0}) tuple(%i, %ar)
}

%fused (xf: bf16[2,64]) -> bf16[16,64] {
  %xf = bf16[2,64]{1,0} parameter(0)
  ROOT %ag2 = bf16[16,64]{1,0} all-gather(%xf), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}
}

ENTRY %main (a: bf16[2,64], b: f32[8,32]) -> f32[8] {
  %a = bf16[2,64]{1,0} parameter(0)
  %b = f32[8,32]{1,0} parameter(1)
  %ag = bf16[16,64]{1,0} all-gather(%a), channel_id=1, replica_groups=[1,8]<=[8], dimensions={0}
  %f = bf16[16,64]{1,0} fusion(%a), kind=kCustom, calls=%fused
  %ags = (bf16[2,64]{1,0}, bf16[8,64]{1,0}) all-gather-start(%a), channel_id=3, replica_groups=mesh['x'=2,'y'=4], device_ids=([8]) {'y'}, dimensions={0}
  %agd = bf16[8,64]{1,0} all-gather-done(%ags)
  %rs = f32[4,32]{1,0} reduce-scatter(%b), channel_id=4, replica_groups={{0,1},{2,3},{4,5},{6,7}}, dimensions={0}
  %cp = f32[8,32]{1,0} collective-permute(%b), channel_id=5, source_target_pairs={{0,1},{1,0}}
  %w = (s32[], f32[16]{0}) while(%init), condition=%cond, body=%body, backend_config={"known_trip_count":{"n":"5"}}
  ROOT %r = f32[8]{0} slice(%b), slice={[0:8]}
}
"""


def test_collective_bytes_of_a_hand_written_module():
    """Sizes by hand; the fusion's all-gather shares channel 1 with %ag (one collective printed twice)."""
    got = sorted((c.kind, c.operand_bytes, c.group, c.times) for c in collectives(HLO, 8))
    assert got == sorted([("all-gather", 256.0, 8, 1), ("all-gather", 256.0, 4, 1), ("reduce-scatter", 1024.0, 2, 1),
                          ("collective-permute", 1024.0, 8, 1), ("all-reduce", 64.0, 4, 5)])
    cost = Cost.from_hlo(1.0, 2.0, HLO, 8)
    # all-gather (n-1) x operand: 7 x 256 + 3 x 256; reduce-scatter (n-1)/n: 512; permute: 1024;
    # all-reduce 2 (n-1)/n x 64 = 96, five loop trips
    assert cost.collective_bytes == {"all-gather": 2560.0, "reduce-scatter": 512.0, "collective-permute": 1024.0,
                                     "all-reduce": 480.0, "all-to-all": 0.0}
    assert cost.ici_bytes == 4576.0 and cost.loops == 1
    assert group_size("replica_groups={}", 16) == 16 and moved_bytes("all-to-all", 80.0, 4) == 60.0


def test_bound_names_the_largest_term():
    chip = Chip("test", peak_flops=100.0, hbm_bytes=0.0, hbm_bandwidth=10.0, platform="tpu", ici_bandwidth=1.0)
    mk = lambda f, b, c: Cost(f, b, {"all-gather": c})
    assert bound(mk(500.0, 20.0, 3.0), chip) == (5.0, "FLOPs")
    assert bound(mk(100.0, 70.0, 3.0), chip) == (7.0, "HBM")
    assert bound(mk(100.0, 20.0, 9.0), chip) == (9.0, "ICI")


def test_rl_step_time_by_hand():
    # 1000 tokens at 10 tok/s per chip on 10 chips: 10 s colocated; train 4 s on 10 chips
    assert rl_step_seconds(1000, 10.0, 4.0, 10)["step_seconds"] == 14.0
    split = rl_step_seconds(1000, 10.0, 4.0, 10, placement="split", sample_fraction=0.5)
    assert (split["rollout_seconds"], split["train_seconds"], split["step_seconds"]) == (20.0, 8.0, 28.0)
    overlap = rl_step_seconds(1000, 10.0, 4.0, 10, placement="split", sample_fraction=0.8, off_policy_steps=1)
    assert (overlap["rollout_seconds"], overlap["train_seconds"], overlap["step_seconds"]) == (12.5, 20.0, 20.0)
    for kw, match in [(dict(placement="both"), "placement='both'"), (dict(off_policy_steps=2), "off_policy_steps=2"),
                      (dict(placement="split", sample_fraction=1.0), "sample_fraction=1.0")]:
        with pytest.raises(ValueError, match=match):
            rl_step_seconds(1, 1.0, 1.0, 4, **kw)


def _step_cost(mesh_shape: str, rows=32, prompt=16, gen=32):
    cfg = NAMED_CONFIGS["tiny"]
    mesh = make_mesh(mesh_shape, jax.devices()[:8])
    compiled = decode_step_lowered(cfg, mesh, SamplingConfig(gen, num_samples=4), rows, prompt, gen).compile()
    return cfg, Cost.of(compiled, 8)


def test_decode_step_costs_against_the_model_shape():
    """Tiny model (fp32), 32 rows over 8 data shards, 16 + 32 slots: per device 4 rows."""
    cfg, cost = _step_cost("data=8")
    rows, slots = 4, 48
    # matmuls: 2 x (params used as matmul weights + the tied head) per row; attention 4 L H Dh per slot
    hand_flops = rows * (2 * (E.matmul_params(cfg) + E.head_params(cfg)) + 4 * 2 * 4 * 16 * slots)
    assert hand_flops == 821_760
    assert hand_flops <= cost.flops <= 1.15 * hand_flops  # softmax, norms and the sampler add elementwise work
    params = cfg.num_params() * 4  # replicated over data
    kv = rows * 2 * 2 * 2 * 16 * slots * 4  # rows x layers x (K, V) x kv heads x head_dim x slots x fp32
    assert (params, kv) == (361_728, 98_304)
    assert params + kv <= cost.bytes_accessed <= 3 * (params + kv)
    assert cost.ici_bytes == 0  # nothing is sharded but the rows


def test_decode_step_gathers_fsdp_params_every_step():
    """fsdp=4: each step all-gathers the sharded weights ((n-1)/n of them per device); the
    embedding table may be gathered twice (lookup and tied head)."""
    cfg, cost = _step_cost("data=2,fsdp=4")
    norms = 2 * 2 * cfg.hidden + cfg.hidden  # replicated
    sharded = (cfg.num_params() - norms) * 4
    embed = cfg.vocab_size * cfg.hidden * 4
    assert 0.75 * sharded <= cost.collective_bytes["all-gather"] <= 0.75 * (sharded + embed)


def test_rows_in_flight_follow_the_row_chunks():
    mesh = make_mesh("data=8", jax.devices()[:8])
    assert rows_in_flight(64, SamplingConfig(8, num_samples=4, max_rows=64), mesh) == 64  # 4 chunks of 16 prompts
    assert rows_in_flight(64, SamplingConfig(8, num_samples=4), mesh) == 256


@pytest.mark.slow
def test_cli_prints_the_estimate():
    """`prd-jax compile --estimate --json` on the tiny RL config for 8 simulated H200s (a fresh process:
    the command sets the CPU device count before JAX starts)."""
    env = dict(os.environ, JAX_PLATFORMS="cpu")
    proc = subprocess.run([sys.executable, "-m", "prd_jax.cli", "compile", "--config", "configs/rl/tiny.py",
                           "--topology", "h200:8", "--estimate", "--json"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    assert "| rl.rollout decode step |" in out and "tok/s per chip" in out and "analytic tok/s per chip" in out
    doc = json.loads(out.strip().splitlines()[-1])
    (d,) = doc["decode"]
    assert d["bound"] in ("HBM", "ICI", "FLOPs") and d["tok_s_per_chip"] > 0
    chip = CHIPS["h200"]
    step = max(d["flops"] / chip.peak_flops, d["bytes_accessed"] / chip.hbm_bandwidth,
               sum(d["collective_bytes"].values()) / chip.ici_bandwidth)
    assert d["step_seconds"] == pytest.approx(step)
    assert d["tok_s_per_chip"] == pytest.approx(d["rows"] / 8 / step)
    steps = doc["rl_step"]
    assert steps["split_off1"]["step_seconds"] == pytest.approx(
        max(steps["split_off1"]["rollout_seconds"], steps["split_off1"]["train_seconds"]))
    assert steps["colocated_off0"]["step_seconds"] == pytest.approx(
        steps["colocated_off0"]["rollout_seconds"] + steps["colocated_off0"]["train_seconds"])
    # the step's rollout rate: its tokens over the colocated rollout time on all 8 chips
    assert steps["rollout_tok_s_per_chip"] == pytest.approx(
        steps["rollout_tokens"] / steps["colocated_off0"]["rollout_seconds"] / 8)


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
@pytest.mark.slow
def test_decode_step_for_a_tpu_topology():
    """Tiny model, one decode step compiled for v5e:2x2 with an fsdp=4 mesh: per-device FLOPs
    near the hand count, and the fsdp-sharded weights all-gathered in the step (XLA:TPU may
    gather them cast to bf16 for its bf16 matmul passes, and the tied embedding twice:
    lookup and head). XLA:TPU prints one such collective in several fusions under one
    channel; counted once, the bytes stay within the bounds."""
    from prd_jax.aot.report import target_devices
    from prd_jax.aot.chips import parse_target

    cfg = NAMED_CONFIGS["tiny"]
    mesh = make_mesh("fsdp=4", target_devices(parse_target("v5e:2x2")))
    compiled = decode_step_lowered(cfg, mesh, SamplingConfig(32, num_samples=4), 32, 16, 32).compile()
    cost = Cost.of(compiled, 4)
    hand_flops = 8 * (2 * (E.matmul_params(cfg) + E.head_params(cfg)) + 4 * 2 * 4 * 16 * 48)  # 8 rows per device
    assert hand_flops <= cost.flops <= 1.15 * hand_flops
    norms = 2 * 2 * cfg.hidden + cfg.hidden
    sharded, embed = cfg.num_params() - norms, cfg.vocab_size * cfg.hidden
    assert 0.75 * 2 * sharded <= cost.collective_bytes["all-gather"] <= 0.75 * 4 * (sharded + embed)
    assert cost.bytes_accessed >= cfg.num_params() * 4 / 4 + 8 * 2 * 2 * 2 * 16 * 48 * 4  # params share + KV


def test_rollout_estimate_reads_the_rollout_mesh():
    """Under an `fsdp=4` training mesh, `rollout.mesh=data=4` puts RL's decode step on the rollout
    layout: its estimate moves no collective bytes (weights whole on each chip), where the
    training layout's step all-gathers the sharded weights."""
    def rollout(*extra):
        config = apply_overrides(load_config(os.path.join(ROOT, "configs/rl/tiny.py")),
                                 ["--config.mesh=fsdp=4", *extra])
        est = estimate_all(config, parse_target("h200:4"), only=["rl.rollout"])
        (d,) = est.decode
        return d, est

    (train_layout, _), (rollout_layout, est) = rollout(), rollout("--config.rollout.mesh=data=4")
    assert train_layout.cost.ici_bytes > 0 and rollout_layout.cost.ici_bytes == 0
    assert est.rollout_chips == 4 and rollout_layout.chips == 4


def test_a_growing_cache_is_estimated_per_cache_size():
    """`sampling.cache_window`: the call's decode step is compiled at each cache size it grows
    through; the steps add up to the budget, bytes per step grow with the slots, and the call's
    step time is the step-weighted mean of the sizes' (by hand), below the full cache's."""
    def rollout(*extra):
        config = apply_overrides(load_config(os.path.join(ROOT, "configs/rl/tiny.py")), list(extra))
        (d,) = estimate_all(config, parse_target("h200:4"), only=["rl.rollout"]).decode
        return d, config

    (full, config), (grown, _) = rollout(), rollout("--config.sampling.cache_window=8")
    gen = config.rl.max_new_tokens
    assert len(full.phases) == 1 and full.phases[0].steps == gen
    assert [p.steps for p in grown.phases] == [min(8, gen - g) for g in range(0, gen, 8)]
    assert [p.slots - grown.phases[0].slots for p in grown.phases] == [min(g + 8, gen) - 8 for g in range(0, gen, 8)]
    assert grown.phases[-1].slots == full.phases[0].slots
    assert [p.cost.bytes_accessed for p in grown.phases] == sorted(p.cost.bytes_accessed for p in grown.phases)
    assert grown.phases[-1].cost.bytes_accessed == pytest.approx(full.phases[0].cost.bytes_accessed, rel=0.02)
    by_hand = sum(p.steps * p.step_seconds for p in grown.phases) / gen
    assert grown.step_seconds == pytest.approx(by_hand) and grown.step_seconds < full.step_seconds
    assert grown.tok_s_per_chip == pytest.approx(grown.rows / 4 / by_hand)
