"""Rows of a registered seqio task or mixture as plain Python dicts: the one way data is read.

    from prd_jax.data import seqio_rows
    rows = seqio_rows.read("prd_math500", "test", limit=8)   # [{"id", "problem", "answer"}, ...]

Built-in tasks (registered on first use, idempotently; TFDS builders of `data.tfds_builders`
over the JSONL files of the data dir, see `data.paths`):

    prd_gsm8k      train, test   id, problem, answer
    prd_math500    test          id, problem, answer
    prd_aime2024   test          id, problem, answer
    prd_aime2025   test          id, problem, answer
    prd_humaneval  test          task_id, prompt, canonical_solution, test, entry_point (as in
                                 code/humaneval.jsonl) plus id = task_id, problem = prompt,
                                 answer = task_id

Any other name must already be registered in `seqio.TaskRegistry` / `seqio.MixtureRegistry`
(e.g. by importing the module that registers it, or by `data.synthetic.register_synthetic_task`).

What a row holds:
- `preprocess=False` (default): the task's *source* examples, before its preprocessors; the
  fields its data source yields. For the built-ins these are the fields above.
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
from typing import Any, Optional

import numpy as np

from prd_jax.data import paths

__all__ = ["BUILTIN_TASKS", "DATASET_TASKS", "read", "splits", "register_builtin_tasks", "lookup",
           "to_python"]

# Built-in seqio task name -> the `tfds_builders.BUILDERS` short name.
BUILTIN_TASKS: dict[str, str] = {f"prd_{short}": short for short in
                                 ("gsm8k", "math500", "aime2024", "aime2025", "humaneval")}
# `paths.DATASETS` name (one JSONL file) -> (built-in task, split) that serves it.
DATASET_TASKS: dict[str, tuple[str, str]] = {
    "gsm8k_train": ("prd_gsm8k", "train"), "gsm8k_test": ("prd_gsm8k", "test"),
    "math500": ("prd_math500", "test"), "aime2024": ("prd_aime2024", "test"),
    "aime2025": ("prd_aime2025", "test"), "humaneval": ("prd_humaneval", "test"),
}


def _resolved(data_dir: Optional[str]) -> Optional[str]:
    if data_dir is None or os.fspath(data_dir) == "":
        return None
    return os.path.abspath(os.path.expanduser(os.fspath(data_dir)))


def _register_builtin(name: str, data_dir: Optional[str]) -> None:
    """Register built-in task `name`: its TFDS source, no preprocessors, no output features."""
    import seqio

    from prd_jax.data import tasks

    source = tasks.ManualTfdsDataSource(BUILTIN_TASKS[name], data_dir=data_dir)
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(name, source=source, preprocessors=[], output_features={},
                           metric_fns=[])


def _ensure_builtin(name: str, data_dir: Optional[str]) -> Any:
    """The registered built-in task `name`, registering it when absent or when the data dir
    it would read (`data_dir`, else `paths` rules: $PRD_DATA_DIR, then the default) differs
    from the one its source reads. Another registration of the same name (e.g.
    `data.tasks.register_tasks`, which adds tokenizing preprocessors over the same source) is
    kept when the data dirs match."""
    import seqio

    want = _resolved(data_dir)
    if name in seqio.TaskRegistry.names():
        task = seqio.get_mixture_or_task(name)
        has = getattr(task.source, "_manual_data_dir", None)
        if paths._resolve(want)[0] == paths._resolve(_resolved(has))[0]:
            return task
    _register_builtin(name, want)
    return seqio.get_mixture_or_task(name)


def register_builtin_tasks(data_dir: Optional[str] = None) -> list[str]:
    """Register (or re-register) every built-in task over `data_dir`; returns their names."""
    for name in BUILTIN_TASKS:
        _register_builtin(name, _resolved(data_dir))
    return list(BUILTIN_TASKS)


def _check_builtin_file(name: str, split: str, task: Any, data_dir: Optional[str]) -> None:
    """Raise FileNotFoundError naming the JSONL path if the built-in split's file is missing."""
    from prd_jax.data import tfds_builders

    split_files = tfds_builders.builder_class(BUILTIN_TASKS[name]).SPLIT_FILES
    if split not in split_files:
        raise ValueError(f"task {name!r} has no split {split!r}; allowed splits: {sorted(split_files)}")
    where = _resolved(data_dir) or getattr(task.source, "_manual_data_dir", None)
    paths.dataset_file(split_files[split], where)


def lookup(name: str, data_dir: Optional[str] = None) -> Any:
    """The registered seqio Task or Mixture `name` (built-ins registered on first use).

    Raises ValueError naming `name` and the registered and built-in names if it is unknown.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"seqio task name={name!r}; must be a non-empty string")
    import seqio

    if name in BUILTIN_TASKS:
        return _ensure_builtin(name, data_dir)
    if name in seqio.TaskRegistry.names() or name in seqio.MixtureRegistry.names():
        return seqio.get_mixture_or_task(name)
    known = sorted(set(BUILTIN_TASKS) | set(seqio.TaskRegistry.names())
                   | set(seqio.MixtureRegistry.names()))
    raise ValueError(f"unknown seqio task or mixture {name!r}; allowed names (built-in and "
                     f"registered): {known}")


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


def splits(name: str, data_dir: Optional[str] = None) -> tuple[str, ...]:
    """The splits `read` accepts for `name`: a task's splits, or those every task of a mixture has."""
    import seqio

    provider = lookup(name, data_dir)
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


def read(name: str, split: str, *, limit: Optional[int] = None, data_dir: Optional[str] = None,
         preprocess: bool = False) -> list[dict]:
    """Rows of seqio task or mixture `name`'s `split`, in source order (module docstring).

    `limit` caps the number of rows (None: all). `data_dir` is the benchmark data dir for the
    built-in tasks (default: `paths.data_dir` rules). Raises ValueError for an unknown name or
    split (naming the allowed ones) and FileNotFoundError, naming the expected JSONL path, when
    a built-in task's file is missing.
    """
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r}; must be None or an int >= 0")
    if not isinstance(split, str) or not split:
        raise ValueError(f"split={split!r}; must be a non-empty string such as 'train' or 'test'")
    provider = lookup(name, data_dir)
    if name in BUILTIN_TASKS:
        _check_builtin_file(name, split, provider, data_dir)
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
