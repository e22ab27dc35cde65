"""A JSONL benchmark added out of tree in one file (docs/extending.md, "A task").

This module is the whole addition: it declares the task's data (one JSONL file per split, paths
relative to the data dir), its grader (math-verify final-answer equivalence, `MathTask`) and its
reward options (`last_number_fallback`: only a `\\boxed{}` or "the answer is" answer counts, so a
stray digit earns nothing), and registers it. Importing it is enough for `prd-jax eval`
(`config.task = "tiny_arith"`), SFT and RL (`config.task`); tests/test_task_plugin.py runs all three.
Each line of the files holds `id`, `problem`, `answer` and a worked `solution` (what SFT trains
on, `Task.sft_target`) as strings.
"""

from prd_jax.tasks import JsonlFiles, register_task
from prd_jax.tasks.math import MathTask

TINY_ARITH = register_task(MathTask(
    "tiny_arith",
    source=JsonlFiles({"train": "tiny_arith/train.jsonl", "test": "tiny_arith/test.jsonl"},
                      fields=("id", "problem", "answer", "solution")),
    templates="compact",  # the short prompts a char-level test model reads
    last_number_fallback=False,
))
