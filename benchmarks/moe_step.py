"""The GPT-OSS mixture-of-experts layer: grouped dispatch (`ragged_dot`) against the dense path.

    python benchmarks/moe_step.py [--hidden 360 --intermediate 360 --experts 32 --top-k 4]
                                  [--decode-batch 32] [--train-tokens 512] [--dtype float32]

One MoE feed-forward (`prd_jax.model.moe.moe_tokens`, random weights; the default widths are
an eighth of GPT-OSS-20B's, with its 32 experts and top-4, so a CPU host runs it in a minute;
`--hidden 2880 --intermediate 2880` is the real layer) is jitted and timed (best of
`--repeats`) at two shapes in one run:

- decode: `--decode-batch` tokens, forward only (a batch-32 decode step's MoE);
- train: `--train-tokens` tokens, forward + backward (gradients of the params and the input).

For each it prints both dispatches' times, the ratio dense / grouped, and each one's FLOP
utilisation: the useful FLOPs (the k chosen experts per token, `2 N k (2 D F + F D)` forward,
three times that for forward + backward) over the time, divided by the same run's jitted
square-matmul peak. Then one JSON line.
"""

from __future__ import annotations

import argparse
import json
import math
import time

import jax
import jax.numpy as jnp

from prd_jax.model.moe import moe_tokens

_DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}


def best_time(fn, *args, repeats: int) -> float:
    jax.block_until_ready(fn(*args))  # compile
    best = float("inf")
    for _ in range(repeats):
        t = time.perf_counter()
        jax.block_until_ready(fn(*args))
        best = min(best, time.perf_counter() - t)
    return best


def matmul_peak_flops(n: int, dtype, repeats: int) -> float:
    """FLOP/s of a jitted n x n matmul in `dtype` (best of `repeats`)."""
    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    b = jax.random.normal(jax.random.key(1), (n, n), dtype)
    return 2 * n ** 3 / best_time(jax.jit(lambda x, y: x @ y), a, b, repeats=repeats)


def layer_params(e: int, d: int, f: int, dtype) -> dict:
    keys = jax.random.split(jax.random.key(2), 6)
    normal = lambda k, shape, fan_in: (jax.random.normal(k, shape) / math.sqrt(fan_in)).astype(dtype)  # noqa: E731
    return {"router": normal(keys[0], (d, e), d), "router_bias": normal(keys[1], (e,), 1),
            "gate_up": normal(keys[2], (e, d, 2 * f), d), "gate_up_bias": normal(keys[3], (e, 2 * f), 1),
            "down": normal(keys[4], (e, f, d), f), "down_bias": normal(keys[5], (e, d), 1)}


def run(d: int, f: int, e: int, k: int, decode_batch: int, train_tokens: int, dtype: str = "float32",
        repeats: int = 5, peak_n: int = 2048) -> dict:
    """Time both dispatches at the decode and train shapes; prints the table, returns the record."""
    if not 1 <= k <= e:
        raise ValueError(f"top_k={k}; allowed: 1..experts={e}")
    if dtype not in _DTYPES:
        raise ValueError(f"dtype={dtype!r}; allowed: {sorted(_DTYPES)}")
    jdtype = _DTYPES[dtype]
    params = layer_params(e, d, f, jdtype)
    peak = matmul_peak_flops(peak_n, jdtype, repeats)
    useful_fwd = lambda n: 2 * n * k * (2 * d * f + f * d)  # noqa: E731

    def forward(dispatch):
        return jax.jit(lambda p, x: moe_tokens(x, p, k, 7.0, 1.702, dispatch)[0])

    def train(dispatch):
        def loss(p, x):
            return jnp.sum(moe_tokens(x, p, k, 7.0, 1.702, dispatch)[0].astype(jnp.float32))
        return jax.jit(jax.grad(loss, argnums=(0, 1)))

    record = {"hidden": d, "intermediate": f, "experts": e, "top_k": k, "dtype": dtype,
              "backend": jax.default_backend(), "matmul_peak_gflops": peak / 1e9}
    print(f"MoE layer D={d} F={f} E={e} top-{k} {dtype} on {jax.default_backend()}; "
          f"matmul peak {peak / 1e9:.1f} GFLOP/s")
    print(f"{'shape':<22}{'grouped ms':>12}{'dense ms':>10}{'dense/grouped':>15}{'util grouped':>14}{'util dense':>12}")
    for shape, n, make, mult in (("decode", decode_batch, forward, 1), ("train fwd+bwd", train_tokens, train, 3)):
        x = jax.random.normal(jax.random.key(3), (n, d)).astype(jdtype)
        times = {disp: best_time(make(disp), params, x, repeats=repeats) for disp in ("grouped", "dense")}
        flops = mult * useful_fwd(n)
        util = {disp: flops / t / peak for disp, t in times.items()}
        ratio = times["dense"] / times["grouped"]
        print(f"{shape + f' N={n}':<22}{times['grouped'] * 1e3:>12.2f}{times['dense'] * 1e3:>10.2f}{ratio:>15.2f}"
              f"{util['grouped']:>14.1%}{util['dense']:>12.1%}", flush=True)
        record[shape.split()[0]] = {"tokens": n, "grouped_ms": times["grouped"] * 1e3,
                                    "dense_ms": times["dense"] * 1e3, "dense_over_grouped": ratio,
                                    "util_grouped": util["grouped"], "util_dense": util["dense"]}
    return record


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=360)
    parser.add_argument("--intermediate", type=int, default=360)
    parser.add_argument("--experts", type=int, default=32)
    parser.add_argument("--top-k", type=int, default=4)
    parser.add_argument("--decode-batch", type=int, default=32)
    parser.add_argument("--train-tokens", type=int, default=512)
    parser.add_argument("--dtype", default="float32", choices=sorted(_DTYPES))
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--peak-n", type=int, default=2048, help="side of the square matmul for the peak")
    args = parser.parse_args()
    if not 1 <= args.top_k <= args.experts:
        parser.error(f"--top-k={args.top_k}; allowed: 1..--experts={args.experts}")
    record = run(args.hidden, args.intermediate, args.experts, args.top_k, args.decode_batch, args.train_tokens,
                 args.dtype, args.repeats, args.peak_n)
    print(json.dumps(record))


if __name__ == "__main__":
    main()
