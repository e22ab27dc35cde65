"""LM backends the operators call through (DESIGN principle 8): the in-graph decoder
(`operators.lm.ModelLM`) or an OpenAI-compatible endpoint (`remote_lm.RemoteLM`)."""

from __future__ import annotations

import os
from typing import Optional

from prd_jax.backends.cache import RequestCache
from prd_jax.backends.client import Client
from prd_jax.backends.config import BackendConfig, default_backend, with_backend
from prd_jax.backends.remote_lm import ChatWireTokenizer, RemoteHost, RemoteLM

__all__ = ["BackendConfig", "ChatWireTokenizer", "RemoteLM", "default_backend", "make_remote_lm", "with_backend"]

CACHE_FILE = "requests.jsonl"


def make_remote_lm(backend: BackendConfig, tokenizer, workdir: Optional[str] = None, progress: bool = True,
              chat_template_kwargs: Optional[dict] = None):
    """(RemoteLM, the tokenizer operator contexts compile their templates with).

    The request cache lives in `workdir/requests.jsonl` (a URI workdir: its numbered shards;
    None: in memory).
    Chat mode compiles templates without the chat template (`ChatWireTokenizer`)."""
    backend.validate()
    cache = RequestCache(os.path.join(workdir, CACHE_FILE) if workdir else None)
    client = Client(backend, cache, progress=progress)
    host = RemoteHost(backend, tokenizer, client, chat_template_kwargs)
    return RemoteLM(host), (ChatWireTokenizer(tokenizer) if backend.api == "chat" else tokenizer)
