"""The decode step's accelerator forms: `attention.cache_attention(form="dots")` against a numpy
reference and the CPU form, the platform rule (`decode_form`), the vocab-sharded embedding
lookup (`layers.embed_tokens_local`) bit for bit against the gathered one and without its
all-gather, and, compiled for a TPU topology, the bytes each attention form reads."""

from __future__ import annotations

import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.aot.hlo_cost import Cost, collectives
from prd_jax.mesh import make_mesh, named_sharding
from prd_jax.model import attention as A
from prd_jax.model import decode as D
from prd_jax.model.config import ModelConfig
from prd_jax.model.layers import embed_tokens, embed_tokens_local


def _cache_inputs(dtype, b=3, k=2, g=3, dh=16, s=37, seed=0):
    r = np.random.RandomState(seed)
    q, ck, cv = r.randn(b, k, g, dh), r.randn(b, k, dh, s), r.randn(b, k, s, dh)
    mask = np.zeros((b, s), bool)
    mask[0, :s] = True
    mask[1, 5:20] = True  # a left-padded row part way through its budget
    mask[2, 30:31] = True  # one visible slot
    sinks = r.randn(k * g)
    cast = lambda x: jnp.asarray(x, dtype)
    return cast(q), cast(ck), cast(cv), jnp.asarray(mask), jnp.asarray(sinks, jnp.float32)


def _numpy(q, ck, cv, mask, scale, sinks=None):
    q, ck, cv = (np.asarray(jnp.asarray(x, jnp.float32), np.float64) for x in (q, ck, cv))
    b, k, g, dh = q.shape
    out = np.zeros_like(q)
    for i in range(b):
        vis = np.asarray(mask[i])
        for h in range(k):
            for j in range(g):
                s = (q[i, h, j] @ ck[i, h])[vis] * scale
                extra = [] if sinks is None else [float(sinks[h * g + j])]
                e = np.exp(np.concatenate([s, extra]) - np.concatenate([s, extra]).max())
                out[i, h, j] = e[:len(s)] @ cv[i, h][vis] / e.sum()
    return out


@pytest.mark.parametrize("form", A.DECODE_FORMS)
@pytest.mark.parametrize("with_sinks", [False, True])
def test_cache_attention_forms_equal_numpy(form, with_sinks):
    """fp32 caches: both forms equal the float64 loop; bf16 caches: the dots form weights the
    values by bf16 probabilities (as training's attention does), so within bf16's rounding."""
    for dtype, tol in ((jnp.float32, 2e-6), (jnp.bfloat16, 2e-2)):
        q, ck, cv, mask, sinks = _cache_inputs(dtype)
        s = sinks if with_sinks else None
        got = jax.jit(A.cache_attention, static_argnums=(4, 6))(q, ck, cv, mask, 0.25, s, form)
        want = _numpy(q, ck, cv, mask, 0.25, s)
        np.testing.assert_allclose(np.asarray(got), want, atol=tol, rtol=tol)


def test_cache_attention_rejects_an_unknown_form():
    q, ck, cv, mask, _ = _cache_inputs(jnp.float32)
    with pytest.raises(ValueError, match=r"form='flash'; allowed: \('products', 'dots'\)"):
        A.cache_attention(q, ck, cv, mask, 0.25, None, "flash")


def test_decode_form_by_platform():
    assert A.decode_form(None) == "products"  # the tests' default backend is the CPU
    assert A.decode_form(make_mesh("data=2,tensor=4")) == "products"


def test_decode_step_logits_in_both_forms(monkeypatch):
    """A tiny bf16 model's decode step, greedy through 12 tokens: the dots form's logits stay
    within bf16 rounding of the products form's and pick the same tokens."""
    from prd_jax.model.decoder import init_params

    cfg = ModelConfig("llama", vocab_size=256, hidden=64, intermediate=128, num_layers=2, num_heads=6,
                      num_kv_heads=2, head_dim=16, max_position=512, dtype="float32")
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    weights = D.decode_weights(cfg, params)

    def run(form):
        monkeypatch.setattr(D, "decode_form", lambda mesh: form)
        step = jax.jit(lambda w, tok, pos, caches, start, index: D.decode_step(cfg, w, tok, pos, caches, start, index))
        rows, slots = 4, 16
        caches = tuple((jnp.zeros((rows, 2, 16, slots)), jnp.zeros((rows, 2, slots, 16))) for _ in range(2))
        tok, start, out = jnp.arange(rows, dtype=jnp.int32) * 7, jnp.zeros((rows,), jnp.int32), []
        for t in range(12):
            logits, caches = step(weights, tok, jnp.full((rows,), t), caches, start, jnp.int32(t))
            out.append(np.asarray(logits))
            tok = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return np.stack(out)

    products, dots = run("products"), run("dots")
    np.testing.assert_allclose(dots, products, atol=1e-5, rtol=1e-5)  # fp32 caches: rounding only
    np.testing.assert_array_equal(dots.argmax(-1), products.argmax(-1))


