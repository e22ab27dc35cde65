"""The floor under one batch-32 decode step: SmolLM2-135M's decode kernels timed alone on XLA:CPU.

    python benchmarks/decode_floor.py [--batch 32] [--cache 112]

Each part of a decode step (30 layers, fp32, random weights of SmolLM2's shapes) is jitted on
its own and timed (best of 10), in the layout the sampler uses and in the one it replaced,
printing the ratio:

- `qkv + o` and `mlp` projections: weights output-major `[out, in]` contracted on their last
  axis (`decode.decode_weights`) against input-major `x @ W`;
- `attention` over a `--cache`-slot cache (keys `[B, K, Dh, S]`, values `[B, K, S, Dh]`,
  `decode.decode_cache`): the fused multiply-reduce of `attention.cache_attention` against the
  batched dots it replaced;
- `head`: the tied table `[V, D]` contracted on D, plus the logsumexp and argmax a greedy
  step needs, reduced per vocabulary block (`sampling.vocab_blocks`) against whole rows;
- `T=1 draw`: `sampling.blocked_categorical` against `jax.random.categorical` (not part of
  the greedy floor).

The sum of the sampler's parts is the floor a fused step could reach with these kernels;
`decode_profile.py` gives the step as it runs. Prints a table, then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import time

import jax
import jax.numpy as jnp

L, D, F, N, K, DH, V = 30, 576, 1536, 9, 3, 64, 49152


def best_ms(fn, *args, repeats: int = 10) -> float:
    fn = jax.jit(fn)
    jax.block_until_ready(fn(*args))
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best * 1e3


def weights(shape, n, seed):
    return [0.02 * jax.random.normal(jax.random.key(seed + i), shape) for i in range(n)]


def projections(out_major: bool, pairs, x, mid: int):
    """A chain through L (up `[D, W]`, down `[mid, D]`) pairs, the up output cut to `mid`
    columns in between (q of qkv; silu(gate) * up); out-major weights are `[out, in]`."""
    for up, down in pairs:
        h = jnp.einsum("bi,oi->bo", x, up) if out_major else x @ up
        h = jax.nn.silu(h[:, :mid]) * h[:, -mid:]
        x = x + (jnp.einsum("bi,oi->bo", h, down) if out_major else h @ down)
    return x


def attention(fused: bool, ks, vs, q, mask):
    from prd_jax.model.attention import cache_attention
    for k, v in zip(ks, vs):
        if fused:
            out = cache_attention(q, k, v, mask, 0.125)
        else:  # the batched dots the sampler used before
            s = jnp.einsum("bkgh,bkhs->bkgs", q, k) * 0.125
            p = jax.nn.softmax(jnp.where(mask[:, None, None, :], s, -1e30), axis=-1)
            out = jnp.einsum("bkgs,bksh->bkgh", p, v)
        q = q + 0.01 * out
    return q


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--cache", type=int, default=112, help="cache slots (prompt + generation buckets)")
    args = parser.parse_args()
    b, s = args.batch, args.cache
    x = jax.random.normal(jax.random.key(0), (b, D))
    rows = {}
    for name, width, mid in (("qkv + o", (N + 2 * K) * DH, N * DH), ("mlp", 2 * F, F)):
        ups, downs = weights((D, width), L, 1), weights((mid, D), L, 100)
        new = best_ms(lambda p, x: projections(True, p, x, mid), [(u.T, d.T) for u, d in zip(ups, downs)], x)
        old = best_ms(lambda p, x: projections(False, p, x, mid), list(zip(ups, downs)), x)
        rows[name] = (new, old, 2 * b * L * D * (width + mid))
    from prd_jax.sampling import blocked_argmax, blocked_categorical, vocab_blocks
    ks = [jax.random.normal(jax.random.key(200 + i), (b, K, DH, s)) for i in range(L)]
    vs = [jax.random.normal(jax.random.key(300 + i), (b, K, s, DH)) for i in range(L)]
    q = jax.random.normal(jax.random.key(9), (b, K, N // K, DH))
    mask = jnp.broadcast_to(jnp.arange(s) < s - 8, (b, s))
    new = best_ms(lambda ks, vs, q: attention(True, ks, vs, q, mask), ks, vs, q)
    old = best_ms(lambda ks, vs, q: attention(False, ks, vs, q, mask), ks, vs, q)
    rows["attention"] = (new, old, 4 * b * L * N * DH * s)
    table = 0.02 * jax.random.normal(jax.random.key(7), (V, D))
    blocked = lambda lg: (jax.nn.logsumexp(jax.nn.logsumexp(vocab_blocks(lg), -1), -1), blocked_argmax(lg))
    dense = lambda lg: (jax.nn.logsumexp(lg, axis=-1), jnp.argmax(lg, axis=-1))
    new = best_ms(lambda x, e: blocked(jnp.einsum("bd,vd->bv", x, e)), x, table)
    old = best_ms(lambda x, e: dense(jnp.einsum("bd,vd->bv", x, e)), x, table)
    rows["head + lse + argmax"] = (new, old, 2 * b * V * D)
    logits = 3.0 * jax.random.normal(jax.random.key(8), (b, V))
    keys = jax.random.split(jax.random.key(10), b)
    draw = (best_ms(blocked_categorical, keys, logits),
            best_ms(lambda k, lg: jax.vmap(jax.random.categorical)(k, lg), keys, logits))

    print(f"batch {b}, cache {s} slots, SmolLM2-135M shapes, fp32, {L} layers")
    print(f"{'part':22s}{'ms (ours)':>11s}{'GFLOP/s':>9s}{'ms (before)':>13s}{'speed-up':>10s}")
    for name, (new, old, flops) in rows.items():
        print(f"{name:22s}{new:11.1f}{flops / new / 1e6:9.0f}{old:13.1f}{old / new:9.2f}x")
    floor = sum(r[0] for r in rows.values())
    print(f"{'floor (sum)':22s}{floor:11.1f}")
    print(f"{'T=1 draw (extra)':22s}{draw[0]:11.1f}{'':9s}{draw[1]:13.1f}{draw[1] / draw[0]:9.2f}x")
    print(json.dumps({"batch": b, "cache": s, "floor_ms": round(floor, 2),
                      **{k: {"ms": round(v[0], 2), "before_ms": round(v[1], 2)} for k, v in rows.items()},
                      "t1_draw": {"ms": round(draw[0], 2), "before_ms": round(draw[1], 2)}}))


if __name__ == "__main__":
    main()
