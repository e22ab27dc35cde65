"""Benchmark data: locate and read JSONL files; TFDS builders and seqio tasks over them.

Which files a benchmark reads is declared by its task (`prd_jax.tasks`: a task's `source`);
every stage asks the task for its problems, and the task reads through this layer:
`seqio_rows.read_files` (JSONL files through a TFDS builder and a seqio task) or
`seqio_rows.read` (any registered seqio task or mixture). `seqio_rows` is TF-free and loads
seqio on first read.

Importing `prd_jax.data` is cheap: it loads only `paths` and `jsonl` (no TensorFlow, no seqio).
The TensorFlow-based modules are imported explicitly:

    from prd_jax.data import tfds_builders   # builder_class(): TFDS builders over JSONL files
    from prd_jax.data import seqio_tasks      # seqio tasks over them, tokenized or not
    from prd_jax.data import vocab            # HFVocabulary: seqio.Vocabulary over our Tokenizer

Data dir: the `data_dir` argument, else $PRD_DATA_DIR, else the user data dir
(`paths.default_data_dir`); `prd-jax data get NAME` (`download`, `catalog`) fills it.
"""

from prd_jax.data.jsonl import iter_jsonl, read_jsonl
from prd_jax.data.paths import DATA_DIR_ENV, TFDS_DIR_ENV, data_dir, tfds_dir

__all__ = ["DATA_DIR_ENV", "TFDS_DIR_ENV", "data_dir", "tfds_dir", "iter_jsonl", "read_jsonl"]
