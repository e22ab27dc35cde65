"""The remote LM: the operators' model seam (`generate`, `next_logits`) answered by an
OpenAI-compatible endpoint (DESIGN principle 8).

Design: the operator program stays the one compiled program `runner.run_operator` runs.
`RemoteLM.generate` and `.next_logits` are `jax.pure_callback`s with the same shapes as
the in-graph decoder's, so Long-CoT, SR, PDR, best-of-N, the V1 tournaments and RSA run
unchanged: segments are assembled on device, and each batched call leaves the program
only to become a batch of concurrent HTTP requests (`client.Client`). A row per sample:
a call of M samples on B prompts is B*M requests, each with its own seed.

- `api="completions"`: the prompt's token ids are sent as they are; token ids come back
  (`token_ids`, vLLM's `return_token_ids`; else `token_id:N` logprob tokens; else the
  text re-encoded). Against a server with the same weights, greedy, the rows equal the
  in-graph ones.
- `api="chat"`: templates are compiled without the chat template (`ChatWireTokenizer`),
  so a prompt's ids are the user message's text; it is decoded and sent as one user
  message, and the answer's `content` is encoded with the local tokenizer.
- Every body follows the endpoint's row (`endpoints.ENDPOINTS`, `config.backend.endpoint`):
  a parameter the endpoint refuses is never sent.
- Budgets are what the server billed: `usage.prompt_tokens` and the completion tokens,
  hidden reasoning included (`endpoints.usage_counts`), per request, returned as
  `SampleOutput.billed_in/out`; each call's hidden reasoning tokens are recorded too.
- A judge's forced rating (`next_logits`) asks for one token with its top
  `rating_top_logprobs` log-probabilities where the endpoint returns them; ids outside
  them get -1e9. Chat mode continues the judge's own message where the endpoint allows it,
  else asks for the rating in a follow-up turn; on an endpoint without log-probabilities
  (o-series, Gemini, transformers serve) the rating digit the model wrote is used.

Rows that are not real calls (`live` False: a tournament batch's unused slots) send
nothing and come back empty. Failed requests come back empty as well; they are counted
per problem (`RemoteHost.take_stats`), and evaluation marks those rows failed.

`RemoteLM` implements the declared LM seam (`operators.lm_protocol.LanguageModel`): its
`check` refuses at setup what a server cannot be asked for (a forced end of thinking, a
top-k or temperature the endpoint takes no field for, the in-graph decoder's cost options),
and `stats` turns each batch's counters into results-row fields (`row_fields`).
"""

from __future__ import annotations

import collections
import functools
import hashlib
import re
from typing import Optional

import flax
import jax
import jax.numpy as jnp
import numpy as np

from prd_jax.backends.client import Client
from prd_jax.backends.config import BackendConfig
from prd_jax.backends.endpoints import rating_fields, sampling_fields, usage_counts
from prd_jax.operators.lm_protocol import BatchStats, forced_thinking
from prd_jax.sampling import SampleOutput, Sampling

ASSISTANT_MARK = "\u241e"  # where a chat-mode prompt's assistant turn starts (ChatWireTokenizer)
MISSING_LOGIT = -1e9
COUNTERS = ("requests", "cached", "failed", "empty", "length", "malformed", "retries", "truncated_locally",
            "rating_unavailable", "rating_written", "completion_tokens", "reasoning_tokens")
# `config.sampling` options that shape the in-graph decoder's batches and caches (all but
# kv_cache_dtype change no row's tokens there); a server schedules its own decoding, so they
# must stay at their defaults
IN_GRAPH_SAMPLING = ("max_rows", "compact_min_rows", "compact_ratio", "prefill_groups", "cache_window",
                     "decode_layers", "kv_cache_dtype")


class ChatWireTokenizer:
    """The local tokenizer, with a chat template that renders the user's text alone followed
    by `ASSISTANT_MARK` (the server applies its own template)."""

    def __init__(self, tokenizer):
        self._tok = tokenizer

    def __getattr__(self, name):
        return getattr(self._tok, name)

    def apply_chat_template(self, messages, add_generation_prompt: bool = True, **_):
        text = "\n\n".join(m["content"] for m in messages)
        return text + (ASSISTANT_MARK if add_generation_prompt else "")


