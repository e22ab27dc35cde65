"""Serving cost: useful tokens/s of `prd-jax serve` under concurrent OpenAI clients against
the in-process sampler call of `rollout_throughput.py`, same requests, same run.

    python benchmarks/serve_throughput.py [--requests 256] [--max-new-tokens 256] [--concurrency 32]
        [--max-batch-rows 32] [--decode-chunk 8] [--prompt-buckets auto] [--batch-wait-ms 5] [--port 0]
    python benchmarks/serve_throughput.py --peer transformers [--peer-model-dir DIR] [--peer-warmup 2] ...

Workload: the first `--requests` GSM8K test problems (read with `prd_jax.data.jsonl`, so
`PRD_DATA_DIR` applies) as one-message SmolLM2-135M-Instruct chats, temperature 1, at most
`--max-new-tokens` new tokens, request i with seed i.

Serve: `prd-jax serve --model smollm2-135m` runs as a subprocess (JAX_PLATFORMS as in this
process, else cpu) with `--max-batch-rows` decode slots (default `--concurrency`: one per
client), `--decode-chunk` and `--prompt-buckets` (default `auto`: the multiples of 32 that the
workload's prompts, counted with the model's chat template, round up to); the server
compiles every program those prompts and `--max-new-tokens` meet before `/health` answers 200
(`--warmup-max-tokens`), so no compile lands in the timed pass (`serve_compiles_timed`,
read from the server's "sampler: compiling" log lines, says whether one did). Then
`--concurrency` threads, each with its own `openai.OpenAI` client (the official package; no
retries), take the requests in order and send them as `chat.completions.create(...,
max_tokens, temperature=1.0, seed=i)`. An optional untimed round of `--warmup-requests`
runs first. Useful tokens are the server's `usage.completion_tokens` (stop token included);
the rate is their sum over the timed pass's wall time (first request sent to last answer
received). The server is then stopped (SIGTERM, then wait).

In-process: `rollout_throughput.run_ours` (compile + warm call, then one timed call) runs
all requests as one sampler call with that benchmark's default options (compaction,
grouped prefill, cache window, prompt groups: `inprocess_options` in the JSON), each row
keyed as the server keys seed i (`fold_in(key(i), 0)`), with at most `--inprocess-max-rows`
decode rows in flight (`sampling.max_rows`; default: the server's decode slots). Useful
tokens are the rows' lengths. `ratio` = serve / in-process (the serving overhead, 1.0 =
none). `same_lengths` counts requests whose length matched on both paths (the same key
gives the same tokens unless batch shapes change the float rounding).

Why the in-process call holds the server's rows in flight by default: `--concurrency`
clients that each wait for their answer put at most that many rows in the server's pool,
while one in-process call over all requests decodes them all at once. On a CPU host a decode
step's cost grows far slower than its rows, so the all-rows call's rate measures the larger
batch, not what serving costs. `--inprocess-all-rows` also times that call (`ratio_all_rows`
in the JSON), so both comparisons come from the same run.

Peer (`--peer transformers`, issue 46 §3), instead of the in-process call: the same requests,
greedy (temperature 0) and streamed (`stream_options.include_usage`), against two servers in
turn on 127.0.0.1: `transformers serve` with `--continuous-batching` (its paged cache and
scheduler; CPU, fp32) serving the model as `prd-jax export` writes it (`--peer-model-dir`, else
exported to a temporary folder), then `prd-jax serve` with the flags above. Each gets
`--peer-warmup` untimed requests after `/health` (transformers builds its batching manager at the
first request), then the timed pass. Per server: useful tokens (the usage chunk's
`completion_tokens`) per wall second, time to first token (to the first chunk with text)
and request latency p50 / p95. `ratio` = prd-jax / transformers tokens/s; `same_text` counts
requests both answered with the same text. The last line's JSON holds both sides' figures.

The last stdout line is one JSON object: `requests`, `serve_useful_tokens_per_s`,
`inprocess_useful_tokens_per_s`, `ratio`, then wall seconds, server flags, latencies,
date and machine (`--only serve|inprocess` runs one side; the other's figures and `ratio`
are null). Measured figures are recorded under docs/results/, not here.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the server gets the same platform
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402

import rollout_throughput  # noqa: E402

MODEL = "smollm2-135m"
# rollout_throughput.py's defaults (its --min-rows, --compact-ratio, --max-rows,
# --prefill-groups, --cache-window, --prompt-groups)
INPROCESS_OPTIONS = dict(compact_min_rows=8, compact_ratio=0.5, max_rows=0, prefill_groups=32, cache_window=32,
                         prompt_groups=2)
COMPILE_LINE = "sampler: compiling"
PEER_CB_LINE = "CB: True"  # transformers serve logs "[Request received] Model: ..., CB: True" when it batches


def gsm8k_messages(n: int) -> list:
    """The chats of rollout_throughput.py: one user message per GSM8K test problem."""
    from prd_jax.tasks import get_task

    return [[{"role": "user", "content": p["problem"]}] for p in get_task("gsm8k").problems("test", limit=n)]


def auto_prompt_buckets(messages: list, step: int = 32) -> str:
    """"A,B,...": the multiples of `step` that the workload's chat prompts round up to (a
    prompt is prefilled at its bucket's width, so finer buckets prefill less padding)."""
    from prd_jax.train.setup import model_tokenizer

    tok = model_tokenizer(MODEL, None)
    buckets = sorted({-(-len(tok.encode_chat(m)) // step) * step for m in messages})
    return ",".join(str(b) for b in buckets)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def health(base: str) -> tuple:
    """(status code, body) of GET /health; (0, {}) when nothing answers."""
    try:
        with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, {}
    except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
        return 0, {}


def compiles(log_path: str) -> list:
    """What each "sampler: compiling" line the server logged so far compiled (the line's rest)."""
    with open(log_path, errors="replace") as f:
        return [line.split(COMPILE_LINE, 1)[1].strip() for line in f if COMPILE_LINE in line]


def tail(log_path: str, lines: int = 30) -> str:
    with open(log_path, errors="replace") as f:
        return "".join(f.readlines()[-lines:])


def serve_command(args, port: int) -> list:
    """`prd-jax serve --model MODEL` on 127.0.0.1:`port` with the benchmark's server flags."""
    return [sys.executable, "-m", "prd_jax.cli", "serve", "--model", MODEL, "--host", "127.0.0.1", "--port", str(port),
           "--max-batch-rows", str(args.max_batch_rows), "--batch-wait-ms", str(args.batch_wait_ms),
           "--decode-chunk", str(args.decode_chunk), "--prompt-buckets", args.prompt_buckets,
           "--warmup-max-tokens", str(args.max_new_tokens), "--verbose"]


def start_server(args, port: int, log_file) -> subprocess.Popen:
    cmd = serve_command(args, port)
    env = dict(os.environ, JAX_PLATFORMS=os.environ["JAX_PLATFORMS"], PYTHONUNBUFFERED="1")
    return subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)


def wait_healthy(proc: subprocess.Popen, base: str, log_path: str, timeout_s: float) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the server exited with status {proc.returncode}:\n{tail(log_path)}")
        code, body = health(base)
        if code == 200:
            return body
        if code == 500:
            raise RuntimeError(f"the server reports an error: {body}\n{tail(log_path)}")
        time.sleep(1.0)
    raise RuntimeError(f"the server was not healthy after {timeout_s:.0f} s:\n{tail(log_path)}")


def stop_server(proc: subprocess.Popen, timeout_s: float = 90) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def client_pass(base: str, n: int, concurrency: int, timeout_s: float, request) -> tuple:
    """(wall seconds, `request(client, i)` for i in 0..n-1) of one pass: `concurrency` threads,
    each with its own `openai.OpenAI` client (no retries), take the requests in order; the
    first failure stops the others and is raised after the pass."""
    import openai

    clients = [openai.OpenAI(base_url=f"{base}/v1", api_key="unused", max_retries=0, timeout=timeout_s)
               for _ in range(min(concurrency, n))]
    results, errors = [None] * n, []
    lock, order = threading.Lock(), iter(range(n))

    def worker(client):
        while True:
            with lock:
                i = next(order, None)
            if i is None or errors:
                return
            try:
                results[i] = request(client, i)
            except Exception as e:  # reported after the pass; the other threads stop taking requests
                errors.append((i, e))
                return

    threads = [threading.Thread(target=worker, args=(c,), daemon=True) for c in clients]
    t0 = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    wall = time.perf_counter() - t0
    for c in clients:
        c.close()
    if errors:
        i, e = errors[0]
        raise RuntimeError(f"request {i} failed ({len(errors)} failures): {type(e).__name__}: {e}")
    return wall, results


def serve_pass(base: str, messages: list, max_new: int, concurrency: int, timeout_s: float) -> tuple:
    """(wall seconds, per-request (completion_tokens, prompt_tokens, finish_reason, latency))
    of one `client_pass` of plain chat requests."""

    def request(client, i):
        t = time.perf_counter()
        r = client.chat.completions.create(model=MODEL, messages=messages[i], max_tokens=max_new,
                                           temperature=1.0, seed=i)
        return (r.usage.completion_tokens, r.usage.prompt_tokens, r.choices[0].finish_reason,
                time.perf_counter() - t)

    return client_pass(base, len(messages), concurrency, timeout_s, request)


def run_serve(args, messages: list) -> dict:
    port = args.port or free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.NamedTemporaryFile("w+", prefix="serve_throughput_", suffix=".log", delete=False) as log_file:
        log_path = log_file.name
    try:
        with open(log_path, "w") as log_file:
            t = time.perf_counter()
            proc = start_server(args, port, log_file)
            try:
                body = wait_healthy(proc, base, log_path, args.startup_timeout)
                ready_s = time.perf_counter() - t
                print(f"serve: healthy after {ready_s:.1f} s ({body})", flush=True)
                warm = messages[:args.warmup_requests] if args.warmup_requests else []
                warm_s = 0.0
                if warm:
                    warm_s, _ = serve_pass(base, warm, args.max_new_tokens, args.concurrency, args.request_timeout)
                    print(f"serve: warm-up pass of {len(warm)} requests {warm_s:.1f} s, "
                          f"compiles so far: {len(compiles(log_path))}", flush=True)
                calls0, compiles0 = health(base)[1].get("sampler_calls"), compiles(log_path)
                wall, results = serve_pass(base, messages, args.max_new_tokens, args.concurrency,
                                           args.request_timeout)
                calls1, compiles1 = health(base)[1].get("sampler_calls"), compiles(log_path)
            finally:
                stop_server(proc)
        server_log_tail = tail(log_path, 5)
    finally:
        os.unlink(log_path)
    lengths = np.asarray([r[0] for r in results])
    latency = np.asarray([r[3] for r in results])
    print(f"serve: timed pass {wall:.1f} s, {int(lengths.sum())} useful tokens, mean length {lengths.mean():.1f}, "
          f"{int((lengths >= args.max_new_tokens).sum())} rows at the cap, "
          f"{None if calls0 is None else calls1 - calls0} sampler calls, {len(compiles1) - len(compiles0)} "
          f"compiles {compiles1[len(compiles0):]}; server exit {proc.returncode}", flush=True)
    if proc.returncode not in (0, -signal.SIGTERM):
        print(f"serve: server log tail:\n{server_log_tail}", flush=True)
    return {"wall_s": wall, "lengths": lengths, "prompt_tokens": [r[1] for r in results],
            "finish_stop": sum(r[2] == "stop" for r in results), "latency": latency, "ready_s": ready_s,
            "warmup_s": warm_s, "sampler_calls": None if calls0 is None else calls1 - calls0,
            "compiles_timed": len(compiles1) - len(compiles0), "compiles_total": len(compiles1),
            "exit": proc.returncode}


def run_inprocess(args, messages: list, max_rows: int) -> dict:
    """One timed in-process sampler call over all requests, at most `max_rows` rows in
    flight (0 = all)."""
    import jax
    import jax.numpy as jnp

    from prd_jax.model import load

    model = load(MODEL)
    prompt_ids = [model.tokenizer.encode_chat(m) for m in messages]
    keys = jnp.stack([jax.random.fold_in(jax.random.key(i), 0) for i in range(len(prompt_ids))])
    options = dict(INPROCESS_OPTIONS, max_rows=max_rows)
    seconds, lengths = rollout_throughput.run_ours(model, prompt_ids, keys, args.max_new_tokens, **options)
    print(f"in-process (max_rows {max_rows}): {seconds:.1f} s, {int(lengths.sum())} useful tokens, mean length "
          f"{lengths.mean():.1f}, {int((lengths >= args.max_new_tokens).sum())} rows at the cap", flush=True)
    return {"wall_s": seconds, "lengths": lengths, "prompt_tokens": [len(p) for p in prompt_ids]}


PEER_BLOCK_TOKENS = 32  # tokens per block of transformers' paged KV cache (`--cb-block-size`)


def peer_kv_blocks(kv_tokens: int) -> int:
    """Blocks of `PEER_BLOCK_TOKENS` that hold `kv_tokens` tokens of KV cache."""
    return -(-kv_tokens // PEER_BLOCK_TOKENS)


def peer_command(hf_dir: str, port: int, kv_tokens: int) -> list:
    """`transformers serve DIR` on loopback, the CPU, fp32, continuous batching on (its paged
    cache and scheduler), the model preloaded and pinned. Its KV cache holds `kv_tokens` tokens:
    left unset, transformers sizes it from the memory free on the device, which on a CPU host is
    most of the machine's RAM (one such run was killed for memory)."""
    return [sys.executable, "-m", "transformers.cli.transformers", "serve", hf_dir, "--continuous-batching",
            "--host", "127.0.0.1", "--port", str(port), "--device", "cpu", "--dtype", "float32",
            "--cb-block-size", str(PEER_BLOCK_TOKENS), "--cb-num-blocks", str(peer_kv_blocks(kv_tokens)),
            "--log-level", "warning"]


def peer_kv_tokens(args) -> int:
    """`--peer-kv-tokens`, else every client's row at once: clients x (largest prompt bucket +
    max new tokens), the rows prd-jax serve's slots hold (no preemption on either side)."""
    if args.peer_kv_tokens:
        return args.peer_kv_tokens
    return args.concurrency * (max(int(b) for b in str(args.prompt_buckets).split(",")) + args.max_new_tokens)


def stream_request(client, model: str, messages: list, max_new: int) -> dict:
    """One greedy streamed chat request: its completion and prompt tokens (the usage chunk), finish
    reason, text, time to its first content chunk and to its last chunk (seconds from sending)."""
    t = time.perf_counter()
    ttft, text, finish, usage = None, [], None, None
    stream = client.chat.completions.create(model=model, messages=messages, max_tokens=max_new, temperature=0.0,
                                            stream=True, stream_options={"include_usage": True})
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta is not None and choice.delta.content:
                if ttft is None:
                    ttft = time.perf_counter() - t
                text.append(choice.delta.content)
            finish = choice.finish_reason or finish
        usage = chunk.usage or usage
    latency = time.perf_counter() - t
    if usage is None:
        raise RuntimeError("the stream ended without a usage chunk")
    return {"tokens": usage.completion_tokens, "prompt_tokens": usage.prompt_tokens, "finish": finish,
            "text": "".join(text), "ttft": latency if ttft is None else ttft, "latency": latency}


def stream_pass(base: str, model: str, messages: list, max_new: int, concurrency: int, timeout_s: float) -> tuple:
    """(wall seconds, per-request `stream_request` results) of one `client_pass`."""
    return client_pass(base, len(messages), concurrency, timeout_s,
                       lambda client, i: stream_request(client, model, messages[i], max_new))


def side_figures(wall_s: float, results: list, max_new: int) -> dict:
    """One server's figures from a timed pass: useful tokens (the usage's completion tokens) per
    wall second, time to first token and request latency p50 / p95, rows at the cap."""
    tokens = np.asarray([r["tokens"] for r in results])
    ttft = np.asarray([r["ttft"] for r in results])
    latency = np.asarray([r["latency"] for r in results])
    pct = lambda a, q: round(float(np.percentile(a, q)), 3)  # noqa: E731
    return {"requests": len(results), "wall_s": round(wall_s, 2), "useful_tokens": int(tokens.sum()),
            "useful_tokens_per_s": round(float(tokens.sum()) / wall_s, 2),
            "ttft_p50_s": pct(ttft, 50), "ttft_p95_s": pct(ttft, 95),
            "latency_p50_s": pct(latency, 50), "latency_p95_s": pct(latency, 95),
            "rows_at_cap": int((tokens >= max_new).sum()), "finish_stop": sum(r["finish"] == "stop" for r in results)}


def peer_comparison(prd: dict, peer: dict, prd_results: list, peer_results: list) -> dict:
    """`ratio` = prd-jax serve's useful tokens/s over the peer's (above 1: prd-jax ahead);
    `ttft_p50_ratio` the same for the median time to first token (below 1: prd-jax sooner);
    `same_text` / `same_tokens` / `prompts_match`: how many requests the two answered alike."""
    return {"ratio": round(prd["useful_tokens_per_s"] / peer["useful_tokens_per_s"], 3),
            "ttft_p50_ratio": round(prd["ttft_p50_s"] / peer["ttft_p50_s"], 3) if peer["ttft_p50_s"] else None,
            "same_text": sum(a["text"] == b["text"] for a, b in zip(prd_results, peer_results)),
            "same_tokens": sum(a["tokens"] == b["tokens"] for a, b in zip(prd_results, peer_results)),
            "prompts_match": sum(a["prompt_tokens"] == b["prompt_tokens"] for a, b in zip(prd_results, peer_results))}


def peer_table(sides: dict) -> str:
    """A markdown table of each side's figures (name -> `side_figures`)."""
    lines = ["| server | requests | wall s | useful tokens | tokens/s | TTFT p50 s | TTFT p95 s | latency p50 s "
             "| latency p95 s |", "|---|---|---|---|---|---|---|---|---|"]
    for name, f in sides.items():
        lines.append(f"| {name} | {f['requests']} | {f['wall_s']:.1f} | {f['useful_tokens']} | "
                     f"{f['useful_tokens_per_s']:.2f} | {f['ttft_p50_s']:.2f} | {f['ttft_p95_s']:.2f} | "
                     f"{f['latency_p50_s']:.2f} | {f['latency_p95_s']:.2f} |")
    return "\n".join(lines)


def served_side(name: str, cmd: list, port: int, env: dict, model: str, messages: list, args) -> tuple:
    """Start one server (`cmd` listening on 127.0.0.1:`port`), wait for `/health`, send an untimed
    warm-up round (`--peer-warmup` requests), time the streamed pass, stop it (SIGTERM).
    Returns (`side_figures`, per-request results)."""
    base = f"http://127.0.0.1:{port}"
    with tempfile.NamedTemporaryFile("w+", prefix=f"serve_peer_{name}_", suffix=".log", delete=False) as log_file:
        log_path = log_file.name
    try:
        with open(log_path, "w") as log_file:
            t = time.perf_counter()
            proc = subprocess.Popen(cmd, stdout=log_file, stderr=subprocess.STDOUT, env=env)
            try:
                wait_healthy(proc, base, log_path, args.startup_timeout)
                ready_s = time.perf_counter() - t
                warm = messages[:args.peer_warmup]
                warm_s = stream_pass(base, model, warm, args.max_new_tokens, args.concurrency,
                                     args.request_timeout)[0] if warm else 0.0
                print(f"{name}: healthy after {ready_s:.1f} s, warm-up of {len(warm)} requests {warm_s:.1f} s",
                      flush=True)
                compiles0 = compiles(log_path)
                wall, results = stream_pass(base, model, messages, args.max_new_tokens, args.concurrency,
                                            args.request_timeout)
                compiles_timed = len(compiles(log_path)) - len(compiles0)
            except BaseException:
                print(f"{name}: server log tail:\n{tail(log_path)}", flush=True)
                raise
            finally:
                stop_server(proc, 30)
        with open(log_path, errors="replace") as f:
            log = f.read()
    finally:
        os.unlink(log_path)
    figures = dict(side_figures(wall, results, args.max_new_tokens), ready_s=round(ready_s, 2),
                   warmup_s=round(warm_s, 2), compiles_timed=compiles_timed,
                   **({"continuous_batching": PEER_CB_LINE in log} if name == "transformers serve" else {}))
    print(f"{name}: timed pass {wall:.1f} s, {figures['useful_tokens']} useful tokens, "
          f"{figures['useful_tokens_per_s']:.2f} tokens/s, TTFT p50 / p95 {figures['ttft_p50_s']:.2f} / "
          f"{figures['ttft_p95_s']:.2f} s, {figures['rows_at_cap']} rows at the cap", flush=True)
    return figures, results


def run_peer(args, messages: list) -> dict:
    """The peer comparison: `transformers serve` on `prd-jax export`'s directory of the model
    (`--peer-model-dir`, else exported to a temporary folder) and `prd-jax serve --model`, one
    after the other, the same streamed greedy requests. Returns the JSON record's fields."""
    with tempfile.TemporaryDirectory(prefix="serve_peer_") as tmp:
        hf_dir = args.peer_model_dir
        env = dict(os.environ, JAX_PLATFORMS=os.environ["JAX_PLATFORMS"], PYTHONUNBUFFERED="1",
                   HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        if not hf_dir:
            hf_dir = os.path.join(tmp, "hf")
            done = subprocess.run([sys.executable, "-m", "prd_jax.cli", "export", "--model", MODEL, "--out", hf_dir],
                                  env=env, capture_output=True, text=True)
            if done.returncode:
                raise RuntimeError(f"prd-jax export failed ({done.returncode}):\n{done.stderr[-3000:]}")
        sides, results = {}, {}
        port = args.port or free_port()
        sides["transformers serve"], results["peer"] = served_side(
            "transformers serve", peer_command(hf_dir, port, peer_kv_tokens(args)), port, dict(env, CUDA_VISIBLE_DEVICES=""), hf_dir,
            messages, args)
        port = args.port or free_port()
        sides["prd-jax serve"], results["prd"] = served_side(
            "prd-jax serve", serve_command(args, port), port, env, MODEL, messages, args)
    print(peer_table(sides), flush=True)
    comparison = peer_comparison(sides["prd-jax serve"], sides["transformers serve"], results["prd"], results["peer"])
    print(f"prd-jax serve / transformers serve: {comparison['ratio']:.3f}x useful tokens/s, TTFT p50 "
          f"{comparison['ttft_p50_ratio']}x; {comparison['same_text']} of {len(messages)} answers equal", flush=True)
    if not sides["transformers serve"]["continuous_batching"]:
        print(f"warning: transformers serve did not log {PEER_CB_LINE!r}: it may have decoded one request at a "
              f"time", flush=True)
    return {"peer": args.peer, "prd_serve": sides["prd-jax serve"], "peer_serve": sides["transformers serve"],
            **comparison, "peer_flags": {"continuous_batching": True, "device": "cpu", "dtype": "float32",
                           "kv_cache_tokens": peer_kv_blocks(peer_kv_tokens(args)) * PEER_BLOCK_TOKENS}}


def server_flags(args) -> dict:
    return {"max_batch_rows": args.max_batch_rows, "batch_wait_ms": args.batch_wait_ms,
            "decode_chunk": args.decode_chunk, "prompt_buckets": args.prompt_buckets,
            "warmup_max_tokens": args.max_new_tokens}


def machine(load_start: tuple, load_end: tuple) -> dict:
    return {"platform": platform.platform(), "processor": platform.processor() or platform.machine(),
            "python": platform.python_version(), "cpu_count": os.cpu_count(),
            "jax_platforms": os.environ["JAX_PLATFORMS"], "load_avg_start": [round(x, 2) for x in load_start],
            "load_avg_end": [round(x, 2) for x in load_end]}


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=256)
    parser.add_argument("--max-new-tokens", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=32, help="client threads, one OpenAI client each")
    parser.add_argument("--max-batch-rows", type=int, default=None,
                        help="the server's decode slots, --max-batch-rows (default: --concurrency)")
    parser.add_argument("--decode-chunk", type=int, default=8, help="the server's --decode-chunk")
    parser.add_argument("--prompt-buckets", default="auto",
                        help="the server's --prompt-buckets; auto: the multiples of 32 the workload's prompts round up to")
    parser.add_argument("--batch-wait-ms", type=float, default=5.0, help="the server's --batch-wait-ms")
    parser.add_argument("--port", type=int, default=0, help="0 = pick a free one")
    parser.add_argument("--warmup-requests", type=int, default=0,
                        help="requests in an untimed round before the timed pass (0 = none: the server "
                             "compiles its shapes before it is ready)")
    parser.add_argument("--startup-timeout", type=float, default=900.0, help="seconds to wait for /health")
    parser.add_argument("--request-timeout", type=float, default=3600.0, help="seconds one request may take")
    parser.add_argument("--inprocess-max-rows", type=int, default=None,
                        help="decode rows in flight in the in-process call (default: the server's "
                             "--max-batch-rows; 0 = all requests at once)")
    parser.add_argument("--inprocess-all-rows", action="store_true",
                        help="also time the in-process call with all requests in flight (ratio_all_rows)")
    parser.add_argument("--only", choices=("serve", "inprocess"), default=None,
                        help="run one side (its figures alone, `ratio` null): for a machine too loaded for both")
    parser.add_argument("--peer", choices=("transformers",), default=None,
                        help="instead of the in-process call: the same requests, greedy and streamed, against "
                             "`transformers serve` (continuous batching) and `prd-jax serve`")
    parser.add_argument("--peer-model-dir", default="",
                        help="with --peer: the model as `prd-jax export` writes it (default: exported to a "
                             "temporary folder)")
    parser.add_argument("--peer-kv-tokens", type=int, default=0,
                        help="with --peer: tokens transformers' paged KV cache holds (default: concurrency x "
                             "(largest prompt bucket + max new tokens))")
    parser.add_argument("--peer-warmup", type=int, default=2,
                        help="with --peer: requests in an untimed round on each server before its timed pass")
    return parser


def main():
    parser = build_parser()
    args = parser.parse_args()
    if args.peer and (args.only or args.inprocess_all_rows):
        parser.error("--peer compares two servers: --only and --inprocess-all-rows are for the in-process call")
    if args.peer_warmup < 0:
        parser.error(f"--peer-warmup={args.peer_warmup}: must be >= 0")
    if args.peer_kv_tokens < 0:
        parser.error(f"--peer-kv-tokens={args.peer_kv_tokens}: must be >= 0 (0 = sized from the workload)")
    # SIGTERM (e.g. from `timeout`) unwinds like Ctrl-C, so the server is stopped and its log removed
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    load_start = os.getloadavg()
    print(f"load average at start: {load_start[0]:.2f} {load_start[1]:.2f} {load_start[2]:.2f}", flush=True)
    messages = gsm8k_messages(args.requests)
    if args.prompt_buckets == "auto":
        args.prompt_buckets = auto_prompt_buckets(messages)
    if args.max_batch_rows is None:
        args.max_batch_rows = args.concurrency
    if args.inprocess_max_rows is None:
        args.inprocess_max_rows = args.max_batch_rows
    if args.inprocess_max_rows < 0:
        parser.error(f"--inprocess-max-rows={args.inprocess_max_rows}: must be >= 0 (0 = all requests at once)")
    print(f"server: {args.max_batch_rows} decode slots, chunks of {args.decode_chunk} steps, prompt buckets "
          f"{args.prompt_buckets}", flush=True)
    if args.peer:
        record = run_peer(args, messages)
        print(json.dumps(dict(record, max_new_tokens=args.max_new_tokens, concurrency=args.concurrency,
                              peer_warmup=args.peer_warmup, server_flags=server_flags(args),
                              date=datetime.datetime.now().isoformat(timespec="seconds"),
                              machine=machine(load_start, os.getloadavg()))))
        return
    serve = run_serve(args, messages) if args.only != "inprocess" else None
    ours = run_inprocess(args, messages, args.inprocess_max_rows) if args.only != "serve" else None
    wide = None
    if args.inprocess_all_rows and args.only != "serve" and args.inprocess_max_rows:
        wide = run_inprocess(args, messages, 0)
    load_end = os.getloadavg()

    def of(side, f):  # None for a side that was not run (--only)
        return None if side is None else f(side)

    useful = lambda side: int(side["lengths"].sum())  # noqa: E731
    rate = lambda side: useful(side) / side["wall_s"]  # noqa: E731
    at_cap = lambda side: int((side["lengths"] >= args.max_new_tokens).sum())  # noqa: E731
    both = serve is not None and ours is not None
    if both and serve["prompt_tokens"] != ours["prompt_tokens"]:
        bad = sum(a != b for a, b in zip(serve["prompt_tokens"], ours["prompt_tokens"]))
        print(f"warning: {bad} prompts have a different token count on the server", flush=True)
    record = {
        "requests": len(messages), "serve_useful_tokens_per_s": of(serve, lambda s: round(rate(s), 2)),
        "inprocess_useful_tokens_per_s": of(ours, lambda s: round(rate(s), 2)),
        "ratio": round(rate(serve) / rate(ours), 3) if both else None,
        "inprocess_max_rows": args.inprocess_max_rows,
        "inprocess_all_rows_useful_tokens_per_s": of(wide, lambda s: round(rate(s), 2)),
        "ratio_all_rows": round(rate(serve) / rate(wide), 3) if serve is not None and wide is not None else None,
        "serve_wall_s": of(serve, lambda s: round(s["wall_s"], 2)),
        "inprocess_wall_s": of(ours, lambda s: round(s["wall_s"], 2)),
        "serve_useful_tokens": of(serve, useful), "inprocess_useful_tokens": of(ours, useful),
        "serve_rows_at_cap": of(serve, at_cap), "inprocess_rows_at_cap": of(ours, at_cap),
        "same_lengths": int((serve["lengths"] == ours["lengths"]).sum()) if both else None,
        "prompts_match": serve["prompt_tokens"] == ours["prompt_tokens"] if both else None,
        "serve_latency_p50_s": of(serve, lambda s: round(float(np.percentile(s["latency"], 50)), 2)),
        "serve_latency_p95_s": of(serve, lambda s: round(float(np.percentile(s["latency"], 95)), 2)),
        "serve_sampler_calls_timed": of(serve, lambda s: s["sampler_calls"]),
        "serve_compiles_timed": of(serve, lambda s: s["compiles_timed"]),
        "serve_compiles_total": of(serve, lambda s: s["compiles_total"]),
        "serve_warmup_s": of(serve, lambda s: round(s["warmup_s"], 2)),
        "serve_ready_s": of(serve, lambda s: round(s["ready_s"], 2)),
        "max_new_tokens": args.max_new_tokens, "concurrency": args.concurrency,
        "warmup_requests": args.warmup_requests, "only": args.only,
        "server_flags": server_flags(args),
        "inprocess_options": dict(INPROCESS_OPTIONS, max_rows=args.inprocess_max_rows),
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "machine": machine(load_start, load_end),
    }
    print(json.dumps(record))


if __name__ == "__main__":
    main()
