"""Benchmark data: locate and read the math and code JSONL files; TFDS builders and seqio tasks over them.

Training and eval read data through `seqio_rows.read(task_or_mixture, split)` (seqio is the one
data path; the module itself is TF-free and loads seqio on first read).

Importing `prd_jax.data` is cheap: it loads only `paths` and `jsonl` (no TensorFlow, no seqio).
The TensorFlow-based modules are imported explicitly:

    from prd_jax.data import tfds_builders   # TFDS builders (manual dir = data dir), build()
    from prd_jax.data import vocab            # HFVocabulary: seqio.Vocabulary over our Tokenizer
    from prd_jax.data import tasks            # register_tasks(): seqio tasks prd_gsm8k, ...

Data dir: the `data_dir` argument, else $PRD_DATA_DIR, else `<repo root>/../shared/data`.
"""

from prd_jax.data.jsonl import iter_jsonl, read_jsonl, read_problems
from prd_jax.data.paths import (DATA_DIR_ENV, DATASETS, TFDS_DIR_ENV, data_dir, dataset_file,
                                tfds_dir)

__all__ = ["DATA_DIR_ENV", "DATASETS", "TFDS_DIR_ENV", "data_dir", "dataset_file", "tfds_dir",
           "iter_jsonl", "read_jsonl", "read_problems"]
