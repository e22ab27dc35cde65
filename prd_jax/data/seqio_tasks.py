"""seqio Tasks over the JSONL TFDS builders (`tfds_builders`): the rows a task's `JsonlFiles`
source reads, and their tokenized form.

    from prd_jax.data import seqio_tasks, tfds_builders, vocab
    cls = tfds_builders.builder_class("prd_aime2024", {"test": "math/aime2024.jsonl"})
    seqio_tasks.register_rows_task("prd_aime2024", cls)             # source fields, no preprocessors
    seqio_tasks.register_tokenized(vocab.HFVocabulary(tokenizer), ["prd_aime2024"])
    ds = seqio.get_mixture_or_task("prd_aime2024").get_dataset(
        sequence_length=None, split="test", shuffle=False)

A tokenized example has `inputs` (the problem, optionally rendered through a prompt template)
and `targets` (the gold answer followed by EOS) as int32 token ids, plus `inputs_pretokenized`,
`targets_pretokenized` and `id` as strings.

Data source: a `seqio.TfdsDataSource` reading the prepared TFDS dataset from the TFDS data
dir (`paths.tfds_dir`). Plain `TfdsDataSource` would prepare a missing dataset through
`tfds.load`, which cannot be told our manual dir (the JSONL data dir), so the subclass used
here opens in read-only mode and prepares the dataset itself, lazily, on first use, with the
configured data dir as manual dir (see `tfds_builders.prepare`). Registering is therefore
cheap and needs no data; the first `get_dataset` of a task prepares it once per TFDS dir.

(`prd_jax.tasks` holds the task plug-ins, which grade; the seqio tasks here only serve rows.)
"""

from __future__ import annotations

from typing import Any, Callable, Optional, Sequence, Union

import seqio

from prd_jax.data import tfds_builders
from prd_jax.data.tf_cpu import tf

__all__ = ["PromptTemplate", "ManualTfdsDataSource", "problem_to_text", "register_rows_task",
           "register_tokenized"]

# A format string containing "{problem}" (rendered in TF ops), or a str -> str callable
# (run through tf.numpy_function), or None for the bare problem text.
PromptTemplate = Union[str, Callable[[str], str], None]


class ManualTfdsDataSource(seqio.TfdsDataSource):
    """A read-only `TfdsDataSource` that first prepares its builder from the manual (data) dir."""

    def __init__(self, builder_cls: type, *, data_dir: Optional[str] = None,
                 tfds_dir: Optional[str] = None, splits: Optional[tuple[str, ...]] = None):
        self.builder_cls = builder_cls
        self._manual_data_dir = data_dir
        self._prepared = False
        self.prepared_dir = tfds_builders.prepared_dir(builder_cls, data_dir, tfds_dir)
        super().__init__(tfds_name=f"{builder_cls.name}:{builder_cls.VERSION}",
                         tfds_data_dir=self.prepared_dir,
                         splits=splits or tuple(s for s, _ in builder_cls.SPLIT_FILES),
                         read_only=True)

    def _ensure_prepared(self) -> None:
        if not self._prepared:
            # The memoized builder seqio will read with; prepare() refreshes its info if another
            # instance prepared the data in the meantime.
            tfds_builders.prepare(self.tfds_dataset.builder, data_dir=self._manual_data_dir)
            self._prepared = True

    def get_dataset(self, *args: Any, **kwargs: Any) -> tf.data.Dataset:
        self._ensure_prepared()
        return super().get_dataset(*args, **kwargs)

    def num_input_examples(self, split: str) -> Optional[int]:
        self._ensure_prepared()
        return super().num_input_examples(split)

    def list_shards(self, split: str):
        self._ensure_prepared()
        return super().list_shards(split)


def register_rows_task(name: str, builder_cls: type, data_dir: Optional[str] = None,
                       tfds_dir: Optional[str] = None) -> str:
    """Register (or re-register) seqio task `name` over `builder_cls`'s prepared data, with no
    preprocessors and no output features (rows as the source yields them). Returns `name`."""
    source = ManualTfdsDataSource(builder_cls, data_dir=data_dir, tfds_dir=tfds_dir)
    if name in seqio.TaskRegistry.names():
        seqio.TaskRegistry.remove(name)
    seqio.TaskRegistry.add(name, source=source, preprocessors=[], output_features={}, metric_fns=[])
    return name


def _render_fn(template: PromptTemplate) -> Callable[[tf.Tensor], tf.Tensor]:
    if template is None:
        return lambda problem: problem
    if isinstance(template, str):
        if template.count("{problem}") != 1:
            raise ValueError(f"prompt template must contain '{{problem}}' exactly once: {template!r}")
        prefix, suffix = template.split("{problem}")
        return lambda problem: tf.strings.join([prefix, problem, suffix])
    if callable(template):
        def render_np(problem: Any) -> bytes:
            if hasattr(problem, "item"):
                problem = problem.item()
            text = template(problem.decode("utf-8"))
            if not isinstance(text, str):
                raise TypeError(f"prompt template returned {type(text).__name__}, expected str")
            return text.encode("utf-8")

        def render(problem: tf.Tensor) -> tf.Tensor:
            out = tf.numpy_function(render_np, [problem], tf.string, stateful=False)
            out.set_shape([])
            return out
        return render
    raise TypeError(f"prompt_template must be None, a str or a callable, got {type(template)}")


def problem_to_text(prompt_template: PromptTemplate = None):
    """Preprocessor: {id, problem, answer} -> {id, inputs: rendered problem, targets: answer}."""
    render = _render_fn(prompt_template)

    @seqio.map_over_dataset
    def preprocess(ex: dict) -> dict:
        return {"id": ex["id"], "inputs": render(ex["problem"]), "targets": ex["answer"]}
    return preprocess


def register_tokenized(vocabulary: seqio.Vocabulary, names: Sequence[str],
                       prompt_template: PromptTemplate = None) -> list[str]:
    """Re-register each registered seqio task of `names` (e.g. those `register_rows_task` made,
    which a task's `JsonlFiles` source registers on first read) over its same source, with
    tokenizing preprocessors: `inputs` get no EOS, `targets` end with EOS. Idempotent; the
    latest arguments win. Returns `names`."""
    output_features = {
        "inputs": seqio.Feature(vocabulary=vocabulary, add_eos=False, dtype=tf.int32),
        "targets": seqio.Feature(vocabulary=vocabulary, add_eos=True, dtype=tf.int32),
    }
    for name in names:
        if name not in seqio.TaskRegistry.names():
            raise ValueError(f"seqio task {name!r} is not registered; registered: {sorted(seqio.TaskRegistry.names())}")
        source = seqio.get_mixture_or_task(name).source
        seqio.TaskRegistry.remove(name)
        seqio.TaskRegistry.add(
            name,
            source=source,
            preprocessors=[
                problem_to_text(prompt_template),
                seqio.preprocessors.tokenize,
                seqio.preprocessors.append_eos,
            ],
            output_features=output_features,
            metric_fns=[],
        )
    return list(names)
