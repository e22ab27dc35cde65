"""What an eval run needs from a remote backend: the LM and tokenizer (`eval_lm`, opened by
`eval_setup.EvalSetup.open_lm`), and the per-operator counts of `summary.md`. The per-row
outcome fields come through the LM seam (`RemoteLM.stats`)."""

from __future__ import annotations

import os
from typing import Optional

from prd_jax.backends import make_remote_lm
from prd_jax.backends.config import BackendConfig
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


def check_remote_config(config, backend: BackendConfig) -> None:
    """Refuse, one line naming the field and what is allowed, an eval config field a remote
    backend cannot honour: the in-graph model's `dtype` and `mesh`; in chat mode (the server
    renders its own chat template) `reasoning_effort`, and `enable_thinking` on an endpoint
    that takes no `chat_template_kwargs`."""
    remote = f"with config.backend.kind={backend.kind!r}"
    for field in ("dtype", "mesh"):
        if getattr(config, field):
            raise ValueError(f"config.{field}={getattr(config, field)!r} sets up the in-graph model; {remote} the "
                             "server runs the model: allowed: ''")
    if backend.api != "chat":
        return
    if config.reasoning_effort is not None:
        raise ValueError(f"config.reasoning_effort={config.reasoning_effort!r} is a variable of the local chat "
                         "template; in chat mode the server renders its own: allowed: None (the API's "
                         "config.backend.reasoning_effort, where the endpoint takes one)")
    row = backend.endpoint_row()
    if config.enable_thinking is not None and not row.template_kwargs:
        raise ValueError(f"config.enable_thinking={config.enable_thinking!r}: endpoint {row.name!r} takes no "
                         "chat_template_kwargs; allowed: None")


def eval_lm(config, backend: BackendConfig, workdir: str, progress: bool):
    """(RemoteLM, tokenizer for the operator contexts) of an eval config (`EvalConfig`) with a
    remote backend, after `check_remote_config`. `config.enable_thinking` and
    `config.reasoning_effort` (when set) render the local template in token mode;
    `enable_thinking` is sent as `chat_template_kwargs` in chat mode."""
    check_remote_config(config, backend)
    name = backend.tokenizer or (config.model if isinstance(config.model, str) else "")
    tok = local_tokenizer(name, None if backend.tokenizer else (config.model_path or None))
    variables = {k: v for k, v in (("enable_thinking", config.enable_thinking),
                                   ("reasoning_effort", config.reasoning_effort)) if v is not None}
    kwargs = None
    if backend.api == "chat":
        kwargs = variables or None  # enable_thinking alone (check_remote_config)
    elif variables:
        tok = tok.with_chat_template_vars(**variables)
    return make_remote_lm(backend, tok, workdir, progress, kwargs)


def operator_counts(rows: list) -> dict:
    """Sum of the remote counters over an operator's rows (`SUMMARY_COUNTS`)."""
    return {k: int(sum((r.get("remote") or {}).get(k, 0) for r in rows)) for k in SUMMARY_COUNTS}
