"""SFT examples to numpy training batches: chat rendering, packing or padding, a resumable iterator.

An *example* is `(prompt_ids, completion_ids)`. `render_example` makes one from chat messages
(or a prompt string) and a response; `examples_from_rows` does so for trace rows (see
`chat_traces`), `examples_from_text_rows` for the text rows of an SFT seqio task (the path
`train.setup.sft_examples` takes), `examples_from_task` reads tokenized examples from a seqio
task registered by `chat_traces.register_chat_task`. NumPy only: no TensorFlow unless a task is read.

Batch layout (`pack`, `pad`, `SFTBatches`), every array `[B, T]` with T = `seq_len`:

    inputs       int32    token ids fed to the model (`pad_id` on padding)
    targets      int32    the next token of the same example (`pad_id` on padding)
    positions    int32    0, 1, ... restarting at each packed example (0 on padding)
    segment_ids  int32    0 on padding, 1, 2, ... for the examples of a row, left to right
    weights      float32  1.0 where the target is a completion token, else 0.0

An example of n = P + C tokens (P prompt, C completion) takes n - 1 slots: inputs are
tokens[:-1], targets tokens[1:], so its weights are 0 on the first P - 1 slots and 1 on the
last C. Pass `segment_ids` and `positions` to `model.decoder.forward` so packed examples
do not attend to each other; the loss is `train.losses.sft_loss(logp, weights)`.

Over-long examples (n - 1 > seq_len): with `overlong="truncate_prompt"` (default) the prompt
loses tokens from its left until n - 1 == seq_len, keeping the whole completion and at least
one prompt token; an example whose completion alone needs more (C > seq_len) is dropped.
With `overlong="drop"` every over-long example is dropped. `FitCounts` reports both counts.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator, Mapping, Optional, Sequence

import numpy as np

from prd_jax.data import chat_traces

__all__ = ["BATCH_KEYS", "OVERLONG", "MODES", "FitCounts", "render_example",
           "examples_from_rows", "examples_from_text_rows", "examples_from_task", "fit_examples", "pack", "pad",
           "SFTBatches"]

BATCH_KEYS = ("inputs", "targets", "positions", "segment_ids", "weights")
OVERLONG = ("truncate_prompt", "drop")
MODES = ("pack", "pad")

Example = tuple[Sequence[int], Sequence[int]]
Batch = dict[str, np.ndarray]


# ---------------------------------------------------------------- rendering


render_example = chat_traces.render_example  # re-exported: one chat rendering for SFT and tasks


def examples_from_rows(tokenizer: Any, rows: Sequence[Mapping]
                       ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Examples of trace rows: normalized ({id, prompt_messages, response}) or raw JSONL rows."""
    out = []
    for i, row in enumerate(rows):
        if "prompt_messages" in row:
            messages = row["prompt_messages"]
            if isinstance(messages, str):
                messages = json.loads(messages)
            response = row["response"]
        else:
            norm = chat_traces.normalize_row(row, f"rows[{i}]", default_id=str(i))
            messages, response = norm["prompt_messages"], norm["response"]
        prompt, completion = render_example(tokenizer, messages, response)
        out.append((np.asarray(prompt, np.int32), np.asarray(completion, np.int32)))
    return out


TEXT_PROMPT_FIELDS = ("prompt_messages", "inputs_pretokenized", "inputs")
TEXT_TARGET_FIELDS = ("targets_pretokenized", "targets")


def _text_field(row: Mapping, names: Sequence[str], where: str) -> tuple[str, Any]:
    """(name, value) of the first of `names` in `row` holding text (a str, or a list for messages)."""
    for name in names:
        value = row.get(name)
        if isinstance(value, str) or (name == "prompt_messages" and isinstance(value, list)):
            return name, value
    raise ValueError(f"{where}: no text field among {list(names)} (got fields {sorted(row)}); an SFT "
                     f"task must output the prompt as text 'inputs' (or 'inputs_pretokenized', or "
                     f"'prompt_messages' as a JSON list of {{role, content}}) and the completion as "
                     f"text 'targets' (or 'targets_pretokenized')")


