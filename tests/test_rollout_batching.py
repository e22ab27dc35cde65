"""The unrolled-layers decode and in-graph compaction of finished rows, on tiny random models.

Invariant: every request's tokens and logprobs equal what the static sampler gives for that
request with the same per-row key (compaction only changes which rows share a step)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from prd_jax.mesh import make_mesh
from prd_jax.model.weights import param_shardings
from prd_jax.model import forward, get_model_config, init_params
from prd_jax.model.decode import decode_cache, decode_step, decode_weights, init_cache
from prd_jax.sampling import (Sampler, SamplingConfig, cache_windows, compact_rows, compaction_sizes, generate,
                              prompt_widths)

pytestmark = pytest.mark.slow  # sampler equivalences compile many programs each

# 16 of the tiny vocabulary's 256 ids stop a row: at T = 1 lengths spread widely.
STOPS = tuple(range(3, 256, 16))
PROMPTS = [[5, 17, 33, 2, 9, 100, 41], [7, 8], [250, 3, 3, 3, 64], [9, 9, 1], [44], [3, 1, 4, 1, 5, 9],
           [2, 7, 1, 8], [11, 12, 13, 14, 15, 16, 17, 18, 19], [6] * 5, [120, 121], [1, 1, 2, 3, 5, 8, 13],
           [99], [31, 41, 59, 26], [27, 18, 28], [16, 8], [200, 100, 50]]


def left_padded(plen: int):
    """PROMPTS left-padded into `[16, plen]` and their lengths, as the sampler lays them out."""
    prompts = np.zeros((len(PROMPTS), plen), np.int32)
    for i, p in enumerate(PROMPTS):
        prompts[i, plen - len(p):] = p
    return jnp.asarray(prompts), jnp.asarray([len(p) for p in PROMPTS], jnp.int32)


@pytest.fixture(scope="module")
def tiny():
    cfg = get_model_config("tiny")
    return cfg, init_params(cfg, jax.random.key(0))


def test_compaction_sizes_hand_computed():
    assert compaction_sizes(16, 0) == (16,)
    assert compaction_sizes(16, 2) == (16, 8, 4, 2)
    assert compaction_sizes(16, 3) == (16, 8, 4)
    assert compaction_sizes(12, 1) == (12, 6, 3, 1)  # halves rounded down
    assert compaction_sizes(16, 1, multiple=4) == (16, 8, 4)
    # three quarters per phase: 192, 144, 108, 81, 60.75 -> 60, 45, 33.75 -> 33, ... 6.75 -> 6 < 8 stops
    assert compaction_sizes(256, 8, 1, 0.75) == (256, 192, 144, 108, 81, 60, 45, 33, 24, 18, 13, 9)
    assert compaction_sizes(16, 1, 4, 0.75) == (16, 12, 8, 4)  # 9 -> 8, 6 -> 4, 3 -> 0 stops
    with pytest.raises(ValueError, match="compact_min_rows"):
        SamplingConfig(8, compact_min_rows=-1)
    for bad in (0.0, 1.0, 1.5):
        with pytest.raises(ValueError, match="compact_ratio"):
            SamplingConfig(8, compact_ratio=bad)


def test_compaction_keeps_each_shards_rows_hand_computed():
    """Shard-local compaction: each of the S contiguous row blocks keeps its own first
    size/S rows, live ones first in their order, so no row (or its cache) changes device."""
    finished = jnp.asarray([False, True, False, True, True, True, False, True])
    live = dict(ids=jnp.arange(8), finished=finished, cache=jnp.arange(8.0)[:, None] * jnp.ones((8, 3)))
    two = compact_rows(live, 4, 2)
    np.testing.assert_array_equal(two["ids"], [0, 2, 6, 4])  # block 0: live 0, 2; block 1: live 6, then 4
    np.testing.assert_array_equal(two["cache"][:, 0], [0.0, 2.0, 6.0, 4.0])
    one = compact_rows(live, 4, 1)  # one shard: the three live rows first, then the first finished one
    np.testing.assert_array_equal(one["ids"], [0, 2, 6, 1])


@pytest.mark.parametrize("num_samples,top_p,ratio", [(1, 1.0, 0.5), (2, 0.9, 0.5), (1, 1.0, 0.75)])
def test_compacted_rows_equal_the_static_sampler(tiny, num_samples, top_p, ratio):
    cfg, params = tiny
    sampler = Sampler(cfg)
    keys = jax.random.split(jax.random.key(21), len(PROMPTS))
    base = dict(temperature=1.0, top_p=top_p, num_samples=num_samples, stop_ids=STOPS)
    static = sampler(params, PROMPTS, keys, SamplingConfig(40, **base))
    compact = sampler(params, PROMPTS, keys, SamplingConfig(40, compact_min_rows=2, compact_ratio=ratio, **base))
    lengths = np.asarray(static.lengths)
    assert lengths.min() < 10 and lengths.max() > 20  # a skewed batch: compaction has work to do
    np.testing.assert_array_equal(compact.lengths, static.lengths)
    np.testing.assert_array_equal(compact.stopped, static.stopped)
    np.testing.assert_array_equal(compact.tokens, static.tokens)
    # logprobs to fp32 rounding: the matmul kernels block a 16-row batch differently from a 4-row one
    np.testing.assert_allclose(compact.logprobs, static.logprobs, atol=1e-5)
    # each request equals that request alone in the static sampler (its own key)
    for row in (0, 5, 11):
        alone = sampler(params, [PROMPTS[row]], keys[row:row + 1], SamplingConfig(40, **base))
        for m in range(num_samples):
            r = row * num_samples + m
            n = int(static.lengths[r])
            assert compact.tokens[r, :n].tolist() == alone.tokens[m, :n].tolist()
            np.testing.assert_allclose(compact.logprobs[r, :n], alone.logprobs[m, :n], atol=1e-5)


def test_cache_windows_and_prompt_widths_hand_computed():
    assert cache_windows(64, 0) == (64,)
    assert cache_windows(64, 16) == (16, 32, 48, 64)
    assert cache_windows(48, 32) == (32, 48)  # the last window stops at the generation bucket
    assert cache_windows(16, 64) == (16,)
    # 8 sorted lengths in 2 groups: the shorter four's longest is 20 -> bucket 24; the last is the bucket
    assert prompt_widths([3, 5, 9, 20, 21, 40, 50, 60], 64, 2) == (24, 64)
    assert prompt_widths([3, 5, 9, 20, 21, 40, 50, 60], 64, 4) == (16, 24, 48, 64)
    assert prompt_widths([1, 1, 1, 1], 16, 2) == (16, 16)  # the bucket's minimum
    with pytest.raises(ValueError, match="prompt_groups"):
        SamplingConfig(8, prompt_groups=-1)
    with pytest.raises(ValueError, match="cache_window"):
        SamplingConfig(8, cache_window=-1)


@pytest.mark.parametrize("window,min_rows", [(8, 0), (16, 2), (8, 4)])
def test_growing_cache_equals_the_full_cache(tiny, window, min_rows):
    """A first phase whose cache grows `window` slots at a time (with and without compaction
    after it) gives every row the tokens of the full-capacity static sampler."""
    cfg, params = tiny
    sampler = Sampler(cfg)
    keys = jax.random.split(jax.random.key(5), len(PROMPTS))
    base = dict(temperature=1.0, stop_ids=STOPS)
    static = sampler(params, PROMPTS, keys, SamplingConfig(40, **base))
    grown = sampler(params, PROMPTS, keys, SamplingConfig(40, cache_window=window, compact_min_rows=min_rows, **base))
    lengths = np.asarray(static.lengths)
    assert lengths.max() > 2 * window  # rows outlive the first windows: the cache grows
    np.testing.assert_array_equal(grown.lengths, static.lengths)
    np.testing.assert_array_equal(grown.stopped, static.stopped)
    np.testing.assert_array_equal(grown.tokens, static.tokens)
    np.testing.assert_allclose(grown.logprobs, static.logprobs, atol=1e-5)


@pytest.mark.parametrize("groups,extra", [(2, {}), (4, dict(num_samples=2, top_p=0.9)),
                                          (2, dict(compact_min_rows=2, cache_window=8, prefill_groups=2))])
def test_prompt_groups_equal_one_prompt_width(tiny, groups, extra):
    """Length-sorted prompt groups, each decoded over its own prompt width, give every request
    the tokens of one width (and its key: outputs come back in the caller's order)."""
    cfg, params = tiny
    sampler = Sampler(cfg)
    prompts = PROMPTS + [[7] * 20, [9] * 30]  # 18 prompts -> a 32-row batch, widths up to 32
    keys = jax.random.split(jax.random.key(6), len(prompts))
    base = dict(temperature=1.0, stop_ids=STOPS, **extra)
    one = sampler(params, prompts, keys, SamplingConfig(40, **base))
    grouped = sampler(params, prompts, keys, SamplingConfig(40, prompt_groups=groups, **base))
    widths = [k[-1] for k in sampler._compiled]
    assert widths[0] == () and len(widths[1]) == groups and widths[1][0] < widths[1][-1] == 32
    np.testing.assert_array_equal(grouped.tokens, one.tokens)
    np.testing.assert_array_equal(grouped.lengths, one.lengths)
    np.testing.assert_array_equal(grouped.stopped, one.stopped)
    np.testing.assert_allclose(grouped.logprobs, one.logprobs, atol=1e-5)
    lengths = np.asarray(one.lengths)
    assert lengths.min() < 10 and lengths.max() > 20
    with pytest.raises(ValueError, match="prompt groups need"):  # the last width must be the bucket
        generate(cfg, params, jnp.zeros((4, 16), jnp.int32), jnp.ones((4,), jnp.int32),
                 jax.random.split(jax.random.key(0), 4), jnp.int32(4), SamplingConfig(4), gen_len=16,
                 widths=(8, 8))


def test_grouped_prefill_equals_one_prefill(tiny):
    """Length-sorted row groups prefilled over their own slot windows give one prefill's
    logits, cache (at every slot a row attends) and, through the sampler, its tokens."""
    from prd_jax.sampling import grouped_prefill, prefill, prefill_windows

    cfg, params = tiny
    plen = 16
    prompts, lengths = left_padded(plen)
    # sorted lengths 1,1,2,2 | 2,3,3,3 | 4,4,5,5 | 6,7,7,9: three groups fit the 8-slot window
    assert prefill_windows(plen) == (8, 16)
    ref_logits, ref = prefill(cfg, params, jnp.asarray(prompts), jnp.asarray(lengths), 40)
    logits, got = grouped_prefill(cfg, params, jnp.asarray(prompts), jnp.asarray(lengths), 40, 4)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5)
    np.testing.assert_array_equal(got.start, ref.start)
    assert int(got.index) == int(ref.index) == plen and got.k.shape == ref.k.shape
    for r, n in enumerate(np.asarray(lengths).tolist()):
        for a, b in ((got.k, ref.k), (got.v, ref.v)):
            np.testing.assert_allclose(a[:, r, plen - n:plen], b[:, r, plen - n:plen], atol=1e-5)
    # the windows were used: row 4 (length 1) was prefilled over 8 slots, row 7 (length 9) over 16
    assert not np.asarray(got.k[:, 4, :plen - 8]).any() and np.asarray(got.k[:, 7, :plen - 9]).any()
    sampler = Sampler(cfg)
    keys = jax.random.split(jax.random.key(4), len(PROMPTS))
    for temperature in (0.0, 1.0):
        base = dict(temperature=temperature, stop_ids=STOPS)
        one = sampler(params, PROMPTS, keys, SamplingConfig(24, **base))
        grouped = sampler(params, PROMPTS, keys, SamplingConfig(24, prefill_groups=4, compact_min_rows=2, **base))
        np.testing.assert_array_equal(grouped.tokens, one.tokens)
        np.testing.assert_array_equal(grouped.lengths, one.lengths)
        np.testing.assert_allclose(grouped.logprobs, one.logprobs, atol=1e-4)
    with pytest.raises(ValueError, match="prefill_groups"):
        SamplingConfig(8, prefill_groups=-1)


