"""Where benchmark data and prepared TFDS datasets live. Imports only the standard library.

Benchmark files are never part of this repository; they are read from a *data dir*, the
directory that contains `math/gsm8k_test.jsonl`, `code/humaneval.jsonl` etc. Which file a task
reads is declared by the task itself (`prd_jax.tasks`, its `source`), as a path relative to the
data dir. `data_dir()` picks the data dir, first match:

1. the explicit argument (a config value, a CLI flag, a test's tmp dir);
2. the environment variable `PRD_DATA_DIR`;
3. `<repo root>/../shared/data`, computed from this file's location, if that directory exists
   (the layout used by tests and CI).

Prepared TFDS datasets (see `tfds_builders`) go to a separate, rebuildable cache dir chosen by
`tfds_dir()`: the explicit argument, else `PRD_TFDS_DIR`, else `$XDG_CACHE_HOME/prd_jax/tfds`,
else `~/.cache/prd_jax/tfds`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

__all__ = ["DATA_DIR_ENV", "TFDS_DIR_ENV", "data_dir", "tfds_dir", "default_data_dir"]

DATA_DIR_ENV = "PRD_DATA_DIR"
TFDS_DIR_ENV = "PRD_TFDS_DIR"

_REPO_ROOT = Path(__file__).resolve().parents[2]
_HOW_TO_SET = (
    f"Set the environment variable {DATA_DIR_ENV} to the directory that contains math/ and code/ "
    f"(e.g. `export {DATA_DIR_ENV}=/path/to/shared/data`) or pass data_dir explicitly."
)


def default_data_dir() -> str:
    """`<repo root>/../shared/data` (whether or not it exists)."""
    return os.path.normpath(os.path.join(str(_REPO_ROOT), os.pardir, "shared", "data"))


def _resolve(explicit: Optional[str | os.PathLike]) -> tuple[str, str]:
    """(data dir, where it came from), without checking that it exists."""
    if explicit is not None and os.fspath(explicit) != "":
        return os.path.abspath(os.path.expanduser(os.fspath(explicit))), "the data_dir argument"
    env = os.environ.get(DATA_DIR_ENV, "")
    if env:
        return os.path.abspath(os.path.expanduser(env)), f"${DATA_DIR_ENV}"
    return default_data_dir(), "the default <repo root>/../shared/data"


def data_dir(explicit: Optional[str | os.PathLike] = None) -> str:
    """The benchmark data dir (the directory containing `math/` and `code/`), as an absolute path.

    Raises FileNotFoundError if the chosen directory does not exist.
    """
    path, source = _resolve(explicit)
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