def examples_from_text_rows(tokenizer: Any, rows: Sequence[Mapping], source: str = "rows"
                            ) -> list[tuple[np.ndarray, np.ndarray]]:
    """Examples of text rows read from an SFT seqio task (`data.seqio_rows.read`).

    The contract: the completion is `targets_pretokenized` or `targets` (a str); the prompt is
    `prompt_messages` (a JSON list of {role, content}, for multi-turn or system context) or
    else `inputs_pretokenized` / `inputs` (a str: one user turn). Each is rendered with
    `render_example` (the tokenizer's chat template). `source` names the rows in errors.
    """
    out = []
    for i, row in enumerate(rows):
        where = f"{source}[{i}]"
        prompt_field, prompt = _text_field(row, TEXT_PROMPT_FIELDS, where)
        _, response = _text_field(row, TEXT_TARGET_FIELDS, where)
        if prompt_field == "prompt_messages" and isinstance(prompt, str):
            try:
                prompt = json.loads(prompt)
            except json.JSONDecodeError as e:
                raise ValueError(f"{where}: field 'prompt_messages' is not JSON ({e.msg})") from None
        if not response:
            raise ValueError(f"{where}: the completion ('targets') is empty")
        ids_prompt, ids_completion = render_example(tokenizer, prompt, response)
        out.append((np.asarray(ids_prompt, np.int32), np.asarray(ids_completion, np.int32)))
    return out


def examples_from_task(task: Any, split: str) -> list[tuple[np.ndarray, np.ndarray]]:
    """(inputs, targets) of every example of a seqio task's `split`, in source order."""
    import seqio

    if isinstance(task, str):
        task = seqio.get_mixture_or_task(task)
    ds = task.get_dataset(sequence_length=None, split=split, shuffle=False, num_epochs=1,
                          use_cached=False)
    return [(np.asarray(ex["inputs"], np.int32), np.asarray(ex["targets"], np.int32))
            for ex in ds.as_numpy_iterator()]


# ---------------------------------------------------------------- fitting and assembly


@dataclasses.dataclass(frozen=True)
class FitCounts:
    """How many examples were given, truncated (prompt cut from the left) and dropped."""
    num_examples: int
    num_truncated: int
    num_dropped: int