def test_chunked_prefill_equals_one_prefill(tiny):
    """Row chunks prefilled one after another give one prefill's logits and cache, rows in
    order; rows that do not split evenly take one prefill."""
    from prd_jax.sampling import chunked_prefill, prefill

    cfg, params = tiny
    plen = 16
    prompts, lengths = left_padded(plen)
    ref_logits, ref = prefill(cfg, params, prompts, lengths, 40)
    logits, got = chunked_prefill(cfg, params, prompts, lengths, 40, rows_per_chunk=4)
    np.testing.assert_allclose(logits, ref_logits, atol=1e-5)
    np.testing.assert_allclose(got.k, ref.k, atol=1e-5)
    np.testing.assert_allclose(got.v, ref.v, atol=1e-5)
    np.testing.assert_array_equal(got.start, ref.start)
    assert int(got.index) == int(ref.index) == plen
    # row 5 alone gives chunk 1's second row: the chunks are contiguous rows, in order
    alone, cache5 = prefill(cfg, params, prompts[5:6], lengths[5:6], 40)
    np.testing.assert_allclose(logits[5], alone[0], atol=1e-5)
    np.testing.assert_allclose(got.k[:, 5], cache5.k[:, 0], atol=1e-5)
    uneven, _ = chunked_prefill(cfg, params, prompts[:10], lengths[:10], 40, rows_per_chunk=4)
    np.testing.assert_allclose(uneven, ref_logits[:10], atol=1e-5)
    # through the sampler: 64 rows prefill in two chunks of 32, 16 rows in one prefill
    sampler = Sampler(cfg)
    keys = jax.random.split(jax.random.key(8), 4 * len(PROMPTS))
    scfg = SamplingConfig(12, temperature=1.0, stop_ids=STOPS)
    many = sampler(params, PROMPTS * 4, keys, scfg)
    for part in (0, 3):
        rows = slice(16 * part, 16 * part + 16)
        few = sampler(params, PROMPTS, keys[rows], scfg)
        np.testing.assert_array_equal(many.tokens[rows, :few.tokens.shape[1]], few.tokens)
        np.testing.assert_array_equal(many.lengths[rows], few.lengths)


