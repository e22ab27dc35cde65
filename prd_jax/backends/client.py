"""An HTTP client that survives real OpenAI-compatible endpoints (httpx, async).

`Client.post_many(path, bodies, check)` sends a batch of JSON requests with at most
`max_concurrency` in flight and returns one `Answer` per body, in order:
- identical bodies in a batch are sent once (a batch's padding rows repeat a real one);
- an answer already in the workdir's `RequestCache` is not sent again;
- 429, 408, 5xx, timeouts, connection errors and malformed bodies (`check` returns a
  reason) are retried up to `max_retries` times, with exponential backoff and jitter,
  waiting at least the server's `Retry-After`;
- any other status (400, 401, 403, 404, 422) fails at once; its reason is kept. A 400 / 422
  that names a refused request parameter (`endpoints.refused_param`) is counted: after
  `stop_after_refusals` of them nothing more is sent (`stopped` says why, naming the
  parameter), since every other request carries the same parameter.
A request that still fails comes back as `Answer(ok=False, error=...)`: the caller counts
it, nothing raises. The key travels only in the Authorization header; it is scrubbed from
every reason the client records.
"""

from __future__ import annotations

import asyncio
import dataclasses
import email.utils
import logging
import random
import threading
import time
from typing import Callable, List, Optional

import httpx
from tqdm import tqdm

from prd_jax.backends.cache import RequestCache, request_key
from prd_jax.backends.config import BackendConfig
from prd_jax.backends.endpoints import ENDPOINTS, refused_param, usage_counts

log = logging.getLogger(__name__)

RETRY_STATUS = (408, 409, 429, 500, 502, 503, 504)
BACKOFF_CAP_S = 60.0


class RefusedParameter(ValueError):
    """The endpoint refused a request parameter often enough that the run stops (one line)."""


@dataclasses.dataclass
class Answer:
    """One request's outcome: the parsed body when `ok`, else the failure `error`.
    `malformed` counts bodies that failed `check` (each was retried)."""

    ok: bool
    body: Optional[dict] = None
    error: str = ""
    retries: int = 0
    malformed: int = 0
    cached: bool = False


def retry_after_s(value: Optional[str]) -> float:
    """Seconds a `Retry-After` header asks for (delta seconds or an HTTP date); 0 if absent."""
    if not value:
        return 0.0
    try:
        return max(0.0, float(value))
    except ValueError:
        when = email.utils.parsedate_to_datetime(value)
        return max(0.0, when.timestamp() - time.time()) if when else 0.0


def backoff_s(attempt: int, base: float, retry_after: float = 0.0) -> float:
    """Exponential backoff with jitter (half to all of base * 2^attempt, capped), at least
    the server's `Retry-After`."""
    delay = min(BACKOFF_CAP_S, base * 2 ** attempt) * (0.5 + 0.5 * random.random())
    return max(delay, retry_after)


