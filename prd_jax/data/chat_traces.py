"""Chat-format SFT traces from a directory of JSONL files: rows, a TFDS builder, a seqio task.

A *trace dir* holds `train.jsonl` and, optionally, `validation.jsonl`. Each non-blank line is
one JSON object in one of two formats:

    {"id": "a1", "prompt": "What is 2+2?", "response": "4", "system": "optional"}
    {"id": "a2", "messages": [{"role": "system", "content": "..."},
                              {"role": "user", "content": "..."},
                              {"role": "assistant", "content": "..."}]}

In the `messages` format the last message must be an assistant turn: it is the completion,
and every earlier message is context (multi-turn chats keep earlier assistant turns as
context). `id` is optional (a string or an int); without it a row's id is
`<file stem>-<row index>` (0-based, blank lines not counted). Ids are unique per file.
A bad row raises ValueError naming `file:line` and the field.

Held-out split: without `validation.jsonl`, a row of train.jsonl goes to `validation` when
`sha256(f"{holdout_seed}:{id}")` read as a fraction in [0, 1) is below
`validation_fraction`; the rest stay in `train`. The assignment depends only on the row's
id, so it survives reordering and appending. With `validation.jsonl` present, the fraction
is ignored and the two files are the two splits.

Row reading (`read_rows`, `split_rows`) imports only the standard library. The TFDS builder
(`prd_chat_traces`; features `id`, `prompt_messages` as a JSON list of {role, content},
`response`, in file order) and `register_chat_task` import TensorFlow, TFDS and seqio when
called, so `import prd_jax.data.chat_traces` stays TF-free.

    from prd_jax.data import chat_traces
    chat_traces.register_chat_task("my_sft", "/path/to/traces", tokenizer)
    ds = seqio.get_mixture_or_task("my_sft").get_dataset(
        sequence_length=None, split="validation", shuffle=False)

Task examples: `inputs` = prompt ids, `targets` = completion ids (see `render_example`),
plus `id`, `prompt_messages` and `response` strings.

Prepared datasets go to `<tfds_dir>/prd_chat_traces/<name>_<digest>/`, where the digest
covers the trace dir's absolute path, the size and mtime of its JSONL files and the split
settings: editing a file makes a fresh version on next use (old ones stay until deleted).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib
import json
import os
import re
from typing import Any, Mapping, Optional, Sequence, Union

import numpy as np

from prd_jax.data import paths

__all__ = ["TRAIN_FILE", "VALIDATION_FILE", "BUILDER_NAME", "render_example", "normalize_row", "read_rows",
           "in_validation", "split_names", "split_rows", "builder_class", "get_builder",
           "prepare", "build", "register_chat_task", "register_chat_text_task"]

TRAIN_FILE = "train.jsonl"
VALIDATION_FILE = "validation.jsonl"
BUILDER_NAME = "prd_chat_traces"

_FORMATS = ("rows need 'prompt' and 'response' strings (optional 'system'), or 'messages': "
            "a list of {role, content} ending with an assistant turn")
_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$")


def _nonempty_str(row: Mapping, key: str, where: str) -> str:
    if key not in row:
        raise ValueError(f"{where}: missing field {key!r}; {_FORMATS}")
    value = row[key]
    if not isinstance(value, str):
        raise ValueError(f"{where}: invalid field {key!r}: expected a string, "
                         f"got {type(value).__name__}")
    if not value.strip():
        raise ValueError(f"{where}: invalid field {key!r}: empty string")
    return value


def _check_messages(messages: Any, where: str) -> list[dict]:
    if not isinstance(messages, list) or len(messages) < 2:
        raise ValueError(f"{where}: invalid field 'messages': expected a list of at least 2 "
                         f"{{role, content}} objects (context, then the assistant turn)")
    out = []
    for i, m in enumerate(messages):
        field = f"messages[{i}]"
        if not isinstance(m, Mapping):
            raise ValueError(f"{where}: invalid field {field!r}: expected an object, "
                             f"got {type(m).__name__}")
        for key in ("role", "content"):
            if not isinstance(m.get(key), str):
                problem = "missing" if key not in m else f"a {type(m[key]).__name__}"
                raise ValueError(f"{where}: invalid field '{field}.{key}': expected a string, "
                                 f"got {problem}")
        out.append({"role": m["role"], "content": m["content"]})
    if out[-1]["role"] != "assistant":
        raise ValueError(f"{where}: invalid field 'messages[{len(out) - 1}].role': the last "
                         f"message must be 'assistant' (the completion), got {out[-1]['role']!r}")
    if not out[-1]["content"].strip():
        raise ValueError(f"{where}: invalid field 'messages[{len(out) - 1}].content': the "
                         f"assistant completion is empty")
    return out


def normalize_row(row: Any, where: str, default_id: str) -> dict:
    """One JSONL row -> {id, prompt_messages: [{role, content}, ...], response}."""
    if not isinstance(row, Mapping):
        raise ValueError(f"{where}: expected a JSON object, got {type(row).__name__}")
    row_id = row.get("id", default_id)
    if isinstance(row_id, bool) or not isinstance(row_id, (str, int)) or str(row_id) == "":
        raise ValueError(f"{where}: invalid field 'id': expected a non-empty string or an int, "
                         f"got {row_id!r:.80}")
    if "messages" in row:
        if "prompt" in row or "response" in row:
            raise ValueError(f"{where}: invalid field 'messages': give either 'messages' or "
                             f"'prompt'/'response', not both")
        messages = _check_messages(row["messages"], where)
        context, response = messages[:-1], messages[-1]["content"]
    else:
        prompt = _nonempty_str(row, "prompt", where)
        response = _nonempty_str(row, "response", where)
        context = [{"role": "user", "content": prompt}]
        if "system" in row:
            context.insert(0, {"role": "system", "content": _nonempty_str(row, "system", where)})
    return {"id": str(row_id), "prompt_messages": context, "response": response}


def read_rows(path: str | os.PathLike) -> list[dict]:
    """Normalized rows of one JSONL file, in file order (see `normalize_row`).

    Raises ValueError naming `file:line` and the field for a bad row or a duplicate id.
    """
    path = os.fspath(path)
    stem = os.path.splitext(os.path.basename(path))[0]
    rows: list[dict] = []
    seen: dict[str, int] = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            where = f"{path}:{lineno}"
            try:
                raw = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: invalid JSON ({e.msg} at column {e.colno})") from None
            row = normalize_row(raw, where, default_id=f"{stem}-{len(rows)}")
            if row["id"] in seen:
                raise ValueError(f"{where}: invalid field 'id': duplicate id {row['id']!r} "
                                 f"(first seen on line {seen[row['id']]})")
            seen[row["id"]] = lineno
            rows.append(row)
    return rows


def _check_fraction(validation_fraction: float) -> float:
    if isinstance(validation_fraction, bool) or not isinstance(validation_fraction, (int, float)) \
            or not 0.0 <= validation_fraction < 1.0:
        raise ValueError(f"validation_fraction={validation_fraction!r}; must be a number in [0, 1)")
    return float(validation_fraction)


def in_validation(row_id: str, validation_fraction: float, holdout_seed: int = 0) -> bool:
    """Whether row `row_id` is held out: sha256(f"{seed}:{id}")[:8] / 2**64 < fraction."""
    digest = hashlib.sha256(f"{int(holdout_seed)}:{row_id}".encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0 ** 64 < validation_fraction


def _trace_files(data_dir: str | os.PathLike) -> tuple[str, Optional[str]]:
    root = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
    train = os.path.join(root, TRAIN_FILE)
    if not os.path.isfile(train):
        raise FileNotFoundError(f"trace dir {root}: expected {TRAIN_FILE} (and optionally "
                                f"{VALIDATION_FILE}) there")
    validation = os.path.join(root, VALIDATION_FILE)
    return train, (validation if os.path.isfile(validation) else None)


def split_names(data_dir: str | os.PathLike, validation_fraction: float = 0.05) -> tuple[str, ...]:
    """("train", "validation"), or ("train",) with no validation.jsonl and a zero fraction."""
    _, validation = _trace_files(data_dir)
    if validation is None and _check_fraction(validation_fraction) == 0.0:
        return ("train",)
    return ("train", "validation")


def split_rows(data_dir: str | os.PathLike, validation_fraction: float = 0.05,
               holdout_seed: int = 0) -> dict[str, list[dict]]:
    """{split: normalized rows} of a trace dir, in file order (module docstring: held-out rule)."""
    fraction = _check_fraction(validation_fraction)
    train_path, validation_path = _trace_files(data_dir)
    train = read_rows(train_path)
    if validation_path is not None:
        return {"train": train, "validation": read_rows(validation_path)}
    if fraction == 0.0:
        return {"train": train}
    held = [in_validation(r["id"], fraction, holdout_seed) for r in train]
    return {"train": [r for r, h in zip(train, held) if not h],
            "validation": [r for r, h in zip(train, held) if h]}


# ---------------------------------------------------------------- rendering (chat template)


def _end_of_turn_ids(tokenizer: Any, context: list, prompt_text: str, response: str) -> list[int]:
    """Ids the chat template writes after the assistant content, through the first stop id.

    Renders the whole chat; when it extends the prompt and contains the response after it,
    the text following the last copy of the response is encoded and cut after its first
    `stop_ids` token (SmolLM2: `<|im_end|>`, CharVocab: `<|eos|>`). Otherwise (a template
    that rewrites the response) this is `[eos_id]`.
    """
    full = tokenizer.apply_chat_template(context + [{"role": "assistant", "content": response}],
                                         add_generation_prompt=False)
    stops = set(tokenizer.stop_ids)
    at = full.rfind(response)
    if full.startswith(prompt_text) and at >= len(prompt_text):
        suffix = tokenizer.encode(full[at + len(response):])
        for i, tid in enumerate(suffix):
            if tid in stops:
                return list(suffix[:i + 1])
    return [int(tokenizer.eos_id)]


def render_example(tokenizer: Any, messages_or_prompt: Union[str, Sequence[Mapping[str, str]]],
                   response: str) -> tuple[list[int], list[int]]:
    """(prompt_ids, completion_ids) of one SFT example.

    prompt = the chat template over the context (a prompt string is one user turn) with
    `add_generation_prompt=True`, exactly what inference feeds the model. completion = the
    response text, encoded on its own (as it would be generated after the prompt), plus the
    end-of-turn token the template writes after an assistant turn (see `_end_of_turn_ids`),
    so the model learns to stop where the sampler's `stop_ids` end generation.
    """
    if isinstance(messages_or_prompt, str):
        context = [{"role": "user", "content": messages_or_prompt}]
    else:
        context = [dict(m) for m in messages_or_prompt]
    if not isinstance(response, str) or not response:
        raise ValueError(f"response={response!r:.80}; must be a non-empty string")
    prompt_text = tokenizer.apply_chat_template(context, add_generation_prompt=True)
    prompt_ids = [int(t) for t in tokenizer.encode(prompt_text)]
    completion_ids = [int(t) for t in tokenizer.encode(response)]
    completion_ids += _end_of_turn_ids(tokenizer, context, prompt_text, response)
    return prompt_ids, completion_ids


# ---------------------------------------------------------------- TFDS builder (lazy TF)


@functools.cache
def builder_class() -> tuple[type, type]:
    """(ChatTracesConfig, PrdChatTraces): the TFDS config and builder classes, made on first use."""
    importlib.import_module("prd_jax.data.tf_cpu")  # hides GPUs from TF before TFDS loads it
    import tensorflow_datasets as tfds
    from etils import epath

    @dataclasses.dataclass(eq=False)
    class ChatTracesConfig(tfds.core.BuilderConfig):
        """A trace dir plus the held-out split settings."""
        data_dir: str = ""
        validation_fraction: float = 0.05
        holdout_seed: int = 0

    class PrdChatTraces(tfds.core.GeneratorBasedBuilder, skip_registration=True):
        """Chat-format SFT traces from a local trace dir; nothing is downloaded."""

        name = BUILDER_NAME
        VERSION = tfds.core.Version("1.0.0")
        RELEASE_NOTES = {"1.0.0": "id, prompt_messages (JSON), response from local JSONL."}
        code_path = epath.Path(__file__)  # see tfds_builders: avoids importlib_resources

        def _info(self) -> tfds.core.DatasetInfo:
            return tfds.core.DatasetInfo(
                builder=self,
                description="Chat-format SFT traces: context messages and one assistant response.",
                features=tfds.features.FeaturesDict({
                    "id": tfds.features.Text(),
                    "prompt_messages": tfds.features.Text(),  # JSON list of {role, content}
                    "response": tfds.features.Text(),
                }),
                disable_shuffling=True,  # keys are row indices: file order
            )

        def _split_generators(self, dl_manager):
            del dl_manager
            cfg = self.builder_config
            splits = split_rows(cfg.data_dir, cfg.validation_fraction, cfg.holdout_seed)
            return {split: self._generate_examples(rows) for split, rows in splits.items()}

        def _generate_examples(self, rows):
            for index, row in enumerate(rows):
                yield index, {"id": row["id"], "response": row["response"],
                              "prompt_messages": json.dumps(row["prompt_messages"],
                                                            ensure_ascii=False)}

    return ChatTracesConfig, PrdChatTraces


def _config_digest(data_dir: str, validation_fraction: float, holdout_seed: int) -> str:
    parts = [data_dir, repr(float(validation_fraction)), str(int(holdout_seed))]
    for path in _trace_files(data_dir):
        if path is not None:
            st = os.stat(path)
            parts += [os.path.basename(path), str(st.st_size), str(st.st_mtime_ns)]
    return hashlib.sha256("|".join(parts).encode("utf-8")).hexdigest()[:12]


def get_builder(name: str, data_dir: str | os.PathLike, tfds_dir: Optional[str] = None,
                validation_fraction: float = 0.05, holdout_seed: int = 0):
    """A `prd_chat_traces` builder over trace dir `data_dir`, cached in `paths.tfds_dir(tfds_dir)`.

    `name` (letters, digits, underscores) plus a digest of the data and settings names the
    builder config, so different trace dirs and edited files never share a prepared dataset.
    """
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise ValueError(f"name={name!r}; must start with a letter and contain only letters, "
                         f"digits and underscores")
    fraction = _check_fraction(validation_fraction)
    if isinstance(holdout_seed, bool) or not isinstance(holdout_seed, int) or holdout_seed < 0:
        raise ValueError(f"holdout_seed={holdout_seed!r}; must be an int >= 0")
    root = os.path.abspath(os.path.expanduser(os.fspath(data_dir)))
    config_cls, builder_cls = builder_class()
    config = config_cls(name=f"{name}_{_config_digest(root, fraction, holdout_seed)}",
                        description=f"chat traces from {root}", data_dir=root,
                        validation_fraction=fraction, holdout_seed=holdout_seed)
    return builder_cls(config=config, data_dir=paths.tfds_dir(tfds_dir))


def prepare(builder, force: bool = False):
    """Prepare `builder` unless already prepared (or always, with `force`); returns it."""
    import tensorflow_datasets as tfds

    if force or not builder.is_prepared():
        mode = (tfds.download.GenerateMode.FORCE_REDOWNLOAD if force
                else tfds.download.GenerateMode.REUSE_DATASET_IF_EXISTS)
        builder.download_and_prepare(download_config=tfds.download.DownloadConfig(
            download_mode=mode, try_download_gcs=False,
            compute_stats=tfds.download.ComputeStatsMode.SKIP))
    if not builder.info.splits:
        builder.info.read_from_directory(builder.data_dir)
    return builder


def build(name: str, data_dir: str | os.PathLike, tfds_dir: Optional[str] = None,
          validation_fraction: float = 0.05, holdout_seed: int = 0, force: bool = False):
    """Prepare (if needed) and load the trace dir: {split: tf.data.Dataset} in file order."""
    builder = prepare(get_builder(name, data_dir, tfds_dir, validation_fraction, holdout_seed),
                      force=force)
    return {split: builder.as_dataset(split=split, shuffle_files=False)
            for split in builder.info.splits}


# ---------------------------------------------------------------- seqio task (lazy TF)


def _as_vocabulary(vocabulary: Any):
    """(seqio vocabulary, tokenizer) from an `HFVocabulary` or a bare tokenizer."""
    tokenizer = getattr(vocabulary, "tokenizer", None)
    if tokenizer is not None and hasattr(tokenizer, "apply_chat_template"):
        return vocabulary, tokenizer
    if hasattr(vocabulary, "apply_chat_template") and hasattr(vocabulary, "encode"):
        from prd_jax.data.vocab import HFVocabulary
        return HFVocabulary(vocabulary), vocabulary
    raise TypeError(f"vocabulary must be a data.vocab.HFVocabulary or a tokenizer with "
                    f"apply_chat_template and encode, got {type(vocabulary).__name__}")


def register_chat_task(name: str, data_dir: str | os.PathLike, vocabulary: Any, *,
                       tfds_dir: Optional[str] = None, validation_fraction: float = 0.05,
                       holdout_seed: int = 0) -> str:
    """Register (or replace) seqio task `name` over trace dir `data_dir`; returns `name`.

    `vocabulary` is an `HFVocabulary` (or a tokenizer, which gets wrapped). Examples hold
    `inputs` (prompt ids: the chat template with the generation prompt) and `targets`
    (completion ids: response plus end of turn), both from `render_example`, so the
    task and `sft.examples_from_rows` agree token for token. Registering reads no data; the
    first `get_dataset` prepares the TFDS dataset.
    """
    import seqio

    from prd_jax.data.tf_cpu import tf

    vocab, tokenizer = _as_vocabulary(vocabulary)
    builder = get_builder(name, data_dir, tfds_dir, validation_fraction, holdout_seed)
    splits = split_names(data_dir, validation_fraction)

    def dataset_fn(split: str, shuffle_files: bool, seed: Optional[int] = None):
        del shuffle_files, seed  # file order; shuffling is the consumer's job (sft.SFTBatches)
        return prepare(builder).as_dataset(split=split, shuffle_files=False)

    def render_np(messages_json, response):
        messages = json.loads(messages_json.decode("utf-8"))
        prompt_ids, completion_ids = render_example(tokenizer, messages,
                                                        response.decode("utf-8"))
        return np.asarray(prompt_ids, np.int32), np.asarray(completion_ids, np.int32)

    @seqio.map_over_dataset
    def render(ex: dict) -> dict:
        inputs, targets = tf.numpy_function(render_np, [ex["prompt_messages"], ex["response"]],
                                            [tf.int32, tf.int32], stateful=False)
        inputs.set_shape([None])
        targets.set_shape([None])
        return {"id": ex["id"], "prompt_messages": ex["prompt_messages"],
                "response": ex["response"], "inputs": inputs, "targets": targets}

    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(
        name, source=seqio.FunctionDataSource(dataset_fn, splits=splits),
        preprocessors=[render],
        output_features={
            "inputs": seqio.Feature(vocabulary=vocab, add_eos=False, dtype=tf.int32),
            "targets": seqio.Feature(vocabulary=vocab, add_eos=False, dtype=tf.int32),
        },
        metric_fns=[])
    return name


def register_chat_text_task(data_dir: str | os.PathLike, *, name: str = "prd_sft_traces",
                            tfds_dir: Optional[str] = None, validation_fraction: float = 0.05,
                            holdout_seed: int = 0) -> str:
    """Register (or replace) a text-only seqio task over trace dir `data_dir`; returns its name.

    The task name is `prd_chat_<builder config name>` (the config name carries a digest of the
    trace dir and settings). Examples are `id`, `prompt_messages` (JSON list of {role,
    content}) and `targets` (the response text), in file order: the SFT text contract of
    `train.setup` (no tokenizer needed to register or read it). Registering reads no data.
    """
    import seqio

    builder = get_builder(name, data_dir, tfds_dir, validation_fraction, holdout_seed)
    splits = split_names(data_dir, validation_fraction)

    def dataset_fn(split: str, shuffle_files: bool, seed: Optional[int] = None):
        del shuffle_files, seed  # file order; shuffling is the consumer's job (sft.SFTBatches)
        return prepare(builder).as_dataset(split=split, shuffle_files=False)

    @seqio.map_over_dataset
    def as_text(ex: dict) -> dict:
        return {"id": ex["id"], "prompt_messages": ex["prompt_messages"], "targets": ex["response"]}

    task_name = f"prd_chat_{builder.builder_config.name}"
    if task_name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(task_name)
    seqio.TaskRegistry.add(task_name, source=seqio.FunctionDataSource(dataset_fn, splits=splits),
                           preprocessors=[as_text], output_features={}, metric_fns=[])
    return task_name