def _check_int(name: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low:
        raise ValueError(f"{name}={value!r}; must be an int >= {low}")
    return int(value)


def fit_examples(examples: Sequence[Example], seq_len: int, overlong: str = "truncate_prompt"
                 ) -> tuple[list[tuple[np.ndarray, int]], FitCounts]:
    """Kept examples as (tokens [n], prompt_len) with n - 1 <= seq_len, and the counts.

    Each example needs a non-empty prompt and completion. See the module docstring for
    `overlong`.
    """
    seq_len = _check_int("seq_len", seq_len, 1)
    if overlong not in OVERLONG:
        raise ValueError(f"overlong={overlong!r}; allowed: {OVERLONG}")
    kept, truncated, dropped = [], 0, 0
    for i, (prompt, completion) in enumerate(examples):
        prompt = np.asarray(prompt, np.int32).reshape(-1)
        completion = np.asarray(completion, np.int32).reshape(-1)
        if prompt.size == 0 or completion.size == 0:
            raise ValueError(f"examples[{i}]: prompt has {prompt.size} and completion "
                             f"{completion.size} tokens; both must be non-empty")
        if prompt.size + completion.size - 1 > seq_len:
            if overlong == "drop" or completion.size > seq_len:
                dropped += 1
                continue
            prompt = prompt[prompt.size - (seq_len + 1 - completion.size):]
            truncated += 1
        kept.append((np.concatenate([prompt, completion]), int(prompt.size)))
    return kept, FitCounts(len(examples), truncated, dropped)


def _take_rows(fitted: Sequence[tuple[np.ndarray, int]], order: Sequence[int], offset: int,
               seq_len: int, batch_size: int, mode: str) -> tuple[list[list], int]:
    """Rows of examples for the batch starting at `order[offset]`, and the next offset.

    "pad": one example per row. "pack": greedy, in order; an example that does not fit in
    the current row starts the next one, and one that does not fit in the last row starts
    the next batch.
    """
    rows: list[list] = [[] for _ in range(batch_size)]
    r, used, i = 0, 0, offset
    while i < len(order):
        example = fitted[order[i]]
        slots = example[0].size - 1
        if rows[r] and (mode == "pad" or used + slots > seq_len):
            r, used = r + 1, 0
            if r == batch_size:
                break
        rows[r].append(example)
        used += slots
        i += 1
    return rows, i


def _assemble(rows: Sequence[Sequence[tuple[np.ndarray, int]]], seq_len: int,
              pad_id: int) -> Batch:
    """The batch dict (module docstring) of rows of fitted examples."""
    b = len(rows)
    batch = {"inputs": np.full((b, seq_len), pad_id, np.int32),
             "targets": np.full((b, seq_len), pad_id, np.int32),
             "positions": np.zeros((b, seq_len), np.int32),
             "segment_ids": np.zeros((b, seq_len), np.int32),
             "weights": np.zeros((b, seq_len), np.float32)}
    for r, row in enumerate(rows):
        start = 0
        for segment, (tokens, prompt_len) in enumerate(row, start=1):
            n = tokens.size - 1
            span = slice(start, start + n)
            batch["inputs"][r, span] = tokens[:-1]
            batch["targets"][r, span] = tokens[1:]
            batch["positions"][r, span] = np.arange(n)
            batch["segment_ids"][r, span] = segment
            # target j is tokens[j + 1]: a completion token iff j + 1 >= prompt_len
            batch["weights"][r, span] = (np.arange(1, n + 1) >= prompt_len)
            start += n
    return batch


def _batches(examples: Sequence[Example], seq_len: int, batch_size: int, mode: str,
             pad_id: int, overlong: str) -> tuple[list[Batch], FitCounts]:
    batch_size = _check_int("batch_size", batch_size, 1)
    fitted, counts = fit_examples(examples, seq_len, overlong)
    order, offset, out = range(len(fitted)), 0, []
    while offset < len(fitted):
        rows, offset = _take_rows(fitted, order, offset, seq_len, batch_size, mode)
        out.append(_assemble(rows, seq_len, pad_id))
    return out, counts


def pack(examples: Sequence[Example], seq_len: int, batch_size: int, *, pad_id: int = 0,
         overlong: str = "truncate_prompt") -> tuple[list[Batch], FitCounts]:
    """All examples, in order, packed greedily into `[batch_size, seq_len]` batches.

    The last batch may have empty (all-padding) rows. Returns (batches, counts).
    """
    return _batches(examples, seq_len, batch_size, "pack", pad_id, overlong)


def pad(examples: Sequence[Example], seq_len: int, batch_size: int, *, pad_id: int = 0,
        overlong: str = "truncate_prompt") -> tuple[list[Batch], FitCounts]:
    """All examples, in order, one per row, right-padded to `seq_len`. Returns (batches, counts)."""
    return _batches(examples, seq_len, batch_size, "pad", pad_id, overlong)


# ---------------------------------------------------------------- resumable iterator


class SFTBatches:
    """Deterministic, resumable batch iterator over SFT examples (or a seqio task's split).

    Epoch e visits the kept examples in `np.random.default_rng([seed, e]).permutation(n)`
    order (identity with `shuffle=False`) and batches them as `pack` or `pad` do; batches
    never span epochs, so an epoch's last batch may have empty rows. `num_epochs=None`
    repeats forever. `state()` is {epoch, offset} (offset: position in the epoch's order of
    the next batch's first example) plus seed, shuffle, mode, seq_len, batch_size and
    num_examples; `restore(state)` checks those and continues exactly where `state` was
    taken. `counts` reports truncated and dropped examples.
    """

    def __init__(self, source: Any, *, seq_len: int, batch_size: int, seed: Optional[int],
                 mode: str = "pack", shuffle: bool = True, num_epochs: Optional[int] = None,
                 pad_id: int = 0, overlong: str = "truncate_prompt", split: str = "train"):
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; allowed: {MODES}")
        if shuffle and (isinstance(seed, bool) or not isinstance(seed, (int, np.integer))
                        or seed < 0):
            raise ValueError(f"seed={seed!r}; shuffle=True needs an int seed >= 0")
        if num_epochs is not None:
            _check_int("num_epochs", num_epochs, 1)
        if hasattr(source, "get_dataset") or isinstance(source, str):
            source = examples_from_task(source, split)
        self.seq_len = _check_int("seq_len", seq_len, 1)
        self.batch_size = _check_int("batch_size", batch_size, 1)
        self.mode, self.shuffle, self.num_epochs = mode, bool(shuffle), num_epochs
        self.pad_id = int(pad_id)
        self.seed = None if seed is None else int(seed)
        self._fitted, self.counts = fit_examples(source, seq_len, overlong)
        if not self._fitted:
            raise ValueError(f"no examples left out of {self.counts.num_examples} "
                             f"({self.counts.num_dropped} dropped as longer than "
                             f"seq_len={seq_len})")
        self._epoch, self._offset = 0, 0
        self._order_epoch, self._order = -1, np.arange(0)

    @property
    def num_examples(self) -> int:
        """Examples per epoch (after dropping over-long ones)."""
        return len(self._fitted)

    def _epoch_order(self) -> np.ndarray:
        if self._order_epoch != self._epoch:
            n = len(self._fitted)
            self._order = (np.random.default_rng([self.seed, self._epoch]).permutation(n)
                           if self.shuffle else np.arange(n))
            self._order_epoch = self._epoch
        return self._order

    def _settings(self) -> dict:
        return {"seed": self.seed, "shuffle": self.shuffle, "mode": self.mode,
                "seq_len": self.seq_len, "batch_size": self.batch_size,
                "num_examples": self.num_examples}

    def state(self) -> dict:
        """JSON-serializable position {epoch, offset} plus the settings `restore` checks."""
        return {"epoch": self._epoch, "offset": self._offset, **self._settings()}

    def restore(self, state: Mapping[str, Any]) -> "SFTBatches":
        """Continue from `state` (from `state()` of an iterator with the same data and settings)."""
        for key in ("epoch", "offset", *self._settings()):
            if key not in state:
                raise ValueError(f"state is missing {key!r}; expected the dict from state()")
        for key, mine in self._settings().items():
            if state[key] != mine:
                raise ValueError(f"state[{key!r}]={state[key]!r} but this iterator has {mine!r}; "
                                 f"restore needs the same data, seed and batch settings")
        epoch = _check_int("state['epoch']", state["epoch"], 0)
        offset = _check_int("state['offset']", state["offset"], 0)
        if offset > self.num_examples:
            raise ValueError(f"state['offset']={offset}; must be <= "
                             f"num_examples={self.num_examples}")
        self._epoch, self._offset = epoch, offset
        return self

    def __iter__(self) -> Iterator[Batch]:
        return self

    def __next__(self) -> Batch:
        return self.next_rows(None)

    def next_rows(self, rows: Optional[Sequence[int]]) -> Batch:
        """The next batch, materialising only the global row indices `rows` (in that order;
        None: all rows). Multi-host loaders pass their own rows, so no host builds the
        global batch; the iterator position advances the same on every host."""
        while True:
            if self.num_epochs is not None and self._epoch >= self.num_epochs:
                raise StopIteration
            if self._offset < self.num_examples:
                break
            self._epoch, self._offset = self._epoch + 1, 0
        taken, self._offset = _take_rows(self._fitted, self._epoch_order(), self._offset,
                                         self.seq_len, self.batch_size, self.mode)
        if rows is not None:
            taken = [taken[r] for r in rows]
        return _assemble(taken, self.seq_len, self.pad_id)