class Client:
    """Batches of requests to one endpoint, run on a private event loop thread."""

    def __init__(self, backend: BackendConfig, cache: Optional[RequestCache] = None, progress: bool = True):
        self.backend = backend
        self.cache = cache if cache is not None else RequestCache(None)
        self._key = backend.api_key()  # refused here, before any request, when unset
        self.sent = 0  # HTTP requests made (retries included)
        self.tokens = 0
        self.refusals = {}  # refused parameter -> 400 / 422 answers naming it
        self.stopped = ""  # set once refusals reach backend.stop_after_refusals: why nothing more is sent
        self._bar = tqdm(total=0, desc=f"requests {backend.model}", unit="req", disable=not progress,
                         dynamic_ncols=True)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True, name="prd-jax-http")
        self._thread.start()
        self._http = self._run(self._open())

    async def _open(self):
        limits = httpx.Limits(max_connections=self.backend.max_concurrency,
                              max_keepalive_connections=self.backend.max_concurrency)
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        return httpx.AsyncClient(base_url=self.backend.base_url.rstrip("/") + "/", headers=headers,
                                 timeout=httpx.Timeout(self.backend.timeout_s), limits=limits)

    def _run(self, coro):
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def scrub(self, text: str) -> str:
        """`text` without the key (servers sometimes echo part of a bad key)."""
        return text.replace(self._key, "***") if self._key else text

    def post_many(self, path: str, bodies: List[dict], check: Callable[[dict], Optional[str]],
                  tags: Optional[List[str]] = None) -> List[Answer]:
        """One Answer per body (see the module docstring); blocks until all are done. `tags`
        add to each request's cache key (`cache.request_key`)."""
        keys = [request_key(path, b, t) for b, t in zip(bodies, tags or [""] * len(bodies))]
        unique = dict(zip(keys, bodies))
        answers = {}
        for k in list(unique):
            hit = self.cache.get(k)
            if hit is not None:
                answers[k] = Answer(True, hit, cached=True)
                del unique[k]
        self._bar.total += len(unique)
        self._bar.refresh()
        if unique:
            sem_size = self.backend.max_concurrency

            async def go():
                sem = asyncio.Semaphore(sem_size)

                async def one(k, body):
                    async with sem:
                        return k, await self._post(path, k, body, check)

                return await asyncio.gather(*(one(k, b) for k, b in unique.items()))

            answers.update(dict(self._run(go())))
            self.cache.flush()
        return [answers[k] for k in keys]

    async def _post(self, path: str, key: str, body: dict, check) -> Answer:
        malformed, reason = 0, ""
        for attempt in range(self.backend.max_retries + 1):
            if self.stopped:
                self._done(None)
                return Answer(False, error=f"not sent: {self.stopped}", retries=attempt, malformed=malformed)
            wait = 0.0
            self.sent += 1
            try:
                r = await self._http.post(path.lstrip("/"), json=body)
            except httpx.TimeoutException:
                reason = f"timeout after {self.backend.timeout_s:g} s"
            except httpx.TransportError as e:
                reason = f"connection error: {type(e).__name__}"
            else:
                if r.status_code == 200:
                    try:
                        data = r.json()
                        problem = check(data) if isinstance(data, dict) else "not a JSON object"
                    except ValueError:
                        data, problem = None, "not JSON"
                    if problem is None:
                        self.cache.put(key, data)
                        self._done(data)
                        return Answer(True, data, retries=attempt, malformed=malformed)
                    malformed += 1
                    reason = f"malformed body: {problem}"
                else:
                    reason = self.scrub(f"http {r.status_code}: {_message(r)}")
                    self._refused(r, body)
                    if r.status_code not in RETRY_STATUS:
                        self._done(None)
                        return Answer(False, error=reason, retries=attempt, malformed=malformed)
                    wait = retry_after_s(r.headers.get("retry-after"))
            if attempt < self.backend.max_retries:
                await asyncio.sleep(backoff_s(attempt, self.backend.retry_base_s, wait))
        self._done(None)
        return Answer(False, error=f"{reason} (gave up after {self.backend.max_retries} retries)",
                      retries=self.backend.max_retries, malformed=malformed)

    def _refused(self, r: httpx.Response, body: dict) -> None:
        """Count a 400 / 422 naming a refused parameter; stop sending after enough of them."""
        try:
            data = r.json()
        except ValueError:
            data = r.text
        param = refused_param(r.status_code, data)
        if param is None:
            return
        self.refusals[param] = self.refusals.get(param, 0) + 1
        if self.refusals[param] >= self.backend.stop_after_refusals and not self.stopped:
            self.stopped = self.scrub(
                f"the server refused request parameter {param!r} (http {r.status_code}, "
                f"{self.refusals[param]} answers; endpoint {self.backend.endpoint_row().name!r}): set "
                f"config.backend.endpoint to the server's kind, allowed: {tuple(ENDPOINTS)}. "
                f"Server said: {' '.join(_message(r).split())[:160]}")

    def _done(self, data: Optional[dict]) -> None:
        usage = (data or {}).get("usage") or {}
        self.tokens += usage_counts(usage)[0]
        self._bar.set_postfix(tokens=self.tokens, sent=self.sent, refresh=False)
        self._bar.update(1)

    def check(self) -> None:
        """Raise `RefusedParameter` once the run has stopped on refusals (outside the program)."""
        if self.stopped:
            raise RefusedParameter(self.stopped)

    def close(self) -> None:
        self._run(self._http.aclose())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._bar.close()
        self.cache.close()


def _message(r: httpx.Response) -> str:
    """The error message of an OpenAI-style error body, else the start of the body."""
    try:
        err = r.json().get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])[:300]
        if isinstance(err, str):
            return err[:300]
    except (ValueError, AttributeError):
        pass
    return r.text[:300]
