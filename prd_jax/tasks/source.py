"""Where a task's problems come from: the one declaration a task makes about its data (issue 35 §1).

A task's `source` is one of:

- `JsonlFiles({"train": "math/x_train.jsonl", "test": "math/x_test.jsonl"})`: one JSONL file per
  split, relative to the data dir (`data.paths`: the `data_dir` argument, `PRD_DATA_DIR`, or the user
  data dir that `prd-jax data get` fills). Read through a TFDS builder and a seqio task named
  `prd_<task name>` (`data.seqio_rows.read_files`), registered on first read. Every line must hold
  the `fields` as non-empty strings (default `id`, `problem`, `answer`), `id_key` unique;
  `derived` adds copies under other names (HumanEval: `id` = `task_id`).
- `SeqioData("my_mixture", module="my_pkg.tasks")`: a registered seqio task or mixture (the
  modules are imported first, so one that registers the task on import is enough).

Tasks whose data is neither (synthetic draws, publishers' parquet) override `Task.problems`
instead. No JAX or TensorFlow is imported here; seqio loads on the first read.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import Optional

from prd_jax.data import seqio_rows

__all__ = ["JsonlFiles", "SeqioData", "seqio_name"]


def seqio_name(task_name: str) -> str:
    """The seqio task (and TFDS builder) name of a task's JSONL files: `prd_<task name>`."""
    return f"prd_{task_name}"


def _pairs(value, what: str) -> tuple:
    items = value.items() if isinstance(value, dict) else value
    try:
        return tuple((str(a), str(b)) for a, b in items)
    except (TypeError, ValueError):
        raise ValueError(f"{what}={value!r}; allowed: a dict or (name, value) pairs") from None


@dataclasses.dataclass(frozen=True)
class JsonlFiles:
    """JSONL files, one per split (see the module docstring). Hashable, so a task stays a dict key."""

    splits: tuple  # {split: path under the data dir}, stored as ((split, path), ...)
    fields: tuple = ("id", "problem", "answer")
    id_key: str = "id"
    derived: tuple = ()  # {feature: field it copies}, stored as pairs

    def __post_init__(self):
        object.__setattr__(self, "splits", _pairs(self.splits, "JsonlFiles.splits"))
        object.__setattr__(self, "fields", tuple(self.fields))
        object.__setattr__(self, "derived", _pairs(self.derived, "JsonlFiles.derived"))
        if not self.splits:
            raise ValueError("JsonlFiles.splits is empty; give {split: path under the data dir}")
        bad = [p for _, p in self.splits if not p.endswith(".jsonl") or p.startswith("/")]
        if bad:
            raise ValueError(f"JsonlFiles.splits: {bad}; allowed: .jsonl paths relative to the data dir")

    @property
    def split_names(self) -> tuple:
        return tuple(s for s, _ in self.splits)

    def rows(self, task_name: str, split: str, limit: Optional[int] = None,
             data_dir: Optional[str] = None) -> list:
        return seqio_rows.read_files(seqio_name(task_name), dict(self.splits), split, limit=limit,
                                     data_dir=data_dir, fields=self.fields, id_key=self.id_key,
                                     derived=self.derived)


@dataclasses.dataclass(frozen=True)
class SeqioData:
    """A registered seqio task or mixture `name`; `module` (one name, or several separated by
    commas) is imported before the lookup. `data_dir` does not apply (the seqio task reads what
    it was registered over)."""

    name: str
    module: str = ""

    def __post_init__(self):
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"SeqioData.name={self.name!r}; must be a registered seqio task or mixture name")
        if not isinstance(self.module, str):
            raise ValueError(f"SeqioData.module={self.module!r}; must be a module name (or names separated by commas)")

    def import_modules(self, field: str = "SeqioData.module") -> list:
        """Import `module` (each name of it); ValueError naming `field` when one cannot be imported."""
        names = [m.strip() for m in self.module.split(",") if m.strip()]
        for module in names:
            try:
                importlib.import_module(module)
            except ImportError as e:
                raise ValueError(f"{field}={self.module!r}: cannot import {module!r} ({e}); give an importable "
                                 f"module that registers the seqio task {self.name!r}") from e
        return names

    @property
    def split_names(self) -> tuple:
        self.import_modules()
        return seqio_rows.splits(self.name)

    def rows(self, task_name: str, split: str, limit: Optional[int] = None,
             data_dir: Optional[str] = None) -> list:
        self.import_modules()
        return seqio_rows.read(self.name, split, limit=limit)