def sample_seed(key_data, sample: int) -> int:
    """A 31-bit request seed from a row's PRNG key data and its sample index."""
    digest = hashlib.sha256(np.asarray(key_data, np.uint32).tobytes() + int(sample).to_bytes(4, "little"))
    return int.from_bytes(digest.digest()[:4], "little") & 0x7FFFFFFF


def check_completion(data: dict) -> Optional[str]:
    """None if `data` is a usable /v1/completions body, else what is wrong with it."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "no choices"
    if not isinstance(choices[0].get("text", ""), str):
        return "choices[0].text is not a string"
    return _check_usage(data)


def check_chat(data: dict) -> Optional[str]:
    """None if `data` is a usable /v1/chat/completions body, else what is wrong with it."""
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        return "no choices"
    if not isinstance(choices[0].get("message"), dict):
        return "choices[0].message missing"
    content = choices[0]["message"].get("content")
    if content is not None and not isinstance(content, str):
        return "choices[0].message.content is not a string"
    return _check_usage(data)


def _check_usage(data: dict) -> Optional[str]:
    usage = data.get("usage")
    if not isinstance(usage, dict):
        return "no usage"
    for field in ("prompt_tokens", "completion_tokens"):
        if not isinstance(usage.get(field), int) or usage[field] < 0:
            return f"usage.{field} is not a count"
    return None


class RemoteHost:
    """Host side of `RemoteLM`: builds requests, reads answers, counts outcomes per problem.

    Rows of every operator call are problem-major, so row r of R belongs to problem
    `r * problems // R` of the running batch (`begin(problems)`)."""

    def __init__(self, backend: BackendConfig, tokenizer, client: Client, chat_template_kwargs=None):
        self.backend, self.tok, self.client = backend, tokenizer, client
        self.chat = backend.api == "chat"
        self.endpoint = backend.endpoint_row()
        self.vocab = int(tokenizer.vocab_size)
        self.stop_ids = tuple(int(t) for t in tokenizer.stop_ids)
        self.digit_ids = {i for d in "0123456789" for i in tokenizer.encode(d)[:1]}
        self.template_kwargs = dict(chat_template_kwargs or {})
        self.problems = 1
        self.stats = collections.defaultdict(collections.Counter)
        self.reasons = collections.defaultdict(list)
        self.calls = collections.defaultdict(list)  # per problem: each request's usage and finish_reason

    def begin(self, problems: int) -> None:
        """Start an operator run over `problems` rows; clears the per-problem counts."""
        self.problems = max(1, int(problems))
        self.stats.clear()
        self.reasons.clear()
        self.calls.clear()

    def take_stats(self) -> dict:
        """{problem: {counter: n, ..., "errors": [reasons]}} of the run since `begin`. Raises
        `client.RefusedParameter` when the endpoint refused a parameter often enough to stop."""
        self.client.check()
        out = {p: {**{k: int(c[k]) for k in COUNTERS}, "errors": self.reasons.get(p, []),
                   "calls": self.calls.get(p, [])} for p, c in self.stats.items()}
        self.begin(self.problems)
        return out

    # ------------------------------------------------------------------ requests

    def _sampling(self, body: dict, scfg, max_new: int, seed: int, greedy: bool = False) -> dict:
        b, e = self.backend, self.endpoint
        t, p, k = (0.0, 1.0, 0) if greedy else (float(scfg.temperature), float(scfg.top_p), int(scfg.top_k or 0))
        body.update(sampling_fields(e, self.chat, max_new, t, p, k, seed if b.send_seed else None, self.stop_ids))
        if self.chat:
            if b.reasoning_effort:
                body["reasoning_effort"] = b.reasoning_effort
            if b.thinking_budget:
                budget = int(max_new) if b.thinking_budget == -1 else b.thinking_budget
                body["extra_body"] = {"google": {"thinking_config": {"thinking_budget": budget}}}
            if self.template_kwargs and e.template_kwargs:
                body["chat_template_kwargs"] = self.template_kwargs
        return body

    def _messages(self, ids) -> tuple:
        """(messages, continue_final) of a chat-mode prompt: the user's text, and the start of
        the assistant's answer when the prompt carries one (a forced rating)."""
        text = self.tok.decode(ids)
        user, _, assistant = text.partition(ASSISTANT_MARK)
        messages = [{"role": "user", "content": user}]
        if not assistant:
            return messages, False
        messages.append({"role": "assistant", "content": assistant})
        if self.endpoint.continue_final:
            return messages, True
        messages.append({"role": "user", "content": "Continue your previous message exactly where it stops: "
                                                    "write only the next token."})
        return messages, False

    def _body(self, ids, scfg, max_new: int, seed: int, greedy: bool = False) -> dict:
        body = {"model": self.backend.model}
        if self.chat:
            body["messages"], cont = self._messages(ids)
            if cont:
                body["continue_final_message"], body["add_generation_prompt"] = True, False
        else:
            body["prompt"] = [int(t) for t in ids]
            if "return_token_ids" in self.endpoint.token_ids:
                body["return_token_ids"] = True
        return self._sampling(body, scfg, max_new, seed, greedy)

    def _count(self, problem: int, answer, name: str) -> None:
        usage = (answer.body or {}).get("usage") or {}
        choice = ((answer.body or {}).get("choices") or [{}])[0]
        billed, hidden = usage_counts(usage) if answer.ok else (0, 0)
        self.calls[problem].append({"name": name, "prompt_tokens": usage.get("prompt_tokens"),
                                    "completion_tokens": billed, "reasoning_tokens": hidden,
                                    "finish_reason": choice.get("finish_reason") if answer.ok else "failed",
                                    "cached": answer.cached})
        c = self.stats[problem]
        c["completion_tokens"] += billed
        c["reasoning_tokens"] += hidden
        c["requests"] += 1
        c["cached"] += answer.cached
        c["retries"] += answer.retries
        c["malformed"] += answer.malformed
        if not answer.ok:
            c["failed"] += 1
            if len(self.reasons[problem]) < 5:
                self.reasons[problem].append(self.client.scrub(answer.error))

    def _read(self, body: dict) -> tuple:
        """(ids, finish_reason, prompt_tokens, completion_tokens, empty) of an answer."""
        choice, usage = body["choices"][0], body["usage"]
        if self.chat:
            text = choice["message"].get("content") or ""
            ids = self.tok.encode(text) if text else []
        else:
            text = choice.get("text") or ""
            ids = _token_ids(choice)
            if ids is None:
                ids = self.tok.encode(text) if text else []
        return ids, choice.get("finish_reason"), usage["prompt_tokens"], usage_counts(usage)[0], not ids

    def generate(self, prompts, lengths, key_data, live, *, scfg, name: str):
        """Host callback of `RemoteLM.generate`: `[B, P]` left-padded prompts -> B*M rows."""
        prompts, lengths, key_data, live = map(np.asarray, (prompts, lengths, key_data, live))
        b, width = prompts.shape
        m, n = scfg.num_samples, scfg.max_new_tokens
        live = live.reshape(b, -1)  # [B, 1]: per prompt; [B, M]: per sample
        bodies, tags, where = [], [], []
        for i in range(b):
            if not live[i].any():
                continue
            ids = prompts[i, width - int(lengths[i]):]
            for j in range(m):
                if not live[i, j % live.shape[1]]:
                    continue
                seed = sample_seed(key_data[i], j)
                bodies.append(self._body(ids, scfg, n, seed, greedy=scfg.temperature == 0))
                tags.append(f"{name}:{seed}")
                where.append(i * m + j)
        path, check = ("chat/completions", check_chat) if self.chat else ("completions", check_completion)
        answers = self.client.post_many(path, bodies, check, tags)
        r = b * m
        tok = np.zeros((r, n), np.int32)
        out_len, bill_in, bill_out = (np.zeros((r,), np.int32) for _ in range(3))
        stopped = np.zeros((r,), bool)
        for row, answer in zip(where, answers):
            problem = (row // m) * self.problems // b
            self._count(problem, answer, name)
            if not answer.ok:
                continue
            ids, finish, p_tok, c_tok, empty = self._read(answer.body)
            c = self.stats[problem]
            c["empty"] += empty
            c["length"] += finish == "length"
            if len(ids) > n:
                c["truncated_locally"] += 1
                ids = ids[:n]
            tok[row, :len(ids)] = ids
            out_len[row] = len(ids)
            stopped[row] = bool(ids) and finish == "stop" and ids[-1] in self.stop_ids
            bill_in[row], bill_out[row] = p_tok, c_tok
        return tok, out_len, stopped, bill_in, bill_out

    def next_logits(self, prompts, lengths, live, *, name: str):
        """Host callback of `RemoteLM.next_logits`: `[B, V]` logits of the next token after each
        live prompt, from the server's top log-probabilities (-1e9 elsewhere; 0 for dead rows)."""
        prompts, lengths, live = map(np.asarray, (prompts, lengths, live))
        b, width = prompts.shape
        k = self.backend.rating_top_logprobs
        bodies, where = [], []
        for i in range(b):
            if not live[i]:
                continue
            ids = prompts[i, width - int(lengths[i]):]
            follow_up = self.chat and not self.endpoint.continue_final  # the rating comes in a new turn
            # without log-probabilities the digit must be written: room for hidden reasoning before it
            budget = 16 if follow_up else 1
            if not self.endpoint.logprobs:
                budget = max(budget, self.backend.rating_max_tokens)
            body = self._body(ids, None, budget, 0, greedy=True)
            body.update(rating_fields(self.endpoint, self.chat, k))
            bodies.append(body)
            where.append(i)
        path, check = ("chat/completions", check_chat) if self.chat else ("completions", check_completion)
        answers = self.client.post_many(path, bodies, check, [name] * len(bodies))
        logits = np.zeros((b, self.vocab), np.float32)
        for i, answer in zip(where, answers):
            problem = i * self.problems // b
            self._count(problem, answer, name + ".rating_read")
            logits[i] = MISSING_LOGIT
            top, written = self._top_logprobs(answer.body) if answer.ok else ({}, False)
            self.stats[problem]["rating_written"] += written
            for tid, lp in top.items():
                if 0 <= tid < self.vocab:
                    logits[i, tid] = lp
            if not self.digit_ids & set(top):
                self.stats[problem]["rating_unavailable"] += 1
        return logits

    def _top_logprobs(self, body: dict) -> dict:
        """({token id: logprob} of the first generated token, whether it was read from the text:
        the first digit the model wrote, when no log-probabilities came back)."""
        choice = body["choices"][0]
        lp = choice.get("logprobs") or {}
        found = {}
        if self.chat:
            first = (lp.get("content") or [{}])[0] if isinstance(lp, dict) else {}
            for e in first.get("top_logprobs") or []:
                tid = self._token_id(e.get("token", ""))
                if tid is not None and tid not in found:
                    found[tid] = float(e.get("logprob", MISSING_LOGIT))
            text = (choice.get("message") or {}).get("content") or ""
        else:
            for tok, value in ((lp.get("top_logprobs") or [{}])[0] or {}).items():
                tid = self._token_id(tok)
                if tid is not None and tid not in found:
                    found[tid] = float(value)
            text = choice.get("text") or ""
        if not found:  # no logprobs (o-series, Gemini, transformers): the rating the model wrote, if any
            digit = re.search(r"(\d)", text)
            if digit:
                found[self.tok.encode(digit.group(1))[0]] = 0.0
                return found, True
        return found, False

    def _token_id(self, token: str) -> Optional[int]:
        if token.startswith("token_id:"):
            return int(token.split(":", 1)[1])
        ids = self.tok.encode(token) if token else []
        return ids[0] if len(ids) == 1 else None


def row_fields(stats: dict) -> dict:
    """A results row's remote outcome from its problem's `RemoteHost.take_stats` entry: the
    counters, every request's usage and finish_reason (`remote_calls`, in the order sent),
    and `failed` (the reasons) when a request of the row failed."""
    out = {"remote": {k: int(stats.get(k, 0)) for k in COUNTERS}, "remote_calls": stats.get("calls", [])}
    if stats.get("failed"):
        out["failed"] = stats.get("errors") or ["request failed"]
    return out


def _token_ids(choice: dict) -> Optional[list]:
    """Generated token ids of a completions choice, when the server returned them."""
    if isinstance(choice.get("token_ids"), list):
        return [int(t) for t in choice["token_ids"]]
    tokens = (choice.get("logprobs") or {}).get("tokens")
    if tokens and all(isinstance(t, str) and t.startswith("token_id:") for t in tokens):
        return [int(t.split(":", 1)[1]) for t in tokens]
    return None


@flax.struct.dataclass
class RemoteLM:
    """The operators' LM interface over a `RemoteHost` (usable inside `jax.jit`)."""

    host: RemoteHost = flax.struct.field(pytree_node=False)

    def generate(self, prompts, lengths, keys, scfg, fanout: bool = True, name: str = "model call",
                 live=None) -> SampleOutput:
        """Left-padded prompts `[B, P]` -> `[B*M, max_new]` rows, with the server's bill.
        `live` `[B]` (prompts) or `[B*M]` (samples): the rows requested; the rest come back empty."""
        b, r, n = prompts.shape[0], prompts.shape[0] * scfg.num_samples, scfg.max_new_tokens
        live = jnp.ones((b,), bool) if live is None else live
        shapes = (jax.ShapeDtypeStruct((r, n), jnp.int32), jax.ShapeDtypeStruct((r,), jnp.int32),
                  jax.ShapeDtypeStruct((r,), jnp.bool_), jax.ShapeDtypeStruct((r,), jnp.int32),
                  jax.ShapeDtypeStruct((r,), jnp.int32))
        fn = functools.partial(self.host.generate, scfg=scfg, name=name)
        tok, length, stopped, bill_in, bill_out = jax.pure_callback(fn, shapes, prompts, lengths,
                                                                    jax.random.key_data(keys), live)
        return SampleOutput(tok, jnp.zeros((r, n), jnp.float32), length, stopped, bill_in, bill_out)

    def next_logits(self, prompts, lengths, name: str = "model call", live=None) -> jax.Array:
        """`[B, V]` next-token logits (see `RemoteHost.next_logits`)."""
        b = prompts.shape[0]
        live = jnp.ones((b,), bool) if live is None else live
        fn = functools.partial(self.host.next_logits, name=name)
        return jax.pure_callback(fn, jax.ShapeDtypeStruct((b, self.host.vocab), jnp.float32), prompts, lengths,
                                 live)

    # The host side of the seam (`operators.lm_protocol.LanguageModel`).

    def check(self, specs, run_sampling: Sampling) -> None:
        """Refuse, one line naming the field, what the endpoint cannot be asked for: a forced
        end of thinking (`think_budget`, `kappa_think`: the server decodes each call whole), a
        top-k or temperature / top-p the endpoint has no field for (`endpoints.ENDPOINTS`),
        and the in-graph decoder's cost options (`IN_GRAPH_SAMPLING`)."""
        e, s = self.host.endpoint, run_sampling
        for i, spec in enumerate(specs):
            for field, value in forced_thinking(spec, f"config.operators[{i}]"):
                raise ValueError(f"{field}={value}: a remote LM cannot close a thinking block at a token budget "
                                 "(the server decodes each call whole); allowed: 0 (a server-side budget is "
                                 f"config.backend.thinking_budget or reasoning_effort, where endpoint {e.name!r} "
                                 "takes one)")
        if s.top_k and s.temperature and not e.top_k:
            raise ValueError(f"config.sampling.top_k={s.top_k}: endpoint {e.name!r} takes no top-k; allowed: 0 (off)")
        if not e.sampling and (s.temperature, s.top_p) != (1.0, 1.0):
            raise ValueError(f"config.sampling.temperature={s.temperature}, top_p={s.top_p}: endpoint {e.name!r} "
                             "takes no temperature / top-p (its models sample at 1.0, 1.0); allowed: "
                             "temperature=1.0, top_p=1.0")
        default = Sampling()
        for name in IN_GRAPH_SAMPLING:
            if getattr(s, name) != getattr(default, name):
                raise ValueError(f"config.sampling.{name}={getattr(s, name)!r} shapes the in-graph decoder; a remote "
                                 f"server schedules its own decoding: allowed: {getattr(default, name)!r} "
                                 "(config.backend.max_concurrency bounds the requests in flight)")

    def begin(self, problems: int) -> None:
        """An operator batch over `problems` problems starts (`RemoteHost.begin`)."""
        self.host.begin(problems)

    def stats(self) -> BatchStats:
        """Each problem's results-row fields (`row_fields`) and the batch's request count.
        Raises `client.RefusedParameter` when the endpoint kept refusing a parameter."""
        per = self.host.take_stats()
        return BatchStats({i: row_fields(per.get(i, {})) for i in range(self.host.problems)},
                          {"requests": int(sum(s["requests"] for s in per.values()))})

    def close(self) -> None:
        """Release the client's connections."""
        self.host.client.close()

    def served(self, local: str) -> str:
        """The served model's name (`config.backend.model`), whatever the local name."""
        return self.host.backend.model

    def via(self) -> str:
        """The API root and the endpoint kind, e.g. "http://127.0.0.1:8000/v1 (vllm)"."""
        return f"{self.host.backend.base_url} ({self.host.endpoint.name})"