@pytest.mark.parametrize("axes,ratio,window", [("data=2,fsdp=2,tensor=2", 0.5, 0), ("data=2,tensor=4", 0.75, 0),
                                               ("data=2,fsdp=2,tensor=2", 0.5, 8)])
def test_compaction_on_a_mesh_equals_one_device(tiny, axes, ratio, window):
    cfg, params = tiny
    mesh = make_mesh(axes)  # batch shards 4: sizes (8, 4); 2 with three quarters: (8, 6, 4)
    keys = jax.random.split(jax.random.key(4), 8)
    scfg = SamplingConfig(24, temperature=1.0, stop_ids=STOPS, compact_min_rows=4, compact_ratio=ratio,
                          cache_window=window)
    one = Sampler(cfg)(params, PROMPTS[:8], keys, scfg)
    multi = Sampler(cfg, mesh)(jax.device_put(params, param_shardings(cfg, mesh)), PROMPTS[:8], keys, scfg)
    np.testing.assert_array_equal(multi.tokens, one.tokens)
    np.testing.assert_array_equal(multi.lengths, one.lengths)
    np.testing.assert_allclose(multi.logprobs, one.logprobs, atol=1e-4)


@pytest.mark.parametrize("family", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("fuse", [True, False])
def test_decode_step_equals_the_scanned_forward(family, fuse):
    """One unrolled decode step (fused or separate projections) gives the scanned forward's
    logits and cache, for each family (qwen2 biases, qwen3 q/k norms)."""
    cfg = get_model_config("tiny").replace(family=family)
    params = init_params(cfg, jax.random.key(1))
    if family == "qwen2":  # non-zero biases
        attn = params["layers"]["attn"]
        for i, name in enumerate(("q_bias", "k_bias", "v_bias")):
            attn[name] = 0.1 * jax.random.normal(jax.random.key(10 + i), attn[name].shape)
    prompts = jnp.array([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]], jnp.int32)
    start = jnp.array([2, 0], jnp.int32)
    positions = jnp.maximum(jnp.arange(5)[None] - start[:, None], 0)
    cache = init_cache(cfg, 2, 8).replace(start=start)
    _, cache = forward(cfg, params, prompts, positions, cache, prefill=True)
    tok = jnp.array([9, 10], jnp.int32)
    pos = cache.index - start
    ref, ref_cache = forward(cfg, params, tok[:, None], pos[:, None], cache)
    got, caches = decode_step(cfg, decode_weights(cfg, params, fuse=fuse), tok, pos, decode_cache(cache), start,
                              cache.index)
    np.testing.assert_allclose(got, ref[:, 0], atol=1e-5, rtol=1e-5)
    for layer, (k, v) in enumerate(caches):
        np.testing.assert_allclose(k, jnp.transpose(ref_cache.k[layer], (0, 2, 3, 1)), atol=1e-5, rtol=1e-5)
        np.testing.assert_allclose(v, jnp.swapaxes(ref_cache.v[layer], 1, 2), atol=1e-5, rtol=1e-5)


