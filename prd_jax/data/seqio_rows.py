"""Rows of a registered seqio task or mixture as plain Python dicts: the one way data is read.

    from prd_jax.data import seqio_rows
    rows = seqio_rows.read("my_task", "train", limit=8)

Tasks declared as JSONL files (a `prd_jax.tasks` task with a `JsonlFiles` source) are read with
`read_files`, which registers their seqio task (`prd_<task name>`, a TFDS builder of
`data.tfds_builders` over the files of the data dir, see `data.paths`) on first use,
idempotently. Any other name must already be registered in `seqio.TaskRegistry` /
`seqio.MixtureRegistry` (e.g. by importing the module that registers it, or by
`data.synthetic.register_synthetic_task`).

What a row holds:
- `preprocess=False` (default): the task's *source* examples, before its preprocessors; the
  fields its data source yields (for JSONL files: the declared fields).
- `preprocess=True`: the task's output after all its preprocessors (`get_dataset` with
  `sequence_length=None`, no trimming), e.g. `inputs`/`targets` token lists plus
  `inputs_pretokenized`/`targets_pretokenized` strings.

Values become plain Python: bytes -> str (UTF-8), numpy scalars -> int / float / bool, arrays
-> lists. Rows come in source order (no shuffling), so the same call returns the same rows.
A mixture yields all rows of each of its tasks (`Mixture.tasks`: sorted by name) one task after
the other; mixing rates are not applied (consumers that shuffle or sample do that). `limit`
caps the total.

Importing this module is cheap (no TensorFlow): seqio, TFDS and TensorFlow are imported on
the first `read`, so modules on the core import path may import it.
"""

from __future__ import annotations

import os
from typing import Any, Mapping, Optional, Sequence

import numpy as np

from prd_jax.data import paths

__all__ = ["read", "read_files", "ensure_files_task", "splits", "lookup", "to_python"]

REQUIRED_KEYS = ("id", "problem", "answer")


def _resolved(data_dir: Optional[str]) -> Optional[str]:
    if data_dir is None or os.fspath(data_dir) == "":
        return None
    return os.path.abspath(os.path.expanduser(os.fspath(data_dir)))


def _check_file(name: str, split: str, split_files: Mapping[str, str], data_dir: Optional[str]) -> None:
    """ValueError naming the allowed splits for an undeclared split; FileNotFoundError naming the
    expected path and `PRD_DATA_DIR` when the split's file is missing."""
    if split not in split_files:
        raise ValueError(f"task {name!r} has no split {split!r}; allowed splits: {sorted(split_files)}")
    root, source = paths.resolve_data_dir(data_dir)
    path = os.path.join(root, *split_files[split].split("/"))
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"{name} split {split!r}: expected file {path} not found (data dir {root} from {source}). "
            f"Run `prd-jax data get NAME` for a built-in benchmark, or set the environment variable "
            f"{paths.DATA_DIR_ENV} to the directory that holds it, or pass data_dir.")


def ensure_files_task(name: str, split_files: Mapping[str, str], *, fields: Sequence[str] = REQUIRED_KEYS,
                      id_key: str = "id", derived: Sequence[tuple] = (), data_dir: Optional[str] = None) -> Any:
    """The seqio task `name` over JSONL `split_files` ({split: path under the data dir}),
    registered when absent or when the data dir it would read (`data_dir`, else `paths` rules:
    $PRD_DATA_DIR, then the default) or its files (`tfds_builders.prepared_dir`) differ from what
    its source reads. Another
    registration over the same builder and data dir (e.g. `seqio_tasks.register_tokenized`'s,
    which adds tokenizing preprocessors) is kept."""
    import seqio

    from prd_jax.data import seqio_tasks, tfds_builders

    cls = tfds_builders.builder_class(name, split_files, fields, id_key, derived)
    want = _resolved(data_dir)
    if name in seqio.TaskRegistry.names():
        task = seqio.get_mixture_or_task(name)
        has = getattr(task.source, "_manual_data_dir", None)
        if (getattr(task.source, "builder_cls", None) is cls
                and paths.resolve_data_dir(want)[0] == paths.resolve_data_dir(_resolved(has))[0]
                and getattr(task.source, "prepared_dir", None) == tfds_builders.prepared_dir(cls, want)):
            return task
    seqio_tasks.register_rows_task(name, cls, data_dir=want)
    return seqio.get_mixture_or_task(name)


