"""TFDS builders over local JSONL files (TFDS *manual dir* pattern), one per task data source.

Nothing is downloaded. A task that declares its data as JSONL files (`tasks.source.JsonlFiles`:
one file per split, relative to the benchmark *data dir*, see `paths.data_dir`) gets a builder
class made here from that declaration (`builder_class`), named `prd_<task name>`. The builder
reads its files from `dl_manager.manual_dir`, which this module sets to the data dir itself, so
the manual dir layout is the shared data layout (`<data dir>/math/gsm8k_test.jsonl`, ...).

Prepared datasets are written under the TFDS data dir `paths.tfds_dir()` (default
`~/.cache/prd_jax/tfds`, or `$PRD_TFDS_DIR`). Preparing is idempotent: an already prepared
version is reused as is. `build` / `prepare` do not refresh it when the JSONL files change (pass
`force=True`); the seqio tasks that read JSONL data (`seqio_tasks.ManualTfdsDataSource`) prepare
under `prepared_dir`, keyed by the declaration and the files' sizes and times, so new data is
never read from a stale copy.

Examples keep the file order (`disable_shuffling`). Their text features are the declared
`fields` (each required, a non-empty string on every line, `id_key` unique in the file) plus the
`derived` copies (`("id", "task_id")`: feature `id` holds the line's `task_id`).

    from prd_jax.data import tfds_builders
    cls = tfds_builders.builder_class("prd_aime2024", {"test": "math/aime2024.jsonl"})
    splits = tfds_builders.build(cls)        # {"test": tf.data.Dataset}
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import types
from typing import Mapping, Optional, Sequence

import tensorflow_datasets as tfds
from etils import epath

from prd_jax.data import jsonl, paths
from prd_jax.data.tf_cpu import tf

__all__ = ["JsonlBuilder", "builder_class", "prepared_dir", "get_builder", "download_config", "prepare", "build"]

_NAME_RE = re.compile(r"^[a-z][a-z0-9_]*$")


class JsonlBuilder(tfds.core.GeneratorBasedBuilder, skip_registration=True):
    """Shared implementation: one split per JSONL file of `SPLIT_FILES` (made by `builder_class`)."""

    VERSION = tfds.core.Version("1.0.0")
    RELEASE_NOTES = {"1.0.0": "Initial release: the declared text fields from local JSONL."}
    # TFDS derives this (to look for a checksums.tsv beside the code) through a branch that
    # needs the optional `importlib_resources` package.
    code_path = epath.Path(__file__)
    MANUAL_DOWNLOAD_INSTRUCTIONS = "The manual dir is the benchmark data dir (see prd_jax.data.paths)."

    SPLIT_FILES: tuple = ()  # ((split, path relative to the data dir), ...)
    FIELDS: tuple = jsonl.REQUIRED_KEYS
    ID_KEY: str = "id"
    DERIVED: tuple = ()  # ((feature, field it copies), ...)

    def _info(self) -> tfds.core.DatasetInfo:
        names = tuple(self.FIELDS) + tuple(d for d, _ in self.DERIVED if d not in self.FIELDS)
        supervised = ("problem", "answer") if {"problem", "answer"} <= set(self.FIELDS) else None
        return tfds.core.DatasetInfo(
            builder=self,
            description=f"{self.name}: {', '.join(p for _, p in self.SPLIT_FILES)}",
            features=tfds.features.FeaturesDict({k: tfds.features.Text() for k in names}),
            supervised_keys=supervised,
            # Keep the JSONL order (keys are line indices) so `take(n)` is reproducible.
            disable_shuffling=True,
        )

    def _split_generators(self, dl_manager: tfds.download.DownloadManager):
        manual_dir = os.fspath(dl_manager.manual_dir)
        generators = {}
        for split, relpath in self.SPLIT_FILES:
            path = os.path.join(manual_dir, *relpath.split("/"))
            if not os.path.isfile(path):
                raise FileNotFoundError(f"{self.name}: expected {path} in the manual dir {manual_dir}.\n"
                                        f"{self.MANUAL_DOWNLOAD_INSTRUCTIONS}")
            generators[split] = self._generate_examples(path)
        return generators

    def _generate_examples(self, path: str):
        for index, row in enumerate(jsonl.iter_json_objects(path, self.FIELDS, key=self.ID_KEY)):
            fields = {k: row[k] for k in self.FIELDS}
            yield index, {**fields, **{d: row[src] for d, src in self.DERIVED}}


_CLASSES: dict = {}


def builder_class(name: str, split_files: Mapping[str, str], fields: Sequence[str] = jsonl.REQUIRED_KEYS,
                  id_key: str = "id", derived: Sequence[tuple] = ()) -> type:
    """The builder class `name` over `split_files` ({split: path relative to the data dir}).

    The same arguments return the same class; another declaration under a used name raises
    ValueError naming both, as does a name TFDS cannot use (lower case, digits, underscores).
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"TFDS builder name {name!r}; allowed: lower-case letters, digits and underscores, "
                         "starting with a letter (a task's name gives `prd_<name>`)")
    spec = (tuple((str(s), str(p)) for s, p in dict(split_files).items()), tuple(fields), str(id_key),
            tuple((str(d), str(s)) for d, s in derived))
    if not spec[0]:
        raise ValueError(f"{name}: split_files is empty; give {{split: path relative to the data dir}}")
    if id_key not in spec[1]:
        raise ValueError(f"{name}: id_key={id_key!r} must be one of the fields {list(spec[1])}")
    bad = [s for _, s in spec[3] if s not in spec[1]]
    if bad:
        raise ValueError(f"{name}: derived features copy {bad}, which are not among the fields {list(spec[1])}")
    if name in _CLASSES:
        cls = _CLASSES[name]
        if cls.SPEC != spec:
            raise ValueError(f"TFDS builder {name!r} is already declared as {cls.SPEC}; a second declaration "
                             f"{spec} needs another task name")
        return cls
    files = ", ".join(p for _, p in spec[0])
    instructions = (f"{name} is built from local JSONL files ({files}, relative to the benchmark data dir); "
                    f"nothing is downloaded. The data dir is the `data_dir` argument, else ${paths.DATA_DIR_ENV}, "
                    "else the user data dir (`prd-jax data get` fills it; docs/data.md). With the plain TFDS API use "
                    "`tfds.download.DownloadConfig(manual_dir=<data dir>)`.")
    body = {"name": name, "MANUAL_DOWNLOAD_INSTRUCTIONS": instructions, "SPLIT_FILES": spec[0], "FIELDS": spec[1], "ID_KEY": spec[2], "DERIVED": spec[3],
            "SPEC": spec, "__module__": __name__}
    # Registered with TFDS under `name` (seqio's TfdsDataSource looks builders up by name).
    cls = types.new_class(f"Builder_{name}", (JsonlBuilder,), {}, lambda ns: ns.update(body))
    _CLASSES[name] = cls
    return cls