def test_decode_cache_adds_generation_slots_to_a_prompt_sized_cache():
    """The sampler prefills a prompt-sized cache and `decode_cache(..., slots=S)` pads it:
    equal to prefilling an S-slot cache (prompt slots equal, generation slots zero)."""
    cfg = get_model_config("tiny")
    params = init_params(cfg, jax.random.key(4))
    prompts = jnp.array([[0, 0, 5, 6, 7], [1, 2, 3, 4, 5]], jnp.int32)
    start = jnp.array([2, 0], jnp.int32)
    positions = jnp.maximum(jnp.arange(5)[None] - start[:, None], 0)
    caches = [forward(cfg, params, prompts, positions, init_cache(cfg, 2, cap).replace(start=start), prefill=True)[1]
              for cap in (5, 8)]
    padded, full = decode_cache(caches[0], slots=8), decode_cache(caches[1])
    assert len(padded) == cfg.num_layers
    for (k, v), (k_ref, v_ref) in zip(padded, full):
        assert k.shape == k_ref.shape == (2, cfg.num_kv_heads, cfg.head_dim, 8) and v.shape == v_ref.shape
        np.testing.assert_array_equal(k, k_ref)
        np.testing.assert_array_equal(v, v_ref)
        assert not np.any(np.asarray(k)[..., 5:]) and not np.any(np.asarray(v)[:, :, 5:])
    assert decode_cache(caches[1], slots=4)[0][0].shape[-1] == 8  # never cut below the capacity


