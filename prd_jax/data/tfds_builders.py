"""TFDS builders for the math and code benchmarks, fed from local JSONL files (TFDS *manual dir* pattern).

Nothing is downloaded. Each builder reads its JSONL files from `dl_manager.manual_dir`, which
this module sets to the benchmark *data dir* itself (the directory that contains `math/`, see
`paths.data_dir`), so the manual dir layout is exactly the shared data layout:

    <manual_dir>/math/gsm8k_train.jsonl   -> prd_gsm8k    split train
    <manual_dir>/math/gsm8k_test.jsonl    -> prd_gsm8k    split test
    <manual_dir>/math/math500.jsonl       -> prd_math500  split test
    <manual_dir>/math/aime2024.jsonl      -> prd_aime2024 split test
    <manual_dir>/math/aime2025.jsonl      -> prd_aime2025 split test
    <manual_dir>/code/humaneval.jsonl     -> prd_humaneval split test

Prepared datasets are written under the TFDS data dir `paths.tfds_dir()` (default
`~/.cache/prd_jax/tfds`, or `$PRD_TFDS_DIR`). Preparing is idempotent: an already prepared
version is reused as is. It is *not* refreshed when the JSONL files change; pass `force=True`
(or delete `<tfds_dir>/<builder name>`) after editing the data.

Examples keep the JSONL file order (`disable_shuffling`), with text features `id`, `problem`,
`answer`. `prd_humaneval` keeps the five HumanEval fields exactly as in the file (`task_id`,
`prompt`, `canonical_solution`, `test`, `entry_point`) and adds the same three convenience
fields: `id` = task_id, `problem` = prompt, `answer` = task_id.

    from prd_jax.data import tfds_builders
    splits = tfds_builders.build("gsm8k")        # {"train": tf.data.Dataset, "test": ...}
"""

from __future__ import annotations

import os
from typing import Optional, Union

import tensorflow_datasets as tfds
from etils import epath

from prd_jax.data import jsonl, paths
from prd_jax.data._tf import tf

__all__ = ["PrdGsm8k", "PrdMath500", "PrdAime2024", "PrdAime2025", "PrdHumanEval", "BUILDERS", "builder_class",
           "get_builder", "download_config", "prepare", "build"]

_MANUAL_INSTRUCTIONS = f"""\
This dataset is built from local JSONL files; nothing is downloaded. The manual dir must be
the benchmark data dir, i.e. the directory that contains `math/` and `code/` with
{", ".join(sorted(os.path.basename(p) for p in paths.DATASETS.values()))}.
`prd_jax.data.tfds_builders.prepare()` passes it for you: the `data_dir` argument, else
${paths.DATA_DIR_ENV}, else `<repo root>/../shared/data`. With the plain TFDS API use
`tfds.download.DownloadConfig(manual_dir=<data dir>)`.
"""