def prepared_dir(cls: type, data_dir: Optional[str] = None, tfds_dir: Optional[str] = None) -> str:
    """The TFDS data dir that seqio tasks prepare `cls` in: `<tfds_dir>/jsonl_<digest>`, the digest
    of the declaration (`cls.SPEC`), the data dir it reads and each split file's size and mtime.
    New data (`prd-jax data get` of another revision, an edited file, another data dir) or new
    declared fields therefore prepare afresh instead of reading a stale copy."""
    root = paths.resolve_data_dir(data_dir)[0]
    files = []
    for _, rel in cls.SPLIT_FILES:
        path = os.path.join(root, *rel.split("/"))
        stat = os.stat(path) if os.path.isfile(path) else None
        files.append((rel, stat.st_size if stat else -1, stat.st_mtime_ns if stat else -1))
    key = json.dumps([cls.name, list(cls.SPEC), root, files], default=list).encode()
    return os.path.join(paths.tfds_dir(tfds_dir), f"jsonl_{hashlib.sha256(key).hexdigest()[:16]}")


def get_builder(cls: type, tfds_dir: Optional[str] = None) -> JsonlBuilder:
    """A builder instance of `cls` writing to / reading from `paths.tfds_dir(tfds_dir)`."""
    return cls(data_dir=paths.tfds_dir(tfds_dir))


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


@contextlib.contextmanager
def _preparing(builder):
    """Hold an exclusive lock on a local TFDS dir while `builder` is prepared there.

    Several processes (pytest workers, the hosts of one pod sharing a disk, two evals) may
    prepare the same dataset at once; TFDS writes to a private `incomplete.*` dir and renames it,
    so the second rename fails. The lock makes the later process wait and then reuse the first
    one's copy. Remote dirs (`gs://`) cannot be locked; `prepare` reuses a copy that appears.
    """
    root = os.fspath(builder.data_dir_root)
    if "://" in root:
        yield
        return
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, f".{builder.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def prepare(builder, data_dir: Optional[str] = None, tfds_dir: Optional[str] = None,
            force: bool = False) -> JsonlBuilder:
    """Prepare `builder` (a builder class or instance) if needed and return the builder instance.

    Idempotent: an already prepared dataset is reused without reading the JSONL files.
    `tfds_dir` is only used when `builder` is a class.
    """
    if isinstance(builder, type):
        builder = get_builder(builder, tfds_dir)
    if force or not builder.is_prepared():
        with _preparing(builder):
            if force or not builder.is_prepared():  # another process may have prepared it meanwhile
                try:
                    builder.download_and_prepare(download_config=download_config(data_dir, force))
                except FileExistsError:
                    # A writer without our lock (another host on a shared `gs://` dir) finished first.
                    if not builder.is_prepared():
                        raise
    if not builder.info.splits:
        # This instance was created before another one prepared the data: reload its info.
        builder.info.read_from_directory(builder.data_dir)
    return builder


def build(cls: type, data_dir: Optional[str] = None, tfds_dir: Optional[str] = None,
          force: bool = False) -> dict[str, tf.data.Dataset]:
    """Prepare builder class `cls` (if needed) and load it: {split: tf.data.Dataset} in file order.

    `data_dir` is the JSONL data dir (manual dir), `tfds_dir` the TFDS data dir (cache).
    """
    builder = prepare(cls, data_dir=data_dir, tfds_dir=tfds_dir, force=force)
    return {split: builder.as_dataset(split=split, shuffle_files=False)
            for split in builder.info.splits}
