"""`HFVocabulary`: a `seqio.Vocabulary` over our byte-level BPE `Tokenizer`.

    from prd_jax.model.loader import smollm2_gguf_path
    from prd_jax.model.tokenizer import Tokenizer
    vocab = HFVocabulary(Tokenizer.from_gguf(smollm2_gguf_path()))

Id mapping: ids are the tokenizer's own ids, unchanged. seqio's convention of reserving
PAD = 0 (with EOS/UNK next to it) is *not* applied, and `extra_ids` (sentinel tokens) are not
supported (always 0), so `vocab_size == tokenizer.vocab_size`.

- `eos_id`, `bos_id`, `unk_id` and `pad_id` are the tokenizer's (SmolLM2: eos 2 `<|im_end|>`,
  bos 1, unk 0, pad = eos). `pad_id` here is therefore *not* seqio's `PAD_ID = 0`.
- seqio's feature converters and `trim_and_pad_dataset` still pad with literal 0, whatever
  `pad_id` says. For SmolLM2, id 0 is `<|endoftext|>`, a special token that `decode` drops, but
  it is also a real id: use the `*_segment_ids`/`*_loss_weights` (or lengths) seqio emits to
  mask padding, never `ids == 0`. For tokenizers where 0 is an ordinary token (Qwen's `!`),
  strip padding before decoding.
- `decode`/`decode_tf` (seqio's wrappers) cut at the first EOS and map ids >= vocab_size to
  `unk_id`; `_decode` then drops special tokens (`skip_special=True`).

`_encode_tf`/`_decode_tf` run the Rust tokenizer through `tf.numpy_function`: they work in
eager mode and in `tf.data` pipelines, but graphs using them cannot be serialised.
"""

from __future__ import annotations

import hashlib
from typing import Any, Iterable, Optional, Sequence

import numpy as np
import seqio

from prd_jax.data.tf_cpu import tf

__all__ = ["HFVocabulary"]


class HFVocabulary(seqio.Vocabulary):
    """seqio view of a `prd_jax.model.tokenizer.Tokenizer` (see the module docstring)."""

    def __init__(self, tokenizer: Any, extra_ids: int = 0):
        if extra_ids:
            raise ValueError("HFVocabulary does not support extra_ids (sentinels); use 0")
        if tokenizer.eos_id is None:
            raise ValueError(f"{tokenizer!r} has no eos_id; seqio needs one")
        self._tokenizer = tokenizer
        self._fingerprint: Optional[str] = None
        super().__init__(extra_ids=0)

    def __repr__(self) -> str:
        return f"HFVocabulary({self._tokenizer!r})"

    @property
    def tokenizer(self) -> Any:
        return self._tokenizer

    # ------------------------------------------------------------------ special ids

    @property
    def eos_id(self) -> int:
        return int(self._tokenizer.eos_id)

    @property
    def bos_id(self) -> Optional[int]:
        return self._tokenizer.bos_id

    @property
    def unk_id(self) -> Optional[int]:
        return self._tokenizer.unk_id

    @property
    def pad_id(self) -> int:
        """The tokenizer's pad id (its eos when it has none); not seqio's PAD_ID = 0."""
        pad = self._tokenizer.pad_id
        return int(pad) if pad is not None else self.eos_id

    @property
    def _base_vocab_size(self) -> int:
        return int(self._tokenizer.vocab_size)

    # ------------------------------------------------------------------ python

    def _encode(self, s: str) -> Sequence[int]:
        return list(self._tokenizer.encode(s, add_bos=False))

    def _decode(self, ids: Iterable[int]) -> str:
        return self._tokenizer.decode([int(i) for i in ids], skip_special=True)

    # ------------------------------------------------------------------ tensorflow

    def _encode_np(self, s: Any) -> np.ndarray:
        if isinstance(s, np.ndarray):  # numpy_function hands scalars over as 0-d arrays
            s = s.item()
        text = s.decode("utf-8") if isinstance(s, bytes) else str(s)
        return np.asarray(self._encode(text), dtype=np.int32)

    def _encode_batch_np(self, strings: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        encoded = [self._encode_np(s) for s in strings.reshape(-1)]
        lengths = np.asarray([len(e) for e in encoded], dtype=np.int64)
        flat = np.concatenate(encoded) if encoded else np.zeros([0], np.int32)
        return flat.astype(np.int32), lengths

    def _encode_tf(self, s: tf.Tensor) -> tf.Tensor:
        """Scalar string -> int32 [n]; string vector -> int32 RaggedTensor [batch, None]."""
        s = tf.convert_to_tensor(s, dtype=tf.string)
        rank = s.shape.rank
        if rank == 0:
            ids = tf.numpy_function(self._encode_np, [s], tf.int32, stateful=False)
            ids.set_shape([None])
            return ids
        if rank == 1:
            flat, lengths = tf.numpy_function(self._encode_batch_np, [s], [tf.int32, tf.int64],
                                              stateful=False)
            flat.set_shape([None])
            lengths.set_shape(s.shape)
            return tf.RaggedTensor.from_row_lengths(flat, lengths, validate=False)
        raise ValueError(f"HFVocabulary.encode_tf expects a scalar or a vector of strings, "
                         f"got shape {s.shape}")

    def _decode_np(self, ids: np.ndarray) -> np.ndarray:
        rows = ids.reshape(int(np.prod(ids.shape[:-1], dtype=np.int64)), ids.shape[-1])
        out = [self._decode(row.tolist()).encode("utf-8") for row in rows]
        return np.asarray(out, dtype=object).reshape(ids.shape[:-1])

    def _decode_tf(self, ids: tf.Tensor) -> tf.Tensor:
        """int [..., n] -> string [...] (one string per innermost sequence)."""
        ids = tf.convert_to_tensor(ids)
        if ids.shape.rank == 0:
            raise ValueError("HFVocabulary.decode_tf expects ids of rank >= 1")
        text = tf.numpy_function(self._decode_np, [ids], tf.string, stateful=False)
        if ids.shape.rank is not None:
            text.set_shape(ids.shape[:-1])
        return text

    # ------------------------------------------------------------------ identity

    @property
    def fingerprint(self) -> str:
        """Stable digest of the tokenizer (vocabulary, merges, specials): the basis of __eq__."""
        if self._fingerprint is None:
            tok = self._tokenizer
            rust = getattr(tok, "_tok", None)
            body = rust.to_str() if rust is not None else repr(tok)
            desc = (f"{body}|{tok.vocab_size}|{tok.bos_id}|{tok.eos_id}|{tok.pad_id}|"
                    f"{tok.unk_id}|{self.extra_ids}")
            self._fingerprint = hashlib.sha256(desc.encode("utf-8")).hexdigest()
        return self._fingerprint

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, HFVocabulary):
            return NotImplemented
        return other is self or other.fingerprint == self.fingerprint

    def __hash__(self) -> int:
        return hash(self.fingerprint)
