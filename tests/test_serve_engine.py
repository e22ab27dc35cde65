"""The serving engine's fixed shapes: batch and prompt buckets close the set of programs a
server compiles, the warm-up compiles all of it, and padding leaves each row's tokens as
that row decoded alone."""

import time

import jax
import pytest

from prd_jax.model import get_model_config, init_params
from prd_jax.sampling import Sampler, SamplingConfig
from prd_jax.serve.engine import Engine, Row

PROMPTS = [[5, 17, 33, 2, 9], [7, 8, 40, 41, 42, 43, 44, 45, 46], [250, 3, 3]]


class Tok:
    pad_id, stop_ids = 0, (1,)


@pytest.fixture(scope="module")
def tiny():
    cfg = get_model_config("tiny")
    return cfg, init_params(cfg, jax.random.key(0))


def _ready(engine, timeout=600):
    deadline = time.monotonic() + timeout
    while not engine.ready.wait(1.0):
        assert engine.error is None, engine.error
        assert time.monotonic() < deadline
    return engine


def _serve(engine, prompts, max_tokens, temperature):
    rows = [Row(p, max_tokens, temperature, 1.0, 0, seed=i) for i, p in enumerate(prompts)]
    return [f.result(timeout=600) for f in engine.submit(rows)]


@pytest.mark.slow
def test_buckets_and_warmup_leave_no_compile_for_requests(tiny):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=4, wait_s=0.2, batch_buckets=(2, 4), prompt_buckets=(8, 16),
                           warmup_max_tokens=6))
    try:
        assert engine.warmup_shapes() == [(2, 8), (2, 16), (4, 8), (4, 16)]
        # the readiness probe (1 row, 1 token: its own generation length) and the 2 x 2 grid
        assert engine.sampler.num_compilations == 1 + 4
        before = engine.calls
        for prompts in (PROMPTS, PROMPTS[:1], PROMPTS + [[9] * 14]):
            out = _serve(engine, prompts, 6, 1.0)
            assert [len(o.ids) for o in out] == [min(6, len(o.ids)) for o in out] and all(o.ids for o in out)
        assert engine.calls > before
        assert engine.sampler.num_compilations == 5  # every request landed on a warmed shape
    finally:
        engine.stop()


@pytest.mark.slow
def test_padded_calls_give_each_row_its_tokens_alone(tiny):
    cfg, params = tiny
    engine = _ready(Engine(cfg, params, Tok(), max_rows=4, wait_s=0.2, batch_buckets=(4,), prompt_buckets=(32,)))
    try:
        out = _serve(engine, PROMPTS, 8, 0.0)
    finally:
        engine.stop()
    alone = Sampler(cfg, pad_id=0)
    for p, o in zip(PROMPTS, out):
        ref = alone(params, [p], jax.random.key(0), SamplingConfig(8, 0.0, stop_ids=(1,)))
        n = int(ref.lengths[0])
        assert o.ids == [int(t) for t in ref.tokens[0, :n]]


def test_bucket_settings_are_validated(tiny):
    cfg, params = tiny
    with pytest.raises(ValueError, match="batch_buckets"):
        Engine(cfg, params, Tok(), max_rows=4, batch_buckets=(4, 2))
    with pytest.raises(ValueError, match="max_rows=8 exceeds the largest batch bucket 4"):
        Engine(cfg, params, Tok(), max_rows=8, batch_buckets=(2, 4))
    with pytest.raises(ValueError, match="prompt_buckets"):
        Sampler(cfg, prompt_buckets=(16, 0))
    s = Sampler(cfg, prompt_buckets=(8, 32))
    assert [s.prompt_width(n, 4) for n in (1, 8, 9, 32)] == [8, 8, 32, 32]
    assert s.prompt_width(33, 4) == 48  # past the last bucket: the length ladder
