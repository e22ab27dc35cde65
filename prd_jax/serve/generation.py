"""One generation request of `prd-jax serve`: its rows, its answer, or its stream.

`Job(req, chat, ...)` turns a parsed request into engine rows (one per prompt and sample; a
prompt's `n` rows share one prefill), each with its stop ids, `min_tokens`, stop strings
(`text.StopStrings`, checked at every decode chunk) and a listener that hands every decode
chunk's tokens to the event loop. `answer()` waits for the rows (cancelling them if the
client disconnects) and builds the response; `events()` yields the OpenAI server-sent
events as chunks finish and cancels its rows when the stream is closed. `usage` counts the
prompt's tokens once per prompt and every token returned (a stop id included; a stop
string's tokens up to the one completing it).
"""

from __future__ import annotations

import asyncio
import functools
import json
import time
from typing import List, Optional

from prd_jax.serve import protocol as P
from prd_jax.serve.engine import Decoded, Engine, Row, Update
from prd_jax.serve.text import Deltas, StopStrings

DEFAULT_MAX_TOKENS = 16  # completions (OpenAI's default); chat: the room left in the context, at most 4096


async def _disconnected(receive) -> None:
    """Returns once the client has gone (the ASGI `http.disconnect` message)."""
    while (await receive())["type"] != "http.disconnect":
        pass


