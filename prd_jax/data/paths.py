"""Where benchmark data and prepared TFDS datasets live. Imports only the standard library.

Benchmark files are never part of this repository; they are read from a *data dir*, the
directory that contains `math/gsm8k_test.jsonl`, `code/humaneval.jsonl` etc. Which file a task
reads is declared by the task itself (`prd_jax.tasks`, its `source`), as a path relative to the
data dir; `prd-jax data get NAME` (`data.download`) fills it. `data_dir()` picks the data dir,
first match:

1. the explicit argument (a config value, a CLI flag, a test's tmp dir);
2. the environment variable `PRD_DATA_DIR` (tests and CI point it at their shared copy);
3. the user data dir `default_data_dir()`: `$XDG_DATA_HOME/prd_jax/data`, else
   `~/.local/share/prd_jax/data`.

Prepared TFDS datasets (see `tfds_builders`) go to a separate, rebuildable cache dir chosen by
`tfds_dir()`: the explicit argument, else `PRD_TFDS_DIR`, else `$XDG_CACHE_HOME/prd_jax/tfds`,
else `~/.cache/prd_jax/tfds`.
"""

from __future__ import annotations

import os
from typing import Optional

__all__ = ["DATA_DIR_ENV", "TFDS_DIR_ENV", "data_dir", "default_data_dir", "resolve_data_dir", "tfds_dir"]

DATA_DIR_ENV = "PRD_DATA_DIR"
TFDS_DIR_ENV = "PRD_TFDS_DIR"

_HOW_TO_SET = (
    "Fetch the benchmarks with `prd-jax data get NAME` (or --all; docs/data.md), or set the environment "
    f"variable {DATA_DIR_ENV} to a directory that contains math/ and code/, or pass data_dir explicitly."
)


def default_data_dir() -> str:
    """The user data dir: `$XDG_DATA_HOME/prd_jax/data`, else `~/.local/share/prd_jax/data`
    (whether or not it exists)."""
    base = os.environ.get("XDG_DATA_HOME", "") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return os.path.join(os.path.abspath(base), "prd_jax", "data")


def resolve_data_dir(explicit: Optional[str | os.PathLike] = None) -> tuple[str, str]:
    """(data dir, where it came from), without checking that it exists."""
    if explicit is not None and os.fspath(explicit) != "":
        return os.path.abspath(os.path.expanduser(os.fspath(explicit))), "the data_dir argument"
    env = os.environ.get(DATA_DIR_ENV, "")
    if env:
        return os.path.abspath(os.path.expanduser(env)), f"${DATA_DIR_ENV}"
    return default_data_dir(), "the default user data dir"


def data_dir(explicit: Optional[str | os.PathLike] = None) -> str:
    """The benchmark data dir (the directory containing `math/` and `code/`), as an absolute path.

    Raises FileNotFoundError if the chosen directory does not exist.
    """
    path, source = resolve_data_dir(explicit)
    if not os.path.isdir(path):
        raise FileNotFoundError(
            f"benchmark data directory {path} (from {source}) does not exist. {_HOW_TO_SET}")
    return path


def tfds_dir(explicit: Optional[str | os.PathLike] = None) -> str:
    """Directory for prepared TFDS datasets (created on demand by the builders, not here)."""
    if explicit is not None and os.fspath(explicit) != "":
        return os.path.abspath(os.path.expanduser(os.fspath(explicit)))
    env = os.environ.get(TFDS_DIR_ENV, "")
    if env:
        return os.path.abspath(os.path.expanduser(env))
    cache = os.environ.get("XDG_CACHE_HOME", "") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(os.path.abspath(cache), "prd_jax", "tfds")