@pytest.mark.parametrize("family", ["llama", "qwen3"])
def test_unrolled_decode_equals_scanned_decode(family):
    cfg = get_model_config("tiny").replace(family=family)
    params = init_params(cfg, jax.random.key(2))
    sampler = Sampler(cfg)
    keys = jax.random.split(jax.random.key(3), 4)
    for temperature in (0.0, 1.0):
        a = sampler(params, PROMPTS[:4], keys, SamplingConfig(12, temperature=temperature))
        b = sampler(params, PROMPTS[:4], keys, SamplingConfig(12, temperature=temperature, decode_layers="scan"))
        np.testing.assert_array_equal(a.tokens, b.tokens)
        np.testing.assert_allclose(a.logprobs, b.logprobs, atol=1e-5)


class CompileCounter:
    """Counts XLA backend compilations (`jax.monitoring`) while active."""

    EVENT = "/jax/core/compile/backend_compile_duration"

    def __init__(self):
        self.count = 0

    def __call__(self, event, duration, **kwargs):
        if event == self.EVENT:
            self.count += 1

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self)


def test_pdr_round_with_tournament_compiles_nothing_after_warm_up():
    """A PDR round whose selector is the V1 Swiss tournament (drafts, judge batch, refine),
    run on problems of other lengths within the same width bucket, compiles nothing new."""
    from fakes import CharTokenizer

    from prd_jax.operators.lm import ModelLM
    from prd_jax.operators.runner import encode_problems, make_context, run_operator
    from prd_jax.operators.specs import Judge, Sampling
    from prd_jax.operators.pdr import PDR

    class Tokenizer(CharTokenizer):  # the random model emits ids below the first character
        def decode(self, ids, skip_special=True):
            return "".join(chr(max(i - 3, 32)) for i in ids)

    tok = Tokenizer()
    cfg = get_model_config("tiny", max_position=2048)
    lm = ModelLM(init_params(cfg, jax.random.key(0)), cfg, 0)
    ctx = make_context(tok, Sampling(temperature=1.0), kappa=8, k_max=4)
    spec = PDR((4, 1), "shared_topk", 2, "pairwise_v1", 8, 16, 32, 8, judge=Judge(max_new_tokens=16))
    batches = [(["1+1=?", "3*4=?"], ["2", "12"]), (["12+30=?", "7=?"], ["42", "7"]),
               (["100-1=? quickly", "2*2*2=?"], ["99", "8"])]
    probs = [encode_problems(tok, texts, answers, 32, width=32)[0] for texts, answers in batches]
    assert len({tuple(np.asarray(p.lengths).tolist()) for p in probs}) == 3  # different lengths
    with CompileCounter() as warm_up:
        jax.block_until_ready(run_operator(lm, probs[0], jax.random.key(1), spec, ctx).final_tokens)
    assert warm_up.count > 0  # the counter sees compilations
    with CompileCounter() as counter:
        for i, p in enumerate(probs[1:]):
            jax.block_until_ready(run_operator(lm, p, jax.random.key(2 + i), spec, ctx).final_tokens)
    assert counter.count == 0


