"""The serving engine: concurrent requests decoded together by continuous batching.

Each request row (one per prompt and sample) takes a free slot of a fixed pool of
`max_rows` decode slots (`prd_jax.serve.slots`): its prompt is prefilled into the slot and
it decodes with whatever rows are live, in chunks of `decode_chunk` steps. A row that stops
(a stop id, or its own `max_tokens`) is answered at the end of that chunk and its slot goes
to the next waiting row, so no request waits for a longer neighbour and the pool stays full
while requests wait. Rows differ freely in temperature / top-p / top-k (per-row settings)
and length. A row's key is `fold_in(key(seed), sample)` and its t-th token uses
`fold_in(key, t)`, as `Sampler` does, so its tokens depend on its own seed alone.

Shapes: a program per prompt width (prefill), per cache width (decode chunk), and small
insert / resize programs. Prompts are padded to `prompt_buckets` (else the length ladder)
for the prefill; the insert then moves a prompt of n tokens to cache slots 0 .. n-1 (on
models without sliding-window layers), so a row reaches n + t slots at its t-th token, not
its padded width + t. Cache widths step by an eighth of the power of two above (64, 128,
..., 448, 512, 640, ...), so the pool attends over at most 1/8 more slots than the live
rows reach. `warmup_max_tokens` compiles every program that requests of
up to that many new tokens on prompts within the buckets can meet, before `/health` reports
ready, so no compile lands on a request. On a mesh every program is compiled ahead too, for
a fixed layout (the pool's caches with rows over `data` and kv heads over `tensor`, the rest
replicated) that each program's outputs keep. Every compile is logged as "sampler: compiling".
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import functools
import logging
import queue
import threading
import time
from typing import Callable, List, Optional, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from prd_jax.mesh import logical_to_spec
from prd_jax.model.decode import DECODE_CACHE_AXES, decode_weights, ring_windows
from prd_jax.sampling import bucket, length_bucket
from prd_jax.serve import slots as S

log = logging.getLogger(__name__)
MIN_WIDTH = 64  # the smallest cache width of the pool
SERVICE_WINDOW = 32  # finished rows whose service times `mean_service_s` averages


@dataclasses.dataclass
class Row:
    """One prompt sample to decode.

    `top_logprobs` > 0: that many alternatives at every position. `stop_ids`: the ids that end
    it (None: the tokenizer's). `min_tokens`: its stop ids are masked until it has that many
    tokens. `stop_check(ids, fresh)`: after every chunk, with `fresh` the number of ids before
    it; returns how many ids to keep when a stop string completed (the row then stops) or None.
    `on_tokens(Update)`: called from the decode thread with each chunk's tokens. Rows of one
    request share `request` (the queue counts requests). `cancelled` (set by `Engine.cancel`):
    it leaves the pool at the next chunk boundary and its future is cancelled."""

    prompt: List[int]
    max_tokens: int
    temperature: float
    top_p: float
    top_k: int
    seed: int
    sample: int = 0
    top_logprobs: int = 0
    stop_ids: Optional[Sequence[int]] = None
    min_tokens: int = 0
    stop_check: Optional[Callable[[List[int], int], Optional[int]]] = None
    on_tokens: Optional[Callable[["Update"], None]] = None
    request: object = None
    cancelled: bool = False
    future: concurrent.futures.Future = dataclasses.field(default_factory=concurrent.futures.Future)


@dataclasses.dataclass
class Update:
    """A chunk's new tokens of one row: ids, logprobs, {id: logprob} alternatives per position
    (empty dicts without `top_logprobs`), and the finish reason once it has finished."""

    ids: List[int]
    logprobs: List[float]
    top: List[dict]
    finish: Optional[str] = None


@dataclasses.dataclass
class Decoded:
    """A row's result: generated ids (a stop id included; a stop string's tokens up to the one
    completing it), their logprobs, whether a stop id or string ended it (else its
    `max_tokens`), and {id: logprob} of the top alternatives at every position."""

    ids: List[int]
    logprobs: List[float]
    stopped: bool
    top: List[dict]

    @property
    def finish_reason(self) -> str:
        return "stop" if self.stopped else "length"


@dataclasses.dataclass
class _Live:
    """Host view of an occupied slot."""

    row: Row
    base: int  # the cache slot of its first generated token (its prompt's length, or padded width)
    ids: list
    logprobs: list
    top: list
    admitted: float = 0.0  # time.monotonic() at admission

    @property
    def index(self) -> int:
        return self.base + len(self.ids)


class Engine:
    """Owns the model, the slot pool and a decode thread; `submit` rows, await their futures."""

    def __init__(self, cfg, params, tokenizer, mesh=None, max_rows: int = 32, wait_s: float = 0.005,
                 prompt_buckets=(), warmup_max_tokens: int = 0, decode_chunk: int = 8, max_stop_ids: int = 16):
        buckets = tuple(int(b) for b in prompt_buckets)
        if max_rows < 1:
            raise ValueError(f"max_rows={max_rows}; must be >= 1 (the number of decode slots)")
        if any(b < 1 for b in buckets) or list(buckets) != sorted(set(buckets)):
            raise ValueError(f"prompt_buckets={buckets}: must be strictly ascending positive widths")
        if buckets and buckets[-1] >= cfg.max_position:
            raise ValueError(f"prompt_buckets={buckets}: the last must be < the context {cfg.max_position}")
        if warmup_max_tokens < 0:
            raise ValueError(f"warmup_max_tokens={warmup_max_tokens}; must be >= 0 (0 = no warm-up grid)")
        if decode_chunk < 1:
            raise ValueError(f"decode_chunk={decode_chunk}; must be >= 1 (decode steps between admissions)")
        self.cfg, self.params, self.tok, self.mesh = cfg, params, tokenizer, mesh
        self._shift = ring_windows(cfg) is None  # rings keep their absolute slots: no moved prompts
        self.max_rows, self.wait_s, self.steps = max_rows, wait_s, decode_chunk
        self.prompt_buckets, self.warmup_max_tokens = buckets, warmup_max_tokens
        self.ready = threading.Event()
        self.error: Optional[BaseException] = None
        self.calls = 0  # decode chunks run
        self.peak_rows = 0  # most rows live in one chunk
        self.prefills = 0  # prompts prefilled (the rows of one prompt share one: `n` fans out)
        self.stop_width = len(tokenizer.stop_ids) + max_stop_ids  # stop ids a row can hold
        self._programs: dict = {}
        self._live: List[Optional[_Live]] = [None] * max_rows
        self._queue: "queue.Queue[Optional[Row]]" = queue.Queue()
        self._queued: dict = {}  # request -> its rows not yet taken from the queue
        self._lock = threading.Lock()
        self._last_prefill: tuple = ()  # (prompt, width, logits, caches) of the last prefill
        self._service = collections.deque(maxlen=SERVICE_WINDOW)  # seconds from admission to answer, per row
        self._thread = threading.Thread(target=self._run, daemon=True, name="prd-jax-engine")
        self._thread.start()

    @property
    def context(self) -> int:
        return self.cfg.max_position

    @property
    def num_compilations(self) -> int:
        return len(self._programs)

    @property
    def slots_in_use(self) -> int:
        return sum(x is not None for x in self._live)

    @property
    def queued_requests(self) -> int:
        """Requests with rows waiting for a slot."""
        return len(self._queued)

    @property
    def queued_rows(self) -> int:
        """Rows waiting for a slot (a request of `n` samples waits with `n`)."""
        with self._lock:
            return sum(self._queued.values())

    @property
    def mean_service_s(self) -> Optional[float]:
        """Mean seconds from admission to answer of the last `SERVICE_WINDOW` finished rows
        (None before any row finished; cancelled rows do not count)."""
        with self._lock:
            times = list(self._service)
        return sum(times) / len(times) if times else None

    def submit(self, rows: List[Row]) -> List[concurrent.futures.Future]:
        with self._lock:
            for r in rows:
                key = id(r) if r.request is None else r.request
                self._queued[key] = self._queued.get(key, 0) + 1
        for r in rows:
            self._queue.put(r)
        return [r.future for r in rows]

    @staticmethod
    def cancel(rows: List[Row]) -> None:
        """Mark `rows` cancelled: waiting ones never start, live ones leave at the next chunk."""
        for r in rows:
            r.cancelled = True

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=30)

    # -- shapes -------------------------------------------------------------------------

    def prompt_width(self, n: int, max_tokens: int) -> int:
        """The padded width of an `n`-token prompt (`Sampler.prompt_width`'s rule)."""
        fixed = [b for b in self.prompt_buckets if b >= n]
        width = fixed[0] if fixed else length_bucket(n, 16)
        return max(n, min(width, self.context - max_tokens))

    def cache_width(self, reach: int) -> int:
        """The pool's cache width for rows reaching `reach` slots: a multiple of an eighth of
        the power of two above (at least `MIN_WIDTH`): 64, 128, ..., 512, 640, 768, ..."""
        step = max(MIN_WIDTH, bucket(reach, MIN_WIDTH) // 8)
        return min(self.context, -(-max(reach, 1) // step) * step)

    def _base(self, n: int, width: int) -> int:
        """Where a prompt of `n` tokens padded to `width` puts its first generated token: slot
        n when the pool moves prompts to slot 0 (no sliding layer), else slot `width`."""
        return n if self._shift else width

    def warmup_shapes(self) -> dict:
        """The prompt widths and cache widths the warm-up compiles: every prompt bucket, and
        every cache width a row of at most `warmup_max_tokens` on them can need."""
        if not self.warmup_max_tokens:
            return {"prompts": [], "caches": []}
        room = self.context - self.warmup_max_tokens
        prompts = [w for w in self.prompt_buckets if w <= room] or [min(16, room)]
        top = self.cache_width(prompts[-1] + self.warmup_max_tokens)
        low = 1 if self._shift else prompts[0] + 1  # moved prompts start at slot 0
        caches = sorted({self.cache_width(r) for r in range(low, top + 1)})
        return {"prompts": prompts, "caches": caches}

    # -- programs -----------------------------------------------------------------------

    def _abstract_pool(self, width: int):
        return jax.eval_shape(lambda: S.empty_pool(self.cfg, self.max_rows, width, self.cfg.vocab_size,
                                                   self.stop_width))

    def _spec(self, abstract, shardings=None):
        """`abstract` (a tree of shapes) as a program's argument: on a mesh, placed by
        `shardings` (else replicated); unchanged on one device."""
        if self.mesh is None:
            return abstract
        shardings = shardings or self._replicated(abstract)
        return jax.tree.map(lambda a, sh: jax.ShapeDtypeStruct(a.shape, a.dtype, sharding=sh), abstract, shardings)

    def _replicated(self, tree):
        return jax.tree.map(lambda _: NamedSharding(self.mesh, PartitionSpec()), tree)

    def _caches_sharding(self, caches):
        """Decode caches (`decode_cache` layout) as `decode_step_groups` constrains them: rows
        over `data`, kv heads over `tensor` (a dimension they do not divide stays whole)."""
        if self.mesh is None:
            return None
        k_axes, v_axes = DECODE_CACHE_AXES
        named = lambda names, x: NamedSharding(self.mesh, logical_to_spec(names, self.mesh, x.shape))  # noqa: E731
        return tuple((named(k_axes, k), named(v_axes, v)) for k, v in caches)

    def _pool_sharding(self, width: int):
        """The pool's fixed layout on a mesh (None on one device): caches as
        `_caches_sharding`, the per-row fields and logits replicated."""
        if self.mesh is None:
            return None
        pool = self._abstract_pool(width)
        return dict(self._replicated(pool), caches=self._caches_sharding(pool["caches"]))

    def _compile(self, fn, specs: tuple, out=None, donate: tuple = ()):
        """`fn` compiled ahead for `specs` (`_spec` shapes, or arrays whose placement it
        takes). On a mesh every output has a fixed sharding (`out`, else replicated) that the
        next program's specs declare, so each program compiles once, ahead (the warm-up),
        for the placements requests meet."""
        if self.mesh is None:
            return jax.jit(fn, donate_argnums=donate).lower(*specs).compile()
        out = out or self._replicated(jax.eval_shape(fn, *specs))
        return jax.jit(fn, donate_argnums=donate, out_shardings=out).lower(*specs).compile()

    def _program(self, key: tuple, build):
        if key not in self._programs:
            log.info("sampler: compiling %s (compilation #%d)", key, len(self._programs) + 1)
            self._programs[key] = build()
        return self._programs[key]

    def _prefilled(self, width: int):
        """(logits, caches) shapes of a prompt prefilled at `width` (`prefill_row`)."""
        return jax.eval_shape(lambda p, n: S.prefill_row(self.cfg, self.params, p, n, width),
                              jax.ShapeDtypeStruct((1, width), jnp.int32), jax.ShapeDtypeStruct((1,), jnp.int32))

    def _prefill(self, width: int):
        cfg = self.cfg
        logits, caches = self._prefilled(width)
        out = None if self.mesh is None else (self._replicated(logits), self._caches_sharding(caches))
        return self._program(("prefill", width), lambda: self._compile(
            lambda params, p, n: S.prefill_row(cfg, params, p, n, width),
            (self.params, self._spec(jax.ShapeDtypeStruct((1, width), jnp.int32)),
             self._spec(jax.ShapeDtypeStruct((1,), jnp.int32))), out))

    def _insert(self, prompt_width: int, width: int):
        cfg = self.cfg

        def fn(pool, slot, logits, caches, key, fields):
            if self._shift:  # the prompt (n = fields["index"] tokens) moves to slots 0 .. n-1
                caches = S.shift_row(caches, prompt_width - fields["index"], width)
            else:
                caches = S.resize(cfg, dict(caches=caches), width)["caches"]
            return S.insert(pool, slot, logits, caches, key, fields)
        logits, caches = self._prefilled(prompt_width)
        fields = {k: jax.ShapeDtypeStruct(v.shape[1:], v.dtype) for k, v in self._abstract_pool(width).items()
                  if k in S.ROW_FIELDS}
        specs = (self._spec(self._abstract_pool(width), self._pool_sharding(width)),
                 self._spec(jax.ShapeDtypeStruct((), jnp.int32)), self._spec(logits),
                 self._spec(caches, self._caches_sharding(caches)),
                 self._spec(jax.eval_shape(lambda: jax.random.key(0))), self._spec(fields))
        return self._program(("insert", prompt_width, width),
                             lambda: self._compile(fn, specs, self._pool_sharding(width), donate=(0,)))

    def _resize(self, old: int, new: int):
        cfg = self.cfg
        return self._program(("resize", old, new), lambda: self._compile(
            lambda pool: S.resize(cfg, pool, new), (self._spec(self._abstract_pool(old), self._pool_sharding(old)),),
            self._pool_sharding(new)))

    def _decode(self, width: int, filtered: bool, top: bool = False):
        fn = functools.partial(S.decode_chunk, self.cfg, steps=self.steps, pad_id=self.tok.pad_id,
                               filtered=filtered, top=S.MAX_TOP if top else 0, mesh=self.mesh)
        key = ("decode", width, filtered) + (("top",) if top else ())
        pool = self._spec(self._abstract_pool(width), self._pool_sharding(width))

        def build():
            if self.mesh is None:
                return self._compile(fn, (self._weights, pool), donate=(1,))
            _, *rest = jax.eval_shape(fn, self._weights, pool)
            return self._compile(fn, (self._weights, pool), (self._pool_sharding(width), *self._replicated(rest)),
                                 donate=(1,))
        return self._program(key, build)

    def _release(self):
        spec = self._spec(jax.ShapeDtypeStruct((self.max_rows,), bool))
        return self._program(("release",), lambda: self._compile(S.release, (spec, spec)))

    # -- the decode thread --------------------------------------------------------------

    def _run(self) -> None:
        try:  # the first programs (and the warm-up grid) compile before /health says ready
            self._weights = jax.jit(functools.partial(decode_weights, self.cfg, mesh=self.mesh))(self.params)
            self._width = MIN_WIDTH if self.context >= MIN_WIDTH else self.context
            placed = {} if self.mesh is None else {"out_shardings": self._pool_sharding(self._width)}
            self._pool = jax.jit(lambda: S.empty_pool(self.cfg, self.max_rows, self._width, self.cfg.vocab_size,
                                                      self.stop_width), **placed)()
            self._warm_up()
            self._service.clear()  # the warm-up's rows timed compiles, not service
            self.ready.set()
        except BaseException as e:  # reported by /health
            self.error = e
            log.exception("engine warm-up failed")
            return
        while True:
            self._drop_cancelled()
            rows = self._take()
            if rows is None:
                return
            for row in rows:
                try:
                    self._admit(row)
                except Exception as e:  # a failed row fails alone; the server stays up
                    log.exception("admission failed")
                    row.future.set_exception(e)
            if any(self._live):
                try:
                    self._chunk()
                except Exception as e:  # a failed chunk fails its rows; the server stays up
                    log.exception("decode failed")
                    for i, live in enumerate(self._live):
                        if live is not None and not live.row.future.done():
                            live.row.future.set_exception(e)
                        self._live[i] = None

    def _warm_up(self) -> None:
        """The probe row (one token), then the grid of `warmup_shapes`."""
        self._serve_now(Row([self._filler], 1, 0.0, 1.0, 0, 0))
        self._release()
        shapes = self.warmup_shapes()
        for width in shapes["caches"]:
            self._decode(width, False)
        for p in shapes["prompts"]:
            self._prefill(p)
            for width in shapes["caches"]:
                if width > p or self._shift:  # a moved prompt fits any width past its length
                    self._insert(p, width)
        for a in shapes["caches"]:
            for b in shapes["caches"]:
                if a != b:
                    self._resize(a, b)

    def _serve_now(self, row: Row) -> Decoded:
        self._admit(row)
        while not row.future.done():
            self._chunk()
        return row.future.result()

    @property
    def _filler(self) -> int:
        return self.tok.stop_ids[0] if self.tok.stop_ids else 0

    def _take(self) -> Optional[List[Row]]:
        """Waiting rows, at most one per free slot; blocks (then waits `wait_s` for company)
        only when no row is live. None: stop."""
        free = self._live.count(None)
        rows: List[Row] = []
        idle = free == self.max_rows
        while len(rows) < free:
            try:
                if idle and not rows:
                    row = self._queue.get()
                elif idle:
                    row = self._queue.get(timeout=self.wait_s)
                else:
                    row = self._queue.get_nowait()
            except queue.Empty:
                break
            if row is None:
                for r in rows:
                    r.future.cancel()
                return None
            with self._lock:
                key = id(row) if row.request is None else row.request
                self._queued[key] -= 1
                if not self._queued[key]:
                    del self._queued[key]
            if row.cancelled:
                row.future.cancel()
                continue
            rows.append(row)
        return rows

    def _drop_cancelled(self) -> None:
        """Cancelled live rows leave the pool now; their slots take waiting rows before the next chunk."""
        gone = [i for i, x in enumerate(self._live) if x is not None and x.row.cancelled]
        if not gone:
            return
        mask = np.zeros((self.max_rows,), bool)
        mask[gone] = True
        self._pool = dict(self._pool, active=self._release()(self._pool["active"], mask))
        for i in gone:
            self._live[i].row.future.cancel()
            self._live[i] = None

    def _admit(self, row: Row) -> None:
        """Prefill `row` into a free slot (growing the pool's cache width if it needs more); rows
        of the prompt just prefilled (a request's `n` samples) reuse its prefill."""
        slot = self._live.index(None)
        n = len(row.prompt)
        if n < 1 or n + row.max_tokens > self.context:
            raise ValueError(f"prompt of {n} tokens + max_tokens={row.max_tokens} exceeds the context {self.context}")
        stops = list(self.tok.stop_ids if row.stop_ids is None else row.stop_ids)
        if len(stops) > self.stop_width:
            raise ValueError(f"{len(stops)} stop ids; this engine holds at most {self.stop_width} per row")
        width = self.prompt_width(n, row.max_tokens)
        if self._last_prefill[:2] != (row.prompt, width):
            tokens = np.full((1, width), self.tok.pad_id, np.int32)
            tokens[0, width - n:] = row.prompt
            # numpy arguments: `jnp.asarray` would compile a staging program per new width
            logits, caches = self._prefill(width)(self.params, tokens, np.asarray([n], np.int32))
            self._last_prefill = (list(row.prompt), width, logits, caches)
            self.prefills += 1
        logits, caches = self._last_prefill[2:]
        base = self._base(n, width)
        self._fit(extra=base + min(self.steps, row.max_tokens))
        fields = dict(index=np.int32(base), start=np.int32(base - n), count=np.int32(0),
                      limit=np.int32(row.max_tokens), active=np.bool_(True), temperature=np.float32(row.temperature),
                      top_p=np.float32(row.top_p), top_k=np.int32(row.top_k), min_tokens=np.int32(row.min_tokens),
                      stops=np.asarray(stops + [-1] * (self.stop_width - len(stops)), np.int32))
        key = S.row_key(row.seed, row.sample)
        self._pool = self._insert(width, self._width)(self._pool, np.int32(slot), logits, caches, key, fields)
        self._live[slot] = _Live(row, base, [], [], [], time.monotonic())

    def _fit(self, extra: int = 0) -> None:
        """Resize the pool to the cache width the live rows (and `extra`) reach in the next chunk."""
        reach = max([extra] + [min(live.index + self.steps, live.base + live.row.max_tokens)
                               for live in self._live if live is not None])
        want = self.cache_width(reach)
        if want != self._width:
            self._pool = self._resize(self._width, want)(self._pool)
            self._width = want

    def _chunk(self) -> None:
        self._fit()
        live = [(i, x) for i, x in enumerate(self._live) if x is not None]
        filtered = any(x.row.temperature > 0 and (x.row.top_p < 1.0 or x.row.top_k > 0) for _, x in live)
        top = any(x.row.top_logprobs > 0 for _, x in live)
        self._pool, tokens, logprobs, alts = self._decode(self._width, filtered, top)(self._weights, self._pool)
        self.calls += 1
        self.peak_rows = max(self.peak_rows, len(live))
        tokens, logprobs, alts, count, active = jax.device_get(
            (tokens, logprobs, alts, self._pool["count"], self._pool["active"]))
        stopped = np.zeros((self.max_rows,), bool)
        for i, x in live:
            fresh, n = len(x.ids), int(count[i]) - len(x.ids)
            x.ids += tokens[i, :n].tolist()
            x.logprobs += logprobs[i, :n].tolist()
            k = x.row.top_logprobs
            x.top += [dict(zip(alts[0][i, t, :k].tolist(), alts[1][i, t, :k].tolist())) for t in range(n)] if k else \
                [{} for _ in range(n)]
            keep = x.row.stop_check(x.ids, fresh) if x.row.stop_check is not None else None
            if keep is not None:  # a stop string: the row ends here and its slot is freed
                del x.ids[keep:], x.logprobs[keep:], x.top[keep:]
                stopped[i], ended_by = active[i], "stop"
            elif not active[i]:
                ended_by = "stop" if x.ids and x.ids[-1] in self._row_stops(x.row) else "length"
            else:
                ended_by = None
            if x.row.on_tokens is not None:
                x.row.on_tokens(Update(x.ids[fresh:], x.logprobs[fresh:], x.top[fresh:], ended_by))
            if ended_by is not None:
                self._live[i] = None
                with self._lock:
                    self._service.append(time.monotonic() - x.admitted)
                x.row.future.set_result(Decoded(x.ids, x.logprobs, ended_by == "stop", x.top))
        if stopped.any():
            self._pool = dict(self._pool, active=self._release()(self._pool["active"], stopped))

    def _row_stops(self, row: Row) -> set:
        return set(self.tok.stop_ids if row.stop_ids is None else row.stop_ids)
