"""Problem rows of a task's seqio data, as python dicts (the one place tasks load data).

`read_rows(seqio_task, split)` reads through the data layer's `prd_jax.data.seqio_rows.read`
(seqio is the one data path, issue 14 §4). `seqio_rows` imports seqio (and TensorFlow) only
when it reads, so TensorFlow stays out of the import path of the model, sampler, operators
and train step.
"""

from __future__ import annotations

from typing import Optional

from prd_jax.data import seqio_rows

__all__ = ["read_rows"]


def read_rows(name: str, split: str, *, limit: Optional[int] = None, data_dir: Optional[str] = None) -> list:
    """Rows of seqio task or mixture `name`, split `split`, at most `limit`, in source order."""
    if limit is not None and (not isinstance(limit, int) or limit < 0):
        raise ValueError(f"limit={limit!r}; allowed: None or an int >= 0")
    return seqio_rows.read(name, split, limit=limit, data_dir=data_dir)