class Job:
    def __init__(self, req, chat: bool, engine: Engine, served: str, metrics=None):
        tok = self.tok = engine.tok
        self.req, self.chat, self.served, self.metrics = req, chat, served, metrics
        self.prompts = [P.chat_prompt(req, tok)] if chat else P.prompts_of(req, tok)
        samp = P.sampling_fields(req)
        if chat:
            limit = req.max_completion_tokens or req.max_tokens
            field = "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
            max_tokens = limit or max(1, min(4096, engine.context - len(self.prompts[0])))
            self.logprobs = bool(req.logprobs)
            top = (req.top_logprobs or 0) if req.logprobs else 0
        else:
            field, max_tokens = "max_tokens", req.max_tokens or DEFAULT_MAX_TOKENS
            self.logprobs, top = req.logprobs is not None, req.logprobs or 0
        for p in self.prompts:
            P.check_context(len(p), max_tokens, engine.context)
        if req.min_tokens > max_tokens:
            raise P.RequestError(400, f"'min_tokens' is {req.min_tokens}; allowed: at most {field} ({max_tokens})",
                                 "min_tokens")
        self.stops = P.stop_strings(req)
        ids = P.stop_ids(req, tok)
        self.id, self.created, self.t0, self.first = P.new_id("chat" if chat else "cmpl"), P.now(), time.monotonic(), None
        self.loop = asyncio.get_running_loop()
        self.updates: "asyncio.Queue" = asyncio.Queue()
        self.cut = StopStrings(self.stops, tok.decode, req.min_tokens) if self.stops else None
        self.rows: List[Row] = [
            Row(p, max_tokens, samp["temperature"], samp["top_p"], samp["top_k"], samp["seed"], j, top,
                stop_ids=ids, min_tokens=req.min_tokens, stop_check=self.cut,
                on_tokens=functools.partial(self._push, i * samp["n"] + j), request=self)
            for i, p in enumerate(self.prompts) for j in range(samp["n"])]

    # -- engine side (the decode thread) -------------------------------------------------

    def _push(self, index: int, update: Update) -> None:
        if self.first is None and update.ids:
            self.first = time.monotonic()
        self._post((index, update))

    def _post(self, item) -> None:
        try:
            self.loop.call_soon_threadsafe(self.updates.put_nowait, item)
        except RuntimeError:  # the event loop has closed (the server stopped): nobody is listening
            pass

    def submit(self, engine: Engine) -> None:
        self.futures = engine.submit(self.rows)
        for index, future in enumerate(self.futures):  # a failed or cancelled row ends its stream too
            future.add_done_callback(functools.partial(self._ended, index))

    def _ended(self, index: int, future) -> None:
        if future.cancelled() or future.exception() is not None:
            self._post((index, None))

    def cancel(self) -> None:
        Engine.cancel(self.rows)

    # -- pieces of an answer -------------------------------------------------------------

    def text_of(self, ids: List[int]) -> str:
        return self.cut.text(ids, True) if self.cut else self.tok.decode(ids)

    def _token(self, t: int) -> str:
        return f"token_id:{t}" if self.req.return_tokens_as_token_ids else self.tok.decode([t])

    def _logprobs(self, ids: List[int], lps: List[float], tops: List[dict], offset: int = 0):
        if not self.logprobs:
            return None
        if self.chat:
            return P.ChatLogprobs(content=[P.TokenLogprob(token=self._token(t), logprob=lp, top_logprobs=[
                P.TopLogprob(token=self._token(a), logprob=v) for a, v in top.items()])
                for t, lp, top in zip(ids, lps, tops)])
        texts = [self._token(t) for t in ids]
        offsets = [offset + sum(len(x) for x in texts[:i]) for i in range(len(texts))]
        return P.CompletionLogprobs(tokens=texts, token_logprobs=lps, text_offset=offsets,
                                    top_logprobs=[{self._token(a): v for a, v in top.items()} for top in tops])

    def _usage(self, generated: int) -> P.Usage:
        return P.usage(sum(len(p) for p in self.prompts), generated)

    def _record(self, generated: int) -> None:
        if self.metrics is None:
            return
        self.metrics.prompt_tokens.inc(sum(len(p) for p in self.prompts))
        self.metrics.generated_tokens.inc(generated)
        if self.first is not None:
            self.metrics.ttft.observe(self.first - self.t0)
            if generated > len(self.rows):
                self.metrics.tpot.observe((time.monotonic() - self.first) / (generated - len(self.rows)))

    # -- the whole answer ----------------------------------------------------------------

    async def answer(self, receive) -> Optional[dict]:
        """The response body; None when the client disconnected first (its rows are cancelled)."""
        rows = asyncio.gather(*(asyncio.wrap_future(f) for f in self.futures))
        gone = asyncio.ensure_future(_disconnected(receive))
        try:
            await asyncio.wait({rows, gone}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
        if not rows.done():
            self.cancel()  # the engine cancels the rows' futures; the gather ends cancelled
            rows.add_done_callback(lambda f: f.cancelled() or f.exception())
            return None
        outs: List[Decoded] = rows.result()
        generated = sum(len(o.ids) for o in outs)
        self._record(generated)
        choices = []
        for index, out in enumerate(outs):
            text, lp = self.text_of(out.ids), self._logprobs(out.ids, out.logprobs, out.top)
            token_ids = out.ids if self.req.return_token_ids else None
            if self.chat:
                choices.append(P.ChatChoice(index=index, message=P.AssistantMessage(content=text),
                                            finish_reason=out.finish_reason, logprobs=lp, token_ids=token_ids))
            else:
                choices.append(P.CompletionChoice(index=index, text=text, finish_reason=out.finish_reason,
                                                  logprobs=lp, token_ids=token_ids))
        kind = P.ChatResponse if self.chat else P.CompletionResponse
        body = kind(id=self.id, created=self.created, model=self.served, choices=choices, usage=self._usage(generated))
        return body.model_dump(mode="json", exclude_none=True)

    # -- the stream ----------------------------------------------------------------------

    def _event(self, choices: list, usage: Optional[P.Usage] = None) -> str:
        kind = P.ChatChunk if self.chat else P.CompletionChunk
        chunk = kind(id=self.id, created=self.created, model=self.served, choices=choices, usage=usage)
        return f"data: {json.dumps(chunk.model_dump(mode='json', exclude_none=True))}\n\n"

    async def events(self):
        """Server-sent events: a chunk per decode chunk per row (text deltas, held back while a
        stop string may be starting), the finish reason on each row's last, the usage chunk
        with `stream_options.include_usage`, then `data: [DONE]`. Closing it cancels the rows."""
        hold = max((len(s) for s in self.stops), default=1) - 1
        ids = [[] for _ in self.rows]
        deltas = [Deltas(self.tok.decode, hold) for _ in self.rows]
        left, generated = len(self.rows), 0
        try:
            if self.chat:
                yield self._event([P.ChatChunkChoice(index=i, delta=P.Delta(role="assistant", content=""))
                                   for i in range(len(self.rows))])
            while left:
                index, up = await self.updates.get()
                if up is None:  # the row failed (logged by the engine) or was cancelled: no more of it
                    left -= 1
                    continue
                ids[index] += up.ids
                final = self.text_of(ids[index]) if up.finish else None
                text = deltas[index](ids[index], final)
                if not (text or up.finish or up.ids):
                    continue
                lp = self._logprobs(up.ids, up.logprobs, up.top, deltas[index].sent - len(text))
                token_ids = up.ids if self.req.return_token_ids else None
                if self.chat:
                    choice = P.ChatChunkChoice(index=index, delta=P.Delta(content=text), finish_reason=up.finish,
                                               logprobs=lp, token_ids=token_ids)
                else:
                    choice = P.CompletionChoice(index=index, text=text, finish_reason=up.finish, logprobs=lp,
                                                token_ids=token_ids)
                yield self._event([choice])
                if up.finish:
                    left -= 1
                    generated += len(ids[index])
            self._record(generated)
            options = self.req.stream_options
            if options is not None and options.include_usage:
                yield self._event([], self._usage(generated))
            yield "data: [DONE]\n\n"
        finally:
            if left:
                self.cancel()
