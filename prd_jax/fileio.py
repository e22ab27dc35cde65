"""Workdir files on a local disk or an object store (`gs://...`), through one small API.

A run's small files (config.json, metrics.jsonl, settings.json, results.jsonl,
summary.md, pareto.png, the demo's results.json) are read and written here, so a workdir
may be a local path or a URI. A URI (anything with "://": gs://, s3:// with the TF
plugin, ram:// in tests) goes to `tf.io.gfile`, the same layer that `etils.epath`, and
so the orbax checkpoints, use for gs:// when TensorFlow is installed; a local path uses
the builtin file functions, so local runs do not import TensorFlow for it.

Which process writes is the caller's business: see `prd_jax.host.is_main` / `on_main`.
"""

from __future__ import annotations

import builtins
import json
import os
from typing import IO, Any


def is_uri(path) -> bool:
    """Whether `path` names a filesystem by scheme (gs://bucket/run), not a local path."""
    return "://" in os.fspath(path)


def _gfile():
    from prd_jax.data.tf_cpu import tf  # keeps TensorFlow off the GPUs

    return tf.io.gfile


def _not_found():
    from prd_jax.data.tf_cpu import tf

    return tf.errors.NotFoundError


def open(path, mode: str = "r") -> IO:  # noqa: A001 - the module's file-opening function
    """A file object for `path`; modes r, w, a (text) and rb, wb, ab (bytes). Mode w replaces
    the file on every filesystem (TF's ram:// would otherwise overwrite the old bytes in place)."""
    path = os.fspath(path)
    if is_uri(path):
        gfile = _gfile()
        if mode.startswith("w") and gfile.exists(path):
            try:
                gfile.remove(path)
            except _not_found():  # TF's ram:// says "x.json" exists when only "x.jsonl" does
                pass
        return gfile.GFile(path, mode)
    return builtins.open(path, mode, **({} if "b" in mode else {"encoding": "utf-8"}))


def exists(path) -> bool:
    path = os.fspath(path)
    return _gfile().exists(path) if is_uri(path) else os.path.exists(path)


def makedirs(path) -> None:
    """Create directory `path` and its parents (nothing to do if it exists)."""
    path = os.fspath(path)
    if is_uri(path):
        _gfile().makedirs(path)
    else:
        os.makedirs(path, exist_ok=True)


def read_text(path) -> str:
    with open(path) as f:
        return f.read()


def write_text(path, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def write_bytes(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def read_json(path) -> Any:
    return json.loads(read_text(path))


def read_jsonl(path) -> list:
    """The JSON objects of a JSONL file, one per line; blank lines and a torn (unparsable)
    line, as a killed writer leaves it, are skipped."""
    rows = []
    for line in read_text(path).splitlines():
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return rows
