"""The serving engine: concurrent requests decoded together in micro-batches.

Rows (one per prompt and sample) wait at most `wait_s` for company, up to `max_rows` per
sampler call; rows with the same temperature / top-p / top-k share one call. A call
decodes to the bucketed largest `max_tokens` of its rows and each row is cut at its own;
finished rows stop costing compute as the sampler compacts its decode batch
(`SamplingConfig.compact_min_rows`). A row's key is `fold_in(key(seed), sample)`, so a
row's tokens depend on its own seed alone, not on the batch it lands in.

Shapes: every new (batch, prompt width, generation length, sampling settings) compiles a
program, and under load which batches form depends on when requests arrive. Fixed
`batch_buckets` (a call is padded to the smallest that holds its rows) and `prompt_buckets`
(`Sampler.prompt_width`) close that set, and `warmup_max_tokens` compiles all of it, at the
OpenAI API's default sampling (temperature 1, top_p 1), before `/health` reports ready, so
no compile lands on a request. Without buckets, batches take the sampler's powers of two.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import logging
import queue
import threading
import time
from typing import List, Optional

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax import sampling
from prd_jax.sampling import Sampler, SamplingConfig, bucket, length_bucket

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Row:
    """One prompt sample to decode; `top_logprobs` > 0 asks for the first token's alternatives."""

    prompt: List[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    sample: int = 0
    top_logprobs: int = 0
    future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)


@dataclasses.dataclass
class Decoded:
    """A row's result: generated ids (stop token included), their logprobs, whether a stop
    id ended it, and {id: logprob} of the first position's top alternatives."""

    ids: List[int]
    logprobs: List[float]
    stopped: bool
    top: dict