def read_files(name: str, split_files: Mapping[str, str], split: str, *, limit: Optional[int] = None,
               data_dir: Optional[str] = None, fields: Sequence[str] = REQUIRED_KEYS, id_key: str = "id",
               derived: Sequence[tuple] = (), preprocess: bool = False) -> list[dict]:
    """Rows of split `split` of the JSONL files `split_files`, through seqio task `name`
    (`ensure_files_task`). Raises ValueError for an undeclared split (naming the allowed ones)
    and FileNotFoundError naming the expected path when the split's file is missing."""
    _check_limit(limit)
    _check_file(name, split, split_files, _resolved(data_dir))
    ensure_files_task(name, split_files, fields=fields, id_key=id_key, derived=derived, data_dir=data_dir)
    return read(name, split, limit=limit, preprocess=preprocess)


def _check_limit(limit) -> None:
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r}; must be None or an int >= 0")


def lookup(name: str) -> Any:
    """The registered seqio Task or Mixture `name`.

    Raises ValueError naming `name` and the registered names if it is unknown.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"seqio task name={name!r}; must be a non-empty string")
    import seqio

    if name in seqio.TaskRegistry.names() or name in seqio.MixtureRegistry.names():
        return seqio.get_mixture_or_task(name)
    known = sorted(set(seqio.TaskRegistry.names()) | set(seqio.MixtureRegistry.names()))
    raise ValueError(f"unknown seqio task or mixture {name!r}; allowed names (registered): {known}. A task "
                     "plug-in's data is read through the task (prd_jax.tasks.get_task(name).problems)")


def to_python(value: Any) -> Any:
    """bytes -> str, numpy scalars -> Python scalars, arrays -> (nested) lists, recursively."""
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, np.ndarray):
        return [to_python(v) for v in value.tolist()] if value.ndim else to_python(value.item())
    if isinstance(value, np.generic):
        return to_python(value.item())
    if isinstance(value, dict):
        return {k: to_python(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_python(v) for v in value]
    return value


def splits(name: str) -> tuple[str, ...]:
    """The splits `read` accepts for `name`: a task's splits, or those every task of a mixture has."""
    import seqio

    provider = lookup(name)
    if isinstance(provider, seqio.Mixture):
        common = set.intersection(*(set(t.splits) for t in provider.tasks))
        return tuple(sorted(common))
    return tuple(provider.splits)


def _task_rows(task: Any, split: str, limit: Optional[int], preprocess: bool) -> list[dict]:
    if split not in task.splits:
        raise ValueError(f"seqio task {task.name!r} has no split {split!r}; allowed splits: "
                         f"{sorted(task.splits)}")
    if preprocess:
        ds = task.get_dataset(sequence_length=None, split=split, shuffle=False, num_epochs=1,
                              use_cached=False, trim_output_features=False)
    else:
        ds = task.source.get_dataset(split=split, shuffle=False)
    if limit is not None:
        ds = ds.take(limit)
    return [to_python(ex) for ex in ds.as_numpy_iterator()]


def read(name: str, split: str, *, limit: Optional[int] = None, preprocess: bool = False) -> list[dict]:
    """Rows of registered seqio task or mixture `name`'s `split`, in source order (module docstring).

    `limit` caps the number of rows (None: all). Raises ValueError for an unknown name or split,
    naming the allowed ones.
    """
    _check_limit(limit)
    if not isinstance(split, str) or not split:
        raise ValueError(f"split={split!r}; must be a non-empty string such as 'train' or 'test'")
    provider = lookup(name)
    if limit == 0:
        return []
    import seqio

    tasks = provider.tasks if isinstance(provider, seqio.Mixture) else [provider]
    if isinstance(provider, seqio.Mixture):
        missing = [t.name for t in tasks if split not in t.splits]
        if missing:
            raise ValueError(f"mixture {name!r}: tasks {missing} have no split {split!r}")
    rows: list[dict] = []
    for task in tasks:
        left = None if limit is None else limit - len(rows)
        if left == 0:
            break
        rows += _task_rows(task, split, left, preprocess)
    return rows
