"""Sharding by logical rules: mesh construction, param shardings, and equal results on
mesh (1,1,1) and (2,2,2) of 8 simulated devices."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax.sharding import PartitionSpec as P

from prd_jax.mesh import logical_to_spec, make_mesh, parse_mesh_shape
from prd_jax.model import forward, get_model_config, init_params
from prd_jax.model.weights import param_shardings
from prd_jax.sampling import Sampler, SamplingConfig

PROMPTS = [[5, 17, 33, 2, 9, 100, 41], [7, 8], [250, 3, 3, 3, 64], [1, 2, 3]]


def test_eight_simulated_devices():
    assert jax.device_count() == 8


def test_mesh_fill_and_errors():
    assert dict(make_mesh("data=-1,tensor=2").shape) == {"data": 4, "fsdp": 1, "tensor": 2}
    assert dict(make_mesh(None).shape) == {"data": 8, "fsdp": 1, "tensor": 1}
    assert parse_mesh_shape((1, 2, 4)) == {"data": 1, "fsdp": 2, "tensor": 4}
    with pytest.raises(ValueError, match="allowed"):
        make_mesh("model=2")
    with pytest.raises(ValueError, match="at most one axis may be -1"):
        make_mesh("data=-1,fsdp=-1")
    with pytest.raises(ValueError, match="needs 16 devices"):
        make_mesh("data=4,fsdp=4")


def test_rules_map_logical_names():
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    assert logical_to_spec(("embed", "mlp"), mesh) == P("fsdp", "tensor")
    assert logical_to_spec(("batch", "length", "embed"), mesh) == P(("data", "fsdp"), None, None)
    # 9 heads do not divide over tensor=2: replicated on that dimension
    assert logical_to_spec(("embed", "heads", "head_dim"), mesh, (576, 9, 64)) == P("fsdp", None, None)


@pytest.fixture(scope="module")
def tiny():
    cfg = get_model_config("tiny")
    return cfg, init_params(cfg, jax.random.key(0))


def test_param_shardings_follow_rules(tiny):
    cfg, params = tiny
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    shardings = param_shardings(cfg, mesh)
    assert shardings["layers"]["mlp"]["gate"].spec == P(None, "fsdp", "tensor")
    assert shardings["layers"]["mlp"]["down"].spec == P(None, "tensor", "fsdp")
    assert shardings["layers"]["attn"]["q"].spec == P(None, "fsdp", "tensor", None)
    assert shardings["embed"].spec == P("tensor", "fsdp")
    placed = jax.device_put(params, shardings)
    gate = placed["layers"]["mlp"]["gate"]  # [L, D, F] = [2, 64, 128]
    shard_shapes = {s.data.shape for s in gate.addressable_shards}
    assert shard_shapes == {(2, 32, 64)}  # each device holds a quarter, never the full array


@pytest.mark.slow
def test_logits_equal_across_meshes(tiny):
    cfg, params = tiny
    mesh = make_mesh("data=2,fsdp=2,tensor=2")
    tokens = jnp.array([p[:2] + [1] * 4 for p in PROMPTS], jnp.int32)
    positions = jnp.broadcast_to(jnp.arange(6), tokens.shape)
    ref, _ = jax.jit(lambda p, t, q: forward(cfg, p, t, q))(params, tokens, positions)
    sharded_params = jax.device_put(params, param_shardings(cfg, mesh))
    got, _ = jax.jit(lambda p, t, q: forward(cfg, p, t, q, mesh=mesh))(sharded_params, tokens, positions)
    np.testing.assert_allclose(np.asarray(got), np.asarray(ref), atol=1e-5)


@pytest.mark.slow
def test_greedy_and_sampled_tokens_equal_across_meshes(tiny):
    cfg, params = tiny
    scfg = SamplingConfig(12, temperature=1.0, num_samples=2)
    single = Sampler(cfg, make_mesh("data=1,fsdp=1,tensor=1"))
    multi_mesh = make_mesh("data=2,fsdp=2,tensor=2")
    multi = Sampler(cfg, multi_mesh)
    sharded = jax.device_put(params, param_shardings(cfg, multi_mesh))
    for s in (scfg, SamplingConfig(12, temperature=0.0)):
        a = single(params, PROMPTS, jax.random.key(5), s)
        b = multi(sharded, PROMPTS, jax.random.key(5), s)
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-4)


@pytest.mark.parametrize("name,count", [("smollm2-135m", 134_515_008), ("llama3.1-8b", 8_030_261_248),
                                        ("qwen2.5-7b", 7_615_616_512), ("qwen3-8b", 8_190_735_360)])
def test_named_config_parameter_counts(name, count):
    """Param trees of the named configs have the published parameter counts."""
    from prd_jax.model.decoder import param_shapes

    cfg = get_model_config(name)
    leaves = jax.tree.leaves(param_shapes(cfg))
    assert sum(int(np.prod(x.shape)) for x in leaves) == count == cfg.num_params()


@pytest.mark.slow
def test_remat_and_bf16_compute(tiny):
    cfg, params = tiny
    tokens = jnp.array([[5, 17, 33, 2, 9, 100]])
    positions = jnp.arange(6)[None]

    def loss(p, c):
        return jnp.mean(forward(c, p, tokens, positions)[0] ** 2)

    g = jax.grad(loss)(params, cfg.replace(remat=False))
    others = [cfg.replace(remat=r) for r in (True, "full", "dots", "dots_no_batch")]
    others.append(cfg.replace(scan_unroll=cfg.num_layers))  # same params tree
    for other in others:
        for a, b in zip(jax.tree.leaves(g), jax.tree.leaves(jax.grad(loss)(params, other))):
            np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)
    assert cfg.replace(remat=True).remat_policy == "full" and cfg.replace(remat=False).remat_policy == "none"
    # The policy reaches the layer. Full remat recomputes the weight matmuls (more dots in the
    # backward's program); the partial policies recompute only elementwise work such as the
    # norms (more rsqrt than "none"), and the fused attention's output and log-sum-exp are
    # named for them to keep; full remat differentiates the blocks instead (no names).
    jaxprs = {r: str(jax.make_jaxpr(lambda p, c=cfg.replace(remat=r): jax.grad(loss)(p, c))(params))
              for r in ("none", "dots", "dots_no_batch", "full")}
    dots, norms = ({r: j.count(op) for r, j in jaxprs.items()} for op in ("dot_general", "rsqrt"))
    assert dots["none"] == dots["dots"] == dots["dots_no_batch"] < dots["full"], dots
    assert norms["none"] < norms["dots"] == norms["dots_no_batch"] == norms["full"], norms
    assert all("name=attn_out" in jaxprs[r] for r in ("none", "dots", "dots_no_batch")) and "attn_out" not in jaxprs["full"]
    with pytest.raises(ValueError, match="scan_unroll=0"):
        cfg.replace(scan_unroll=0)
    with pytest.raises(ValueError, match="remat='dots_only'.*dots_no_batch"):
        cfg.replace(remat="dots_only")
    ref = forward(cfg, params, tokens, positions)[0]
    bf16 = forward(cfg.replace(dtype="bfloat16"), params, tokens, positions)[0]
    assert bf16.dtype == jnp.float32  # logits are always fp32
    assert float(jnp.max(jnp.abs(bf16 - ref))) < 0.1 * float(jnp.max(jnp.abs(ref)))