def test_sampler_compiles_nothing_after_warm_up_within_a_bucket(tiny):
    cfg, params = tiny
    sampler = Sampler(cfg)
    scfg = SamplingConfig(8, temperature=1.0, stop_ids=STOPS, compact_min_rows=2)
    with CompileCounter() as warm_up:
        jax.block_until_ready(sampler(params, PROMPTS[:4], jax.random.key(0), scfg).tokens)
    assert warm_up.count > 0
    with CompileCounter() as counter:
        for first in (4, 8):  # other prompt lengths, same (batch, prompt, generation) bucket
            jax.block_until_ready(sampler(params, PROMPTS[first:first + 4], jax.random.key(first), scfg).tokens)
    assert counter.count == 0 and sampler.num_compilations == 1


def test_operator_calls_with_compaction_equal_static_calls():
    """`sampling.compact_min_rows` (with `prefill_groups`, `cache_window`) in the context's
    `Sampling` compacts every generate call of an operator (the PDR drafts' fan-out included)
    and changes no token, budget or final answer."""
    from fakes import CharTokenizer

    from prd_jax.operators.calls import sampling_config
    from prd_jax.operators.lm import ModelLM
    from prd_jax.operators.runner import encode_problems, make_context, run_operator
    from prd_jax.operators.specs import Sampling
    from prd_jax.operators.pdr import PDR

    tok = CharTokenizer()
    cfg = get_model_config("tiny", max_position=2048)
    params = init_params(cfg, jax.random.key(0))
    ctx = make_context(tok, Sampling(temperature=1.0, stop_ids=STOPS), kappa=8, k_max=4)
    spec = PDR((8, 1), "shared_topk", 2, "random", 8, 24, 32, 8)
    probs = encode_problems(tok, ["1+1=?", "3*4=?"], ["2", "12"], 32, width=32)[0]
    keys = jax.random.split(jax.random.key(5), 2)
    static = run_operator(ModelLM(params, cfg, 0), probs, keys, spec, ctx)
    # the eval / operator-RL route: the context's Sampling carries it to every call's SamplingConfig
    ctx_compact = make_context(tok, Sampling(temperature=1.0, stop_ids=STOPS, compact_min_rows=2, prefill_groups=2,
                                             cache_window=8), kappa=8, k_max=4)
    assert sampling_config(ctx_compact, 8, 4).compact_min_rows == 2
    assert sampling_config(ctx_compact, 8, 4).prefill_groups == 2
    assert sampling_config(ctx_compact, 8, 4).cache_window == 8
    routed = run_operator(ModelLM(params, cfg, 0), probs, keys, spec, ctx_compact)
    np.testing.assert_array_equal(routed.final_tokens, static.final_tokens)
    np.testing.assert_array_equal(routed.b_total, static.b_total)
    np.testing.assert_array_equal(routed.b_seq, static.b_seq)
    assert int(np.asarray(static.b_total).min()) < 2 * 8 * 24  # rows stopped early: compaction had work