@pytest.mark.parametrize("shape,vocab", [("data=2,tensor=4", 256), ("fsdp=2,tensor=4", 256), ("tensor=8", 256),
                                         ("data=2,tensor=4", 250)])
def test_local_embedding_lookup_equals_the_gathered_one(shape, vocab):
    """Bit for bit, over rows and [rows, positions] tokens, including the first and last token
    of every shard's block (V = 250 does not divide over 4 shards: the gathered lookup)."""
    mesh = make_mesh(shape, jax.devices()[:8])
    table = jax.random.normal(jax.random.key(0), (vocab, 32), jnp.float32)
    block = vocab // 4 if vocab % 4 == 0 else 1
    edges = sorted({0, vocab - 1, *range(0, vocab, block), *range(block - 1, vocab, block)})[:16]
    tokens = jnp.asarray(np.resize(np.array(edges, np.int32), 16))
    for toks, lead in ((tokens, ("batch",)), (tokens.reshape(8, 2), ("batch", "length"))):
        want = jax.jit(lambda t, x: embed_tokens(t, x, jnp.bfloat16, mesh, lead))(table, toks)
        got = jax.jit(lambda t, x: embed_tokens_local(t, x, jnp.bfloat16, mesh, lead))(table, toks)
        np.testing.assert_array_equal(np.asarray(got, np.float32), np.asarray(want, np.float32))
        np.testing.assert_array_equal(np.asarray(got, np.float32),
                                      np.asarray(table.astype(jnp.bfloat16)[toks], np.float32))


def test_local_embedding_lookup_gathers_no_table():
    """Compiled on tensor=4: the gathered lookup all-gathers the vocab-sharded table, the local
    one moves only the looked-up rows (one all-reduce of [rows, D])."""
    mesh = make_mesh("data=2,tensor=4", jax.devices()[:8])
    table = jax.device_put(jnp.zeros((1024, 64), jnp.float32), named_sharding(("vocab", "embed"), mesh))
    tokens = jax.device_put(jnp.zeros((16,), jnp.int32), named_sharding(("batch",), mesh))

    def kinds(fn):
        hlo = jax.jit(lambda t, x: fn(t, x, jnp.float32, mesh, ("batch",))).lower(table, tokens).compile().as_text()
        return {(c.kind, c.operand_bytes) for c in collectives(hlo, 8)}

    assert ("all-gather", 1024 * 64 * 4 / 4) in kinds(embed_tokens)  # each device's quarter of the table
    assert {k for k, _ in kinds(embed_tokens_local)} <= {"all-reduce"}
    assert max(b for _, b in kinds(embed_tokens_local)) <= 8 * 64 * 4  # the data shard's 8 rows


@pytest.mark.skipif(importlib.util.find_spec("libtpu") is None,
                    reason="needs libtpu: pip install -e '.[tpu-aot]' (make test installs it)")
@pytest.mark.slow
def test_tpu_decode_step_reads_the_cache_about_once(monkeypatch):
    """A bf16 model whose KV cache dominates a decode step (64 rows x 8192 slots, 268 MB per
    layer's keys on each device: more than the chip keeps on-chip, as at paper scale), compiled
    for v5e:2x2 on tensor=4. TPU devices pick the dots form, whose step reads at most 1.25x the
    bytes of its weights plus cache, and about half the cache's bytes less with a float8 cache
    (`kv_cache_dtype`); the CPU's products form, forced, reads over 3x."""
    from prd_jax.aot.chips import parse_target
    from prd_jax.aot.decode_step import decode_step_lowered
    from prd_jax.aot.report import target_devices
    from prd_jax.sampling import SamplingConfig

    cfg = ModelConfig("qwen3", vocab_size=4096, hidden=256, intermediate=512, num_layers=2, num_heads=16,
                      num_kv_heads=8, head_dim=128, max_position=4096, dtype="bfloat16", param_dtype="bfloat16")
    mesh = make_mesh("tensor=4", target_devices(parse_target("v5e:2x2")))
    assert A.decode_form(mesh) == "dots"
    rows, slots = 64, 8192
    analytic = cfg.num_params() * 2 / 4 + rows * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * slots * 2 / 4

    kv = rows * cfg.num_layers * 2 * cfg.num_kv_heads * cfg.head_dim * slots * 2 / 4

    def read(form=None, kv_dtype=""):
        if form:
            monkeypatch.setattr(D, "decode_form", lambda mesh: form)
        scfg = SamplingConfig(slots - 256, num_samples=1, kv_cache_dtype=kv_dtype)
        return Cost.of(decode_step_lowered(cfg, mesh, scfg, rows, 256, slots - 256).compile(), 4)

    dots, f8 = read(), read(kv_dtype="float8_e4m3fn")
    assert dots.bytes_accessed - f8.bytes_accessed >= 0.45 * kv  # a float8 cache: half the cache's bytes
    products = read("products")
    assert dots.bytes_accessed <= 1.25 * analytic, dots.bytes_accessed / analytic
    assert products.bytes_accessed >= 3 * analytic, products.bytes_accessed / analytic
    # the embedding lookup stays local: what is gathered is the sampler's per-shard best tokens
    # (a few values per row), not the vocab-sharded table (4096 x 256 bf16, 1.5 MB per device gathered)
    assert dots.collective_bytes["all-gather"] <= rows * 32


