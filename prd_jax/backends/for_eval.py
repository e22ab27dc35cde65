"""What `evaluate` needs from a remote backend: the LM and tokenizer, the per-row outcome
fields, and the per-operator counts of `summary.md`."""

from __future__ import annotations

import os
from typing import Optional

from prd_jax.backends import make_remote_lm
from prd_jax.backends.config import BackendConfig
from prd_jax.backends.remote_lm import COUNTERS
from prd_jax.model.loader import smollm2_gguf_path
from prd_jax.model.tokenizer import Tokenizer

SUMMARY_COUNTS = ("failed", "empty", "length", "malformed", "rating_unavailable")


def local_tokenizer(name: str, path: Optional[str] = None) -> Tokenizer:
    """The tokenizer of `backend.tokenizer` (a named model or a path; '' = the config's
    model): a .gguf file, or a directory with tokenizer.json. No hub downloads."""
    if not path and name in ("smollm2-135m", ""):
        path = smollm2_gguf_path()
    elif not path and os.path.exists(name):
        path = name
    if not path:
        raise ValueError(f"config.backend.tokenizer: no local tokenizer for {name!r}; allowed: 'smollm2-135m', "
                         "a .gguf file or a directory with tokenizer.json (e.g. the served model's HF directory)")
    return Tokenizer.from_gguf(path) if path.endswith(".gguf") else Tokenizer.from_hf_dir(path)


def eval_lm(config, backend: BackendConfig, workdir: str, progress: bool):
    """(RemoteLM, tokenizer for the operator contexts) of an eval config (`EvalConfig`) with a remote backend.
    `config.enable_thinking` (when set) renders the local template in token mode and is
    sent as `chat_template_kwargs` in chat mode."""
    name = backend.tokenizer or (config.model if isinstance(config.model, str) else "")
    tok = local_tokenizer(name, None if backend.tokenizer else (config.model_path or None))
    thinking = config.enable_thinking
    kwargs = None
    if thinking is not None:
        if backend.api == "chat":
            kwargs = {"enable_thinking": bool(thinking)}
        else:
            tok = tok.with_chat_template_vars(enable_thinking=bool(thinking))
    return make_remote_lm(backend, tok, workdir, progress, kwargs)


def row_fields(stats: Optional[dict]) -> dict:
    """A results row's remote outcome: its counters, every request's usage and finish_reason
    (`remote_calls`, in the order sent), and `failed` (the reasons) when a request of the row
    failed; {} in-graph."""
    if stats is None:
        return {}
    out = {"remote": {k: int(stats.get(k, 0)) for k in COUNTERS}, "remote_calls": stats.get("calls", [])}
    if stats.get("failed"):
        out["failed"] = stats.get("errors") or ["request failed"]
    return out


def operator_counts(rows: list) -> dict:
    """Sum of the remote counters over an operator's rows (`SUMMARY_COUNTS`)."""
    return {k: int(sum((r.get("remote") or {}).get(k, 0) for r in rows)) for k in SUMMARY_COUNTS}
