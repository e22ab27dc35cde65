"""The serving engine's continuous batching (`prd_jax.serve.slots`): rows that enter and
leave a pool of decode slots at different times decode exactly what `Sampler` decodes for
each alone, short rows are answered before long neighbours end, and after the warm-up no
request compiles."""

import time

import jax
import numpy as np
import pytest

from prd_jax.model import get_model_config, init_params
from prd_jax.sampling import Sampler, SamplingConfig
from prd_jax.serve import slots as S
from prd_jax.serve.engine import Engine, Row

PROMPTS = [[5, 17, 33, 2, 9], [7, 8, 40, 41, 42, 43, 44, 45, 46], [250, 3, 3], [9] * 14, [4, 4, 100, 7]]


class Tok:
    pad_id, stop_ids = 0, (1,)


@pytest.fixture(scope="module")
def tiny():
    cfg = get_model_config("tiny")
    return cfg, init_params(cfg, jax.random.key(0))


def _ready(engine, timeout=600):
    deadline = time.monotonic() + timeout
    while not engine.ready.wait(0.5):
        assert engine.error is None, engine.error
        assert time.monotonic() < deadline
    return engine


ALONE = {}


def _alone(cfg, params, row, longest=64):
    """What the sampler decodes for `row` alone, with the key the engine gives it: decoded to
    `longest` tokens (one program for every row of a test) and cut at the row's max_tokens."""
    scfg = SamplingConfig(max_new_tokens=longest, temperature=row.temperature, top_p=row.top_p, top_k=row.top_k,
                          stop_ids=Tok.stop_ids)
    sampler = ALONE.setdefault(id(params), Sampler(cfg, pad_id=0))
    out = sampler(params, [row.prompt], jax.random.fold_in(jax.random.key(row.seed), row.sample)[None], scfg)
    n = min(int(out.lengths[0]), row.max_tokens)
    ids = [int(t) for t in out.tokens[0, :n]]
    return ids, bool(ids) and ids[-1] in Tok.stop_ids


@pytest.mark.slow
@pytest.mark.parametrize("temperature,top_p,top_k", [
    (0.0, 1.0, 0), pytest.param(1.0, 1.0, 0, marks=pytest.mark.slow), pytest.param(0.7, 0.9, 5, marks=pytest.mark.slow)])
def test_rows_entering_and_leaving_slots_decode_what_they_decode_alone(tiny, temperature, top_p, top_k):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=2, wait_s=0.01, decode_chunk=3))
    try:
        rows = [Row(p, 4 + 5 * (i % 3), temperature, top_p, top_k, seed=10 + i, sample=i % 2)
                for i, p in enumerate(PROMPTS)]
        futures = engine.submit(rows[:3])  # 3 rows for 2 slots: the third waits for a free slot
        time.sleep(0.2)
        futures += engine.submit(rows[3:])  # these arrive while others are mid-decode
        got = [f.result(timeout=300) for f in futures]
    finally:
        engine.stop()
    assert engine.peak_rows == 2
    for row, out in zip(rows, got):
        ids, stopped = _alone(cfg, params, row)
        assert out.ids == ids and out.stopped == stopped
        assert len(out.logprobs) == len(ids) and all(lp <= 0 for lp in out.logprobs)


@pytest.mark.slow
def test_short_rows_are_answered_before_a_long_neighbour_ends(tiny):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=2, decode_chunk=2))
    done = []
    try:
        long = Row(PROMPTS[0], 60, 0.0, 1.0, 0, seed=0)
        shorts = [Row(p, 2, 1.0, 1.0, 0, seed=i) for i, p in enumerate(PROMPTS[1:4])]
        for r in [long] + shorts:
            r.future.add_done_callback(lambda f, r=r: done.append((r.max_tokens, len(f.result().ids))))
        engine.submit([long] + shorts)
        long.future.result(timeout=300)
    finally:
        engine.stop()
    if len(_alone(cfg, params, long)[0]) <= 8:
        pytest.skip("the long row stopped early on these weights")
    # the three short rows went through the second slot, one after another, while the long row decoded
    assert [m for m, _ in done] == [2, 2, 2, 60]