def test_a_gpu_target_compiles_the_dots_form_on_simulated_devices():
    """`prd-jax compile` lowers a GPU target's programs on simulated CPU devices: within
    `compiling_for("gpu")` the decode step takes the accelerator form, outside it the CPU's."""
    mesh = make_mesh("data=2,tensor=4", jax.devices()[:8])
    with A.compiling_for("gpu"):
        assert A.decode_form(mesh) == "dots" and A.decode_form(None) == "dots"
        with A.compiling_for("cpu"):
            assert A.decode_form(mesh) == "products"
    assert A.decode_form(mesh) == "products"


# -- sampling.kv_cache_dtype: a float8 decode cache

def test_kv_cache_dtype_is_checked():
    from prd_jax.sampling import SamplingConfig

    with pytest.raises(ValueError, match=r"sampling.kv_cache_dtype='int4'; allowed: \('', 'bfloat16', "
                                         r"'float8_e4m3fn', 'float8_e5m2'\)"):
        SamplingConfig(8, kv_cache_dtype="int4")
    with pytest.raises(ValueError, match=r"kv_cache_dtype='float8_e4m3fn' needs decode_layers='unrolled'"):
        SamplingConfig(8, kv_cache_dtype="float8_e4m3fn", decode_layers="scan")


def test_kv_store_saturates_float8():
    """e4m3fn has no infinity: 1000 would become NaN; stored, it saturates at 448 (e5m2 at 57344)."""
    x = jnp.asarray([1000.0, -1000.0, 300.0, 1e-4, 60000.0], jnp.bfloat16)
    e4 = np.asarray(D.kv_store(x, jnp.float8_e4m3fn).astype(jnp.float32))
    np.testing.assert_array_equal(e4, [448.0, -448.0, 288.0, 0.0, 448.0])
    e5 = np.asarray(D.kv_store(x, jnp.float8_e5m2).astype(jnp.float32))
    np.testing.assert_array_equal(e5, [1024.0, -1024.0, 320.0, np.float32(jnp.float8_e5m2(1e-4)), 57344.0])
    assert D.kv_store(x, jnp.bfloat16) is x


def test_sampler_with_a_float8_cache():
    """A tiny bf16 model, greedy, 12 tokens: `kv_cache_dtype="bfloat16"` (its compute dtype) gives
    the default's rows bit for bit; with float8_e4m3fn the decode loop carries f8 caches, the
    first token (read from the prefill, before any cache read) and its log-probability are the
    default's, and the later log-probabilities move (the cache is read rounded) but stay finite."""
    from prd_jax.model.decoder import init_params
    from prd_jax.sampling import SamplingConfig, generate

    cfg = ModelConfig("llama", vocab_size=256, hidden=64, intermediate=128, num_layers=2, num_heads=4,
                      num_kv_heads=2, head_dim=16, max_position=512, dtype="bfloat16")
    params = jax.jit(init_params, static_argnums=0)(cfg, jax.random.key(0))
    prompts = jax.random.randint(jax.random.key(1), (4, 8), 1, 256)
    lengths, keys = jnp.full((4,), 8, jnp.int32), jax.random.split(jax.random.key(2), 4)

    def run(kv, text=False):
        scfg = SamplingConfig(12, temperature=0.0, kv_cache_dtype=kv)
        fn = jax.jit(lambda p, x, n, k: generate(cfg, p, x, n, k, jnp.int32(12), scfg, gen_len=12))
        if text:
            return fn.lower(params, prompts, lengths, keys).as_text()
        return fn(params, prompts, lengths, keys)

    base, same, f8 = run(""), run("bfloat16"), run("float8_e4m3fn")
    np.testing.assert_array_equal(np.asarray(same.tokens), np.asarray(base.tokens))
    np.testing.assert_array_equal(np.asarray(same.logprobs), np.asarray(base.logprobs))
    np.testing.assert_array_equal(np.asarray(f8.tokens[:, 0]), np.asarray(base.tokens[:, 0]))
    np.testing.assert_array_equal(np.asarray(f8.logprobs[:, 0]), np.asarray(base.logprobs[:, 0]))
    assert np.all(np.isfinite(np.asarray(f8.logprobs)))
    assert not np.array_equal(np.asarray(f8.logprobs[:, 1:]), np.asarray(base.logprobs[:, 1:]))
    assert "f8E4M3FN" in run("float8_e4m3fn", text=True) and "f8E4M3FN" not in run("", text=True)
