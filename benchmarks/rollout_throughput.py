"""Rollout throughput on skewed lengths: useful tokens/s of our compacting sampler against
HF transformers `generate` in static batches of 32, same prompts, same run.

    python benchmarks/rollout_throughput.py --requests 256 --max-new-tokens 256 [--static]

Workload: the first `--requests` GSM8K test problems (read with `prd_jax.data.jsonl`, so
`PRD_DATA_DIR` applies) as SmolLM2-135M-Instruct chat prompts, fp32, temperature 1, top-p 1,
no top-k, stopping at the tokenizer's stop ids or `--max-new-tokens`. Useful tokens are the
tokens each row generates up to and including its stop token. Ours runs all requests as
one sampler call with `compact_min_rows` and `compact_ratio` (the decode batch shrinks to
`compact_ratio` of its rows whenever that many or fewer are live, down to
`compact_min_rows`) and `prefill_groups` (length-sorted row groups prefilled over their
own slot windows, `sampling.grouped_prefill`), `cache_window` (the cache grows with the
decode) and `prompt_groups` (length-sorted prompt groups, each attended over its own prompt
width); transformers runs them in static batches of
`--hf-batch`, each decoding until its longest row stops. `padding_fraction` is the share
of decoded row-steps that are not useful tokens: for ours the row-steps follow the
compaction schedule replayed from the rows' lengths, for transformers each batch costs
its size times its longest row. With `--static`, our sampler without compaction (same
single call) is timed as well. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import jax
import numpy as np


def compaction_row_steps(lengths, sizes, max_new: int) -> int:
    """Decoded row-steps of the compacting loop (`sampling.decode_loop`) for these lengths."""
    lengths = np.asarray(lengths)
    phase, total = 0, 0
    for t in range(max_new):
        live = int((lengths > t).sum())
        if live == 0:
            break
        while phase < len(sizes) - 1 and live <= sizes[phase + 1]:
            phase += 1
        total += sizes[phase]
    return total


def run_ours(model, prompt_ids, keys, max_new: int, **options):
    """Seconds for one warm sampler call over all requests, and the rows' lengths;
    `options` are `SamplingConfig` fields."""
    from prd_jax.sampling import Sampler, SamplingConfig

    tok = model.tokenizer
    sampler = Sampler(model.cfg, pad_id=tok.pad_id)
    scfg = SamplingConfig(max_new, temperature=1.0, stop_ids=tok.stop_ids, **options)
    jax.block_until_ready(sampler(model.params, prompt_ids, keys, scfg).tokens)  # compile + warm up
    t = time.perf_counter()
    out = sampler(model.params, prompt_ids, keys, scfg)
    jax.block_until_ready(out.tokens)
    return time.perf_counter() - t, np.asarray(out.lengths)


def run_hf(gguf_path: str, prompt_ids, max_new: int, batch: int, stop_ids, pad_id: int, seed: int):
    import torch
    import transformers

    torch.set_num_threads(os.cpu_count() or 1)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_pretrained(
        os.path.dirname(gguf_path), gguf_file=os.path.basename(gguf_path), dtype=torch.float32)
    model.eval()
    kwargs = dict(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, eos_token_id=list(stop_ids),
                  pad_token_id=pad_id)
    lengths, row_steps, elapsed = [], 0, 0.0
    with torch.inference_mode():
        for first in range(0, len(prompt_ids), batch):
            group = prompt_ids[first:first + batch]
            longest = max(len(p) for p in group)
            ids = torch.full((len(group), longest), pad_id, dtype=torch.long)
            mask = torch.zeros_like(ids)
            for i, p in enumerate(group):  # left padding, as transformers expects for generation
                ids[i, longest - len(p):] = torch.tensor(p)
                mask[i, longest - len(p):] = 1
            if first == 0:
                model.generate(ids, attention_mask=mask, max_new_tokens=4, **kwargs)  # warm up
            t = time.perf_counter()
            out = model.generate(ids, attention_mask=mask, max_new_tokens=max_new, **kwargs)
            elapsed += time.perf_counter() - t
            gen = out[:, longest:].numpy()
            row_steps += len(group) * gen.shape[1]
            for row in gen:
                hits = np.flatnonzero(np.isin(row, stop_ids))
                lengths.append(int(hits[0]) + 1 if hits.size else len(row))
    return elapsed, np.asarray(lengths), row_steps


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--hf-batch", type=int, default=32)
    parser.add_argument("--min-rows", type=int, default=8, help="smallest compacted decode batch")
    parser.add_argument("--compact-ratio", type=float, default=0.5,
                        help="each compaction phase's rows as a fraction of the previous phase's")
    parser.add_argument("--max-rows", type=int, default=0, help="our rows in flight at once (0 = all)")
    parser.add_argument("--prefill-groups", type=int, default=32,
                        help="length-sorted row groups prefilled over their own slot windows (0 = one prefill)")
    parser.add_argument("--cache-window", type=int, default=32,
                        help="the first decode phase's cache grows this many slots at a time (0 = all at once)")
    parser.add_argument("--prompt-groups", type=int, default=2,
                        help="length-sorted prompt groups, each decoded over its own prompt width (0 = one width)")
    parser.add_argument("--static", action="store_true", help="also time our sampler without compaction")
    parser.add_argument("--skip-hf", action="store_true")
    args = parser.parse_args()

    from prd_jax.model import load
    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.sampling import bucket, compaction_sizes
    from prd_jax.tasks import get_task

    model = load("smollm2-135m")
    tok = model.tokenizer
    problems = get_task("gsm8k").problems("test", limit=args.requests)
    prompt_ids = [tok.encode_chat([{"role": "user", "content": p["problem"]}]) for p in problems]
    keys = jax.random.split(jax.random.key(0), len(prompt_ids))
    n = len(prompt_ids)

    options = dict(max_rows=args.max_rows, prefill_groups=args.prefill_groups, cache_window=args.cache_window,
                   prompt_groups=args.prompt_groups)
    ours_s, ours_len = run_ours(model, prompt_ids, keys, args.max_new_tokens, compact_min_rows=args.min_rows,
                                compact_ratio=args.compact_ratio, **options)
    rows = bucket(n, 1) if not args.max_rows else min(bucket(n, 1), args.max_rows)

    def padding(ratio):  # share of decoded row-steps that are not useful tokens, replayed from the lengths
        steps = compaction_row_steps(ours_len, compaction_sizes(rows, args.min_rows, 1, ratio), args.max_new_tokens)
        return 1 - ours_len.sum() / (steps * max(1, bucket(n, 1) // rows))

    sizes = compaction_sizes(rows, args.min_rows, 1, args.compact_ratio)
    ours_useful = int(ours_len.sum())
    record = {"requests": n, "max_new_tokens": args.max_new_tokens, "prefill_groups": args.prefill_groups,
              "cache_window": args.cache_window, "prompt_groups": args.prompt_groups,
              "compact_ratio": args.compact_ratio, "ours_useful_tokens_per_s": round(ours_useful / ours_s, 2),
              "padding_fraction_by_ratio": {r: round(padding(r), 4) for r in (0.5, 0.75, 0.875)}}
    print(f"ours (compacting, sizes {sizes}): {ours_s:.1f} s, {ours_useful} useful tokens, "
          f"mean length {ours_len.mean():.1f}, {int((ours_len >= args.max_new_tokens).sum())} rows at the cap")
    if args.static:
        static_s, static_len = run_ours(model, prompt_ids, keys, args.max_new_tokens, **options)
        assert (static_len == ours_len).all(), "compaction changed a row's length"
        record["ours_static_useful_tokens_per_s"] = round(ours_useful / static_s, 2)
        print(f"ours (static, one batch): {static_s:.1f} s; compaction speed-up {static_s / ours_s:.2f}x")
    if args.skip_hf:
        hf_s, hf_len, hf_steps = float("nan"), np.zeros(1), 1
    else:
        hf_s, hf_len, hf_steps = run_hf(smollm2_gguf_path(), prompt_ids, args.max_new_tokens, args.hf_batch,
                                        tok.stop_ids, tok.pad_id, seed=0)
        print(f"transformers (static batches of {args.hf_batch}): {hf_s:.1f} s, {int(hf_len.sum())} useful "
              f"tokens, mean length {hf_len.mean():.1f}")
    hf_rate = float(hf_len.sum()) / hf_s
    record.update(hf_useful_tokens_per_s=round(hf_rate, 2), ratio=round(ours_useful / ours_s / hf_rate, 3),
                  padding_fraction_ours=round(padding(args.compact_ratio), 4),
                  padding_fraction_hf=round(1 - float(hf_len.sum()) / hf_steps, 4))
    print(json.dumps({k: record[k] for k in ("requests", "ours_useful_tokens_per_s", "hf_useful_tokens_per_s",
                                             "ratio", "padding_fraction_ours", "padding_fraction_hf")}
                     | {k: v for k, v in record.items() if k not in ("requests",)}))


if __name__ == "__main__":
    main()