@pytest.mark.slow
def test_warm_up_compiles_every_program_requests_meet(tiny):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=3, prompt_buckets=(8, 16), warmup_max_tokens=40,
                           decode_chunk=4))
    try:
        shapes = engine.warmup_shapes()
        assert shapes == {"prompts": [8, 16], "caches": [64]}  # 16 + 40 < 64: one cache width
        before = engine.num_compilations
        rows = [Row(p, 40 - 7 * i, 1.0, 1.0, 0, seed=i) for i, p in enumerate(PROMPTS)]
        assert all(f.result(timeout=300).ids for f in engine.submit(rows))
        assert engine.num_compilations == before  # every request landed on a warmed shape
    finally:
        engine.stop()


@pytest.mark.slow
def test_cache_width_follows_the_rows(tiny):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=2, decode_chunk=8))
    try:
        # widths step by an eighth of the power of two above, at least 64
        assert [engine.cache_width(r) for r in (10, 65, 129, 300, 449, 511)] == [64, 128, 192, 320, 512, 512]
        row = Row(PROMPTS[1], 100, 0.0, 1.0, 0, seed=3)  # 9 + 100 > 64: the pool grows past 64
        ids = engine.submit([row])[0].result(timeout=300).ids
        assert ("decode", 128, False) in engine._programs
        # a 14-token prompt padded to 16 reaches 14 + 50 = 64 slots once moved to slot 0 (16 + 50 unmoved)
        fits = Row(PROMPTS[3], 50, 0.0, 1.0, 0, seed=4)
        fits_ids = engine.submit([fits])[0].result(timeout=300).ids
        assert engine._width == 64  # its last chunk ran at 64 slots
    finally:
        engine.stop()
    assert ids == _alone(cfg, params, row, longest=100)[0]
    assert fits_ids == _alone(cfg, params, fits)[0]


def test_shift_row_moves_a_left_padded_prompt_to_slot_0():
    k = np.arange(2 * 3 * 8, dtype=np.float32).reshape(1, 2, 3, 8) + 1  # [1, K, Dh, P=8]
    v = np.arange(2 * 8 * 3, dtype=np.float32).reshape(1, 2, 8, 3) + 1  # [1, K, P, Dh]
    (wide,) = S.shift_row(((k, v),), 3, 12)  # a 5-token prompt in slots 3..7
    (narrow,) = S.shift_row(((k, v),), 3, 6)
    np.testing.assert_array_equal(wide[0][..., :5], k[..., 3:])
    np.testing.assert_array_equal(wide[1][:, :, :5], v[:, :, 3:])
    np.testing.assert_array_equal(wide[0][..., 8:], 0)  # zero slots past the row's P
    assert wide[0].shape == (1, 2, 3, 12) and narrow[1].shape == (1, 2, 6, 3)
    np.testing.assert_array_equal(narrow[0][..., :5], k[..., 3:])


def test_engine_settings_are_validated(tiny):
    cfg, params = tiny
    for kwargs, field in [(dict(max_rows=0), "max_rows"), (dict(prompt_buckets=(16, 8)), "prompt_buckets"),
                          (dict(decode_chunk=0), "decode_chunk"), (dict(warmup_max_tokens=-1), "warmup_max_tokens")]:
        with pytest.raises(ValueError, match=field):
            Engine(cfg, params, Tok(), **kwargs)
    s = Sampler(cfg, prompt_buckets=(8, 32))
    assert [s.prompt_width(n, 4) for n in (1, 8, 9, 32)] == [8, 8, 32, 32]


@pytest.mark.slow
def test_a_bad_row_fails_alone(tiny):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=2))
    try:
        bad = Row([3] * 10, cfg.max_position, 0.0, 1.0, 0, seed=0)  # past the context
        good = Row(PROMPTS[0], 3, 0.0, 1.0, 0, seed=0)
        engine.submit([bad, good])
        with pytest.raises(ValueError, match="exceeds the context"):
            bad.future.result(timeout=300)
        assert good.future.result(timeout=300).ids == _alone(cfg, params, good)[0]
    finally:
        engine.stop()