class _MathProblems(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Shared implementation: one split per JSONL file in `SPLIT_FILES`."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release: id, problem, answer from local JSONL."}
    MANUAL_DOWNLOAD_INSTRUCTIONS = _MANUAL_INSTRUCTIONS
    # TFDS derives this (to look for a checksums.tsv beside the code) through a branch that
    # needs the optional `importlib_resources` package; all builders live in this file.
    code_path = epath.Path(__file__)

    SPLIT_FILES: dict[str, str] = {}  # split -> key of paths.DATASETS
    DESCRIPTION = ""
    HOMEPAGE = ""

    def _info(self) -> tfds.core.DatasetInfo:
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.DESCRIPTION,
            features=tfds.features.FeaturesDict({
                "id": tfds.features.Text(),
                "problem": tfds.features.Text(),
                "answer": tfds.features.Text(),
            }),
            supervised_keys=("problem", "answer"),
            homepage=self.HOMEPAGE,
            # Keep the JSONL order (keys are line indices) so `take(n)` is reproducible.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        manual_dir = os.fspath(dl_manager.manual_dir)
        generators = {}
        for split, name in self.SPLIT_FILES.items():
            path = os.path.join(manual_dir, *paths.DATASETS[name].split("/"))
            if not os.path.isfile(path):
                raise FileNotFoundError(
                    f"{self.name}: expected {path} in the manual dir {manual_dir}.\n"
                    f"{self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
            generators[split] = self._generate_examples(path)
        return generators

    def _generate_examples(self, path: str):
        for index, row in enumerate(jsonl.iter_jsonl(path)):
            yield index, {"id": row["id"], "problem": row["problem"], "answer": row["answer"]}


class PrdGsm8k(_MathProblems):
    """GSM8K (grade-school math word problems); `answer` is the final integer as text."""

    name = "prd_gsm8k"
    SPLIT_FILES = {"train": "gsm8k_train", "test": "gsm8k_test"}
    DESCRIPTION = "GSM8K grade-school math word problems with their final numeric answers."
    HOMEPAGE = "https://github.com/openai/grade-school-math"


class PrdMath500(_MathProblems):
    """MATH-500; `answer` is LaTeX."""

    name = "prd_math500"
    SPLIT_FILES = {"test": "math500"}
    DESCRIPTION = "MATH-500 (PRM800K subset of MATH) problems with final LaTeX answers."
    HOMEPAGE = "https://github.com/openai/prm800k"


class PrdAime2024(_MathProblems):
    """AIME 2024 I and II; `answer` is an integer as text."""

    name = "prd_aime2024"
    SPLIT_FILES = {"test": "aime2024"}
    DESCRIPTION = "AIME 2024 I and II problems with integer answers."


class PrdAime2025(_MathProblems):
    """AIME 2025 I and II; `answer` is an integer as text."""

    name = "prd_aime2025"
    SPLIT_FILES = {"test": "aime2025"}
    DESCRIPTION = "AIME 2025 I and II problems with integer answers."


HUMANEVAL_FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")


class PrdHumanEval(_MathProblems):
    """HumanEval (164 Python functions with unit tests): the JSONL fields kept verbatim, plus
    `id` = `answer` = task_id and `problem` = prompt, so code rows also fit the problem layout."""

    name = "prd_humaneval"
    SPLIT_FILES = {"test": "humaneval"}
    RELEASE_NOTES = {"1.0.0": "Initial release: the HumanEval fields plus id, problem, answer."}
    DESCRIPTION = "HumanEval: Python function signatures with docstrings, solutions and tests."
    HOMEPAGE = "https://github.com/openai/human-eval"

    def _info(self) -> tfds.core.DatasetInfo:
        text = tfds.features.Text()
        return tfds.core.DatasetInfo(
            builder=self,
            description=self.DESCRIPTION,
            features=tfds.features.FeaturesDict(
                {key: text for key in ("id", "problem", "answer") + HUMANEVAL_FIELDS}),
            homepage=self.HOMEPAGE,
            disable_shuffling=True,
        )

    def _generate_examples(self, path: str):
        for index, row in enumerate(jsonl.iter_json_objects(path, HUMANEVAL_FIELDS, key="task_id")):
            fields = {key: row[key] for key in HUMANEVAL_FIELDS}
            yield index, {**fields, "id": row["task_id"], "problem": row["prompt"],
                          "answer": row["task_id"]}


# Short name -> builder class. `builder_class` also accepts the TFDS names ("prd_gsm8k").
BUILDERS: dict[str, type[_MathProblems]] = {
    "gsm8k": PrdGsm8k,
    "math500": PrdMath500,
    "aime2024": PrdAime2024,
    "aime2025": PrdAime2025,
    "humaneval": PrdHumanEval,
}

BuilderLike = Union[str, _MathProblems]


def builder_class(name: str) -> type[_MathProblems]:
    """The builder class for "gsm8k" / "prd_gsm8k", "math500", "aime2024", "aime2025", "humaneval"."""
    short = name[len("prd_"):] if name.startswith("prd_") else name
    if short not in BUILDERS:
        raise ValueError(f"unknown benchmark {name!r}; allowed names: {sorted(BUILDERS)}")
    return BUILDERS[short]


def get_builder(name: str, tfds_dir: Optional[str] = None) -> _MathProblems:
    """A builder instance writing to / reading from `paths.tfds_dir(tfds_dir)`."""
    return builder_class(name)(data_dir=paths.tfds_dir(tfds_dir))


def download_config(data_dir: Optional[str] = None, force: bool = False
                    ) -> tfds.download.DownloadConfig:
    """DownloadConfig with the benchmark data dir as manual dir; never touches the network."""
    mode = (tfds.download.GenerateMode.FORCE_REDOWNLOAD if force
            else tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS)
    return tfds.download.DownloadConfig(
        manual_dir=paths.data_dir(data_dir),
        download_mode=mode,
        try_download_gcs=False,
        compute_stats=tfds.download.ComputeStatsMode.SKIP,
    )


def prepare(builder: BuilderLike, data_dir: Optional[str] = None,
            tfds_dir: Optional[str] = None, force: bool = False) -> _MathProblems:
    """Prepare `builder` (a name or an instance) if needed and return the builder instance.

    Idempotent: an already prepared dataset is reused without reading the JSONL files.
    `tfds_dir` is only used when `builder` is a name.
    """
    if isinstance(builder, str):
        builder = get_builder(builder, tfds_dir)
    if force or not builder.is_prepared():
        builder.download_and_prepare(download_config=download_config(data_dir, force))
    if not builder.info.splits:
        # This instance was created before another one prepared the data: reload its info.
        builder.info.read_from_directory(builder.data_dir)
    return builder


def build(name: str, data_dir: Optional[str] = None, tfds_dir: Optional[str] = None,
          force: bool = False) -> dict[str, tf.data.Dataset]:
    """Prepare benchmark `name` (if needed) and load it: {split: tf.data.Dataset} in file order.

    `data_dir` is the JSONL data dir (manual dir), `tfds_dir` the TFDS data dir (cache).
    """
    builder = prepare(name, data_dir=data_dir, tfds_dir=tfds_dir, force=force)
    return {split: builder.as_dataset(split=split, shuffle_files=False)
            for split in builder.info.splits}