class Engine:
    """Owns the model and a decode thread; `submit` rows, await their futures."""

    def __init__(self, cfg, params, tokenizer, mesh=None, max_rows: int = 64, wait_s: float = 0.005,
                 compact_min_rows: int = 8, batch_buckets=(), prompt_buckets=(), warmup_max_tokens: int = 0):
        batch_buckets = tuple(int(b) for b in batch_buckets)
        if any(b < 1 for b in batch_buckets) or list(batch_buckets) != sorted(set(batch_buckets)):
            raise ValueError(f"batch_buckets={batch_buckets}: must be strictly ascending positive row counts")
        if batch_buckets and batch_buckets[-1] < max_rows:
            raise ValueError(f"max_rows={max_rows} exceeds the largest batch bucket {batch_buckets[-1]}; allowed: "
                             f"max_rows <= {batch_buckets[-1]} (or add a larger bucket)")
        if warmup_max_tokens < 0:
            raise ValueError(f"warmup_max_tokens={warmup_max_tokens}; must be >= 0 (0 = no warm-up grid)")
        self.cfg, self.params, self.tok, self.mesh = cfg, params, tokenizer, mesh
        self.max_rows, self.wait_s, self.compact_min_rows = max_rows, wait_s, compact_min_rows
        self.batch_buckets, self.warmup_max_tokens = batch_buckets, warmup_max_tokens
        self.sampler = Sampler(cfg, mesh, pad_id=tokenizer.pad_id, prompt_buckets=prompt_buckets)
        self.ready = threading.Event()
        self.error: Optional[BaseException] = None
        self.calls = 0  # sampler calls made (tests read the batching from it)
        self._queue: "queue.Queue[Optional[Row]]" = queue.Queue()
        self._logits = {}
        self._thread = threading.Thread(target=self._run, daemon=True, name="prd-jax-engine")
        self._thread.start()

    @property
    def context(self) -> int:
        return self.cfg.max_position

    def submit(self, rows: List[Row]) -> List[concurrent.futures.Future]:
        for r in rows:
            self._queue.put(r)
        return [r.future for r in rows]

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    def _run(self) -> None:
        try:  # the first program (and the warm-up grid) compiles before /health says ready
            self._decode([Row([self._filler], 1, 0.0, 1.0, 0, 0)])
            for rows, width in self.warmup_shapes():
                self._decode([Row([self._filler] * width, self.warmup_max_tokens, 1.0, 1.0, 0, 0)] * rows)
            self.ready.set()
        except BaseException as e:  # reported by /health
            self.error = e
            log.exception("engine warm-up failed")
            return
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch, deadline = [first], time.monotonic() + self.wait_s
            while len(batch) < self.max_rows:
                try:
                    row = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    break
                if row is None:
                    self._queue.put(None)
                    break
                batch.append(row)
            groups = {}
            for row in batch:
                groups.setdefault((row.temperature, row.top_p, row.top_k), []).append(row)
            for rows in groups.values():
                try:
                    for row, out in zip(rows, self._decode(rows)):
                        row.future.set_result(out)
                except Exception as e:  # a failed call fails its rows; the server stays up
                    log.exception("decode failed")
                    for row in rows:
                        if not row.future.done():
                            row.future.set_exception(e)

    @property
    def _filler(self) -> int:
        return self.tok.stop_ids[0] if self.tok.stop_ids else 0

    def warmup_shapes(self) -> list:
        """(rows, prompt width) of each call the warm-up makes: every batch bucket up to
        `max_rows` times every prompt bucket that leaves room for `warmup_max_tokens`."""
        if not self.warmup_max_tokens:
            return []
        room = self.cfg.max_position - self.warmup_max_tokens
        widths = [w for w in self.sampler.prompt_buckets if w <= room] or [min(16, room)]
        batches = [b for b in self.batch_buckets if b <= self.max_rows] or [
            2 ** i for i in range(self.max_rows.bit_length()) if 2 ** i <= self.max_rows]
        return [(b, w) for b in batches for w in widths]

    def _padded(self, rows: List[Row]) -> List[Row]:
        """`rows` and filler rows up to the smallest batch bucket that holds them."""
        size = next((b for b in self.batch_buckets if b >= len(rows)), len(rows))
        first = rows[0]
        return rows + [dataclasses.replace(first, prompt=[self._filler], seed=0, top_logprobs=0,
                                           future=concurrent.futures.Future())] * (size - len(rows))

    def _decode(self, rows: List[Row]) -> List[Decoded]:
        self.calls += 1
        real, rows = len(rows), self._padded(rows)
        longest = max(len(r.prompt) for r in rows)
        want = max(r.max_tokens for r in rows)
        gen = max(want, min(length_bucket(want), self.cfg.max_position - longest))
        first = rows[0]
        compact = self.compact_min_rows if bucket(len(rows), 1) > self.compact_min_rows else 0
        scfg = SamplingConfig(gen, first.temperature, first.top_p, first.top_k, 1, tuple(self.tok.stop_ids),
                              compact_min_rows=compact)
        keys = jnp.stack([jax.random.fold_in(jax.random.key(r.seed), r.sample) for r in rows])
        out = self.sampler(self.params, [r.prompt for r in rows], keys, scfg)
        tokens, lengths, logprobs = (np.asarray(x) for x in (out.tokens, out.lengths, out.logprobs))
        stopped = np.asarray(out.stopped)
        tops = self._top(rows)
        result = []
        for i, r in enumerate(rows[:real]):
            n = min(int(lengths[i]), r.max_tokens)
            result.append(Decoded(tokens[i, :n].tolist(), logprobs[i, :n].tolist(),
                                  bool(stopped[i]) and n == int(lengths[i]), tops.get(i, {})))
        return result

    def _top(self, rows: List[Row]) -> dict:
        """{row: {id: logprob}} of the first generated position for rows that ask for it."""
        want = [i for i, r in enumerate(rows) if r.top_logprobs > 0]
        if not want:
            return {}
        prompts = [rows[i].prompt for i in want]
        width = length_bucket(max(len(p) for p in prompts))
        batch = length_bucket(len(prompts), 1)
        tok = np.full((batch, width), self.tok.pad_id, np.int32)
        lens = np.ones((batch,), np.int32)
        for j, p in enumerate(prompts):  # left-padded, as the sampler's prompts
            tok[j, width - len(p):] = p
            lens[j] = len(p)
        if (batch, width) not in self._logits:
            self._logits[(batch, width)] = jax.jit(
                lambda params, t, n: jax.nn.log_softmax(sampling.next_logits(self.cfg, params, t, n, mesh=self.mesh)))
        logp = np.asarray(self._logits[(batch, width)](self.params, jnp.asarray(tok), jnp.asarray(lens)))
        out = {}
        for j, i in enumerate(want):
            k = min(rows[i].top_logprobs, logp.shape[1])
            best = np.argsort(-logp[j], kind="stable")[:k]
            out[i] = {int(t): float(logp[j, t]) for t in best}
        return out
