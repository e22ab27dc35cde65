"""Text <-> token ids, built from a GGUF file's metadata or a Hugging Face tokenizer directory.

`Tokenizer` wraps a Rust `tokenizers.Tokenizer` and renders the model's own Jinja chat
template. Only byte-level BPE vocabularies (GGUF `tokenizer.ggml.model == "gpt2"`: SmolLM2,
Qwen2.5, Llama-3) are supported from GGUF. This module never imports transformers or torch.

    tok = Tokenizer.from_gguf("SmolLM2-135M-Instruct.Q4_1.gguf")
    ids = tok.encode_chat([{"role": "user", "content": "Hi"}])

Pre-tokenization of GGUF files follows transformers' GGUF conversion, which is the reference
the tests check against. For `tokenizer.ggml.pre == "smollm"` that conversion uses the plain
GPT-2 split, while SmolLM2's own `tokenizer.json` (and llama.cpp) first isolate every digit.
The vocabulary has no multi-digit or space+digit tokens, so the two agree on most text, but
not where whitespace directly precedes a numeric character (GPT-2 glues one space to it):
"  1" is `Ġ Ġ 1` here and `ĠĠ 1` originally, "\n    7" is `ĊĠĠĠ Ġ 7` vs `ĊĠĠĠĠ 7`, and " ²" is
`ĠÂ ²` vs `Ġ Â²`. Use `from_hf_dir` on the original tokenizer.json to get the latter.
"""

from __future__ import annotations

import copy
import datetime
import json
import os
from typing import Any, Iterable, Mapping, Optional, Sequence

import jinja2
import numpy as np
from gguf import GGUFReader, GGUFValueType
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment
from tokenizers import AddedToken, Regex, Tokenizer as _RustTokenizer, decoders, models, pre_tokenizers

__all__ = ["Tokenizer", "GGUF_PRE_TOKENIZERS", "for_model"]

# Token types of llama.cpp's vocabulary (`tokenizer.ggml.token_type`).
_TYPE_CONTROL = 3
_TYPE_USER_DEFINED = 4

# Tokens that end a turn/document, added to `stop_ids` when present in the vocabulary.
_END_OF_TURN_TOKENS = (
    "<|im_end|>",
    "<|eot_id|>",
    "<|eom_id|>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<end_of_turn>",
    "<|return|>",  # harmony (GPT-OSS): the final channel's end; `<|end|>` only ends a message
    "<|call|>",  # harmony: a tool call ends the turn
)

# Split regexes (applied before the byte-level mapping) for each `tokenizer.ggml.pre`.
# `None` means the GPT-2 split built into `pre_tokenizers.ByteLevel(use_regex=True)`.
_SPLIT_LLAMA3 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_SPLIT_QWEN2 = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
GGUF_PRE_TOKENIZERS: dict[str, Optional[str]] = {
    "smollm": None,  # see the module docstring: GPT-2 split, as transformers converts it
    "gpt-2": None,
    "qwen2": _SPLIT_QWEN2,
    "deepseek-r1-qwen": _SPLIT_QWEN2,
    "llama-bpe": _SPLIT_LLAMA3,
    "llama3": _SPLIT_LLAMA3,
    "llama-v3": _SPLIT_LLAMA3,
}


def _byte_alphabet() -> dict[int, str]:
    """GPT-2's byte -> printable character table used by byte-level BPE vocabularies."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("\xa1"), ord("\xac") + 1))
        + list(range(ord("\xae"), ord("\xff") + 1))
    )
    table = {b: chr(b) for b in printable}
    extra = 0
    for b in range(256):
        if b not in table:
            table[b] = chr(256 + extra)
            extra += 1
    return table


def _token_text(value: Any) -> Optional[str]:
    """A special token from tokenizer_config.json: a string, an AddedToken dict, or absent."""
    if isinstance(value, Mapping):
        value = value.get("content")
    return value if isinstance(value, str) else None


class Tokenizer:
    """A byte-level BPE tokenizer plus the special ids and chat template a model needs.

    Build it with `from_gguf` or `from_hf_dir`. `vocab_size` is the number of ids the model's
    embedding covers (the GGUF token list, or the HF tokenizer's size including added tokens).
    """

    def __init__(
        self,
        tokenizer: _RustTokenizer,
        *,
        vocab_size: Optional[int] = None,
        bos_id: Optional[int] = None,
        eos_id: Optional[int] = None,
        pad_id: Optional[int] = None,
        unk_id: Optional[int] = None,
        add_bos_token: bool = False,
        chat_template: Optional[str] = None,
        source: str = "<memory>",
        chat_template_vars: Optional[Mapping[str, Any]] = None,
    ):
        self._tok = tokenizer
        self.chat_template_vars: dict[str, Any] = dict(chat_template_vars or {})
        self.vocab_size = int(vocab_size if vocab_size is not None else tokenizer.get_vocab_size(True))
        self.bos_id = bos_id
        self.eos_id = eos_id
        self.pad_id = pad_id if pad_id is not None else eos_id
        self.unk_id = unk_id
        self.add_bos_token = bool(add_bos_token)
        self.chat_template = chat_template
        self.source = source
        stops = [eos_id] if eos_id is not None else []
        for text in _END_OF_TURN_TOKENS:
            tid = tokenizer.token_to_id(text)
            if tid is not None and tid not in stops:
                stops.append(tid)
        self.stop_ids: tuple[int, ...] = tuple(stops)

    def __repr__(self) -> str:
        return (
            f"Tokenizer(source={self.source!r}, vocab_size={self.vocab_size}, bos_id={self.bos_id}, "
            f"eos_id={self.eos_id}, stop_ids={self.stop_ids})"
        )

    # ------------------------------------------------------------------ construction

    @classmethod
    def from_gguf(cls, path: str | os.PathLike) -> "Tokenizer":
        """Build the tokenizer described by a GGUF file's `tokenizer.*` metadata.

        Raises FileNotFoundError if the file is missing, ValueError if it is not a readable
        GGUF file or describes a tokenizer other than byte-level BPE (`gpt2`).
        """
        path = os.fspath(path)
        if os.path.isdir(path):
            raise ValueError(f"{path} is a directory, not a GGUF file")
        if not os.path.isfile(path):
            raise FileNotFoundError(f"GGUF file not found: {path}")
        meta = _read_gguf_tokenizer_metadata(path)

        def need(key: str) -> Any:
            if key not in meta:
                raise ValueError(f"{path}: GGUF metadata has no {key!r}")
            return meta[key]

        model_type = need("tokenizer.ggml.model")
        if model_type != "gpt2":
            raise ValueError(
                f"{path}: unsupported tokenizer.ggml.model={model_type!r}; allowed values: ['gpt2'] "
                "(byte-level BPE)"
            )
        pre = meta.get("tokenizer.ggml.pre", "gpt-2")
        if pre not in GGUF_PRE_TOKENIZERS:
            raise ValueError(
                f"{path}: unsupported tokenizer.ggml.pre={pre!r}; allowed values: {sorted(GGUF_PRE_TOKENIZERS)}"
            )
        tokens: list[str] = need("tokenizer.ggml.tokens")
        merges: list[str] = need("tokenizer.ggml.merges")
        types: Sequence[int] = meta.get("tokenizer.ggml.token_type") or [1] * len(tokens)
        if len(types) != len(tokens):
            raise ValueError(f"{path}: tokenizer.ggml.token_type has {len(types)} entries for {len(tokens)} tokens")

        # Normal tokens are stored in the byte alphabet already; re-spell any that are not.
        # Control / user-defined tokens keep their raw text so they can be matched whole.
        byte_char = _byte_alphabet()
        alphabet = set(byte_char.values())
        added_types = (_TYPE_CONTROL, _TYPE_USER_DEFINED)
        vocab: dict[str, int] = {}
        for i, (tok, ttype) in enumerate(zip(tokens, types)):
            if ttype not in added_types and not set(tok) <= alphabet:
                tok = "".join(byte_char[b] for b in tok.encode("utf-8"))
            vocab[tok] = i
        pairs = []
        for m in merges:
            left, sep, right = m.partition(" ")
            if not sep:
                raise ValueError(f"{path}: malformed merge {m!r} in tokenizer.ggml.merges")
            pairs.append((left, right))

        rust = _RustTokenizer(models.BPE(vocab=vocab, merges=pairs, fuse_unk=False))
        split = GGUF_PRE_TOKENIZERS[pre]
        if split is None:
            rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
        else:
            rust.pre_tokenizer = pre_tokenizers.Sequence(
                [
                    pre_tokenizers.Split(Regex(split), behavior="isolated"),
                    pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
                ]
            )
        rust.decoder = decoders.ByteLevel()
        control = [tokens[i] for i, t in enumerate(types) if t == _TYPE_CONTROL]
        user = [tokens[i] for i, t in enumerate(types) if t == _TYPE_USER_DEFINED]
        if control:
            rust.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in control])
        if user:
            rust.add_tokens([AddedToken(t, normalized=False, special=False) for t in user])

        def token_id(key: str) -> Optional[int]:
            v = meta.get(key)
            if v is None:
                return None
            v = int(v)
            if not 0 <= v < len(tokens):
                raise ValueError(f"{path}: {key}={v} is outside the vocabulary of {len(tokens)} tokens")
            return v

        return cls(
            rust,
            vocab_size=len(tokens),
            bos_id=token_id("tokenizer.ggml.bos_token_id"),
            eos_id=token_id("tokenizer.ggml.eos_token_id"),
            pad_id=token_id("tokenizer.ggml.padding_token_id"),
            unk_id=token_id("tokenizer.ggml.unknown_token_id"),
            add_bos_token=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
            chat_template=meta.get("tokenizer.chat_template"),
            source=path,
        )

    @classmethod
    def from_hf_dir(cls, path: str | os.PathLike) -> "Tokenizer":
        """Build the tokenizer of a Hugging Face directory holding `tokenizer.json`.

        Special tokens and the chat template come from `tokenizer_config.json` (or
        `special_tokens_map.json`); a `chat_template.jinja` file takes precedence. The ids of
        `generation_config.json`'s `eos_token_id` are added to `stop_ids`.
        """
        path = os.fspath(path)
        tj = os.path.join(path, "tokenizer.json")
        if not os.path.isfile(tj):
            raise FileNotFoundError(f"no tokenizer.json in {path}")
        try:
            rust = _RustTokenizer.from_file(tj)
        except Exception as e:  # the Rust side raises a bare Exception on bad JSON
            raise ValueError(f"{tj}: cannot load tokenizer ({e})") from e
        config = _read_json(os.path.join(path, "tokenizer_config.json"))
        special_map = _read_json(os.path.join(path, "special_tokens_map.json"))

        def special_id(name: str) -> Optional[int]:
            text = _token_text(config.get(name)) or _token_text(special_map.get(name))
            return rust.token_to_id(text) if text is not None else None

        bos_id = special_id("bos_token")
        if "add_bos_token" in config:
            add_bos = bool(config["add_bos_token"])
        else:  # infer it from the post-processor, which is what tokenizer.json applies
            add_bos = bos_id is not None and rust.encode("", add_special_tokens=True).ids[:1] == [bos_id]

        template = None
        jinja_file = os.path.join(path, "chat_template.jinja")
        if os.path.isfile(jinja_file):
            with open(jinja_file, encoding="utf-8") as f:
                template = f.read()
        else:
            template = config.get("chat_template")
            if isinstance(template, list):  # [{"name": ..., "template": ...}, ...]
                named = {t.get("name"): t.get("template") for t in template if isinstance(t, Mapping)}
                template = named.get("default")
            if not isinstance(template, str):
                template = None

        out = cls(
            rust,
            vocab_size=rust.get_vocab_size(with_added_tokens=True),
            bos_id=bos_id,
            eos_id=special_id("eos_token"),
            pad_id=special_id("pad_token"),
            unk_id=special_id("unk_token"),
            add_bos_token=add_bos,
            chat_template=template,
            source=path,
        )
        # generation_config.json's eos_token_id (an id or a list) ends generation too, as in transformers
        eos = _read_json(os.path.join(path, "generation_config.json")).get("eos_token_id")
        extra = [int(i) for i in (eos if isinstance(eos, list) else [eos]) if isinstance(i, int)]
        out.stop_ids = tuple(dict.fromkeys(out.stop_ids + tuple(extra)))
        return out

    def hf_json(self) -> str:
        """The Rust tokenizer as `tokenizer.json` text (what `from_hf_dir` reads back)."""
        return self._tok.to_str()

    # ------------------------------------------------------------------ encoding

    def encode(self, text: str, add_bos: Optional[bool] = False) -> list[int]:
        """Token ids of `text`; special-token text (e.g. `<|im_start|>`) maps to its id.

        `add_bos=True` prepends `bos_id`; `None` follows the file's `add_bos_token` flag.
        No other post-processing (e.g. a tokenizer.json template) is applied.
        """
        ids = self._tok.encode(text, add_special_tokens=False).ids
        if add_bos is None:
            add_bos = self.add_bos_token
        if add_bos:
            if self.bos_id is None:
                raise ValueError(f"{self.source}: add_bos requested but the tokenizer has no BOS token")
            ids = [self.bos_id] + ids
        return ids

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Text of `ids`; special tokens are dropped unless `skip_special=False`."""
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=skip_special)

    def token_to_id(self, token: str) -> Optional[int]:
        """Id of a vocabulary entry (byte-level spelling, e.g. `Ġthe`), or None."""
        return self._tok.token_to_id(token)

    def id_to_token(self, token_id: int) -> Optional[str]:
        """Vocabulary entry of an id (byte-level spelling), or None if out of range."""
        return self._tok.id_to_token(int(token_id))

    # ------------------------------------------------------------------ chat

    def _special_text(self, token_id: Optional[int]) -> str:
        if token_id is None:
            return ""
        return self._tok.id_to_token(token_id) or ""

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_vars: Any,
    ) -> str:
        """Render `messages` ([{"role", "content"}, ...]) with the model's own Jinja template.

        The tokenizer's `chat_template_vars` (e.g. `enable_thinking`) and extra keyword
        arguments (e.g. `tools`, which win over them) are passed to the template as variables.
        """
        if not self.chat_template:
            raise ValueError(f"{self.source}: this tokenizer has no chat template")
        template = _compile_template(self.chat_template)
        variables = {
            "bos_token": self._special_text(self.bos_id),
            "eos_token": self._special_text(self.eos_id),
            "unk_token": self._special_text(self.unk_id),
            "pad_token": self._special_text(self.pad_id),
        }
        variables.update(self.chat_template_vars)
        variables.update(template_vars)
        return template.render(
            messages=[dict(m) for m in messages], add_generation_prompt=add_generation_prompt, **variables
        )

    def with_chat_template_vars(self, **variables: Any) -> "Tokenizer":
        """A copy whose chat template always sees `variables` (a None value removes one)."""
        out = copy.copy(self)
        merged = {**self.chat_template_vars, **variables}
        out.chat_template_vars = {k: v for k, v in merged.items() if v is not None}
        return out

    def encode_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_vars: Any,
    ) -> list[int]:
        """Ids of the rendered chat; the template writes any BOS itself, so none is added."""
        return self.encode(self.apply_chat_template(messages, add_generation_prompt, **template_vars))


def for_model(tokenizer, cfg):
    """`tokenizer` rendering chats as model config `cfg` asks: `cfg.enable_thinking`
    (None: the template's default) becomes the template variable `enable_thinking`, and
    `cfg.reasoning_effort` (GPT-OSS's harmony template; None: its default) the variable
    `reasoning_effort`.

    Tokenizers without Jinja templates (the synthetic `CharVocab`) have no thinking switch:
    they are returned as they are for None, and refused for True/False. They render no
    system message either, so a reasoning effort (which the gpt-oss named config sets) has
    nothing to reach and is left out for them.
    """
    thinking = getattr(cfg, "enable_thinking", None)
    effort = getattr(cfg, "reasoning_effort", None)
    if not hasattr(tokenizer, "with_chat_template_vars"):
        if thinking is not None:
            raise ValueError(f"ModelConfig.enable_thinking={thinking!r} needs a tokenizer with a Jinja chat "
                             f"template; {type(tokenizer).__name__} has none (allowed: enable_thinking=None)")
        return tokenizer
    variables = {k: v for k, v in (("enable_thinking", thinking), ("reasoning_effort", effort)) if v is not None}
    return tokenizer.with_chat_template_vars(**variables) if variables else tokenizer


# ---------------------------------------------------------------------- helpers


def _read_json(path: str) -> dict:
    if not os.path.isfile(path):
        return {}
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: cannot read JSON ({e})") from e
    return data if isinstance(data, dict) else {}


def _read_gguf_tokenizer_metadata(path: str) -> dict[str, Any]:
    """The `tokenizer.*` and `general.*` metadata of a GGUF file, as Python values."""
    class _Reader(GGUFReader):
        # GGUFReader slices its np.memmap once per metadata element, and memmap slicing is slow
        # (~3x the whole parse for a 49k-token vocabulary); a plain ndarray view of the same
        # mapping gives identical values.
        @property
        def data(self):
            return self._plain_data

        @data.setter
        def data(self, value):
            self._plain_data = np.asarray(value).view(np.ndarray)

    try:
        reader = _Reader(path, "r")
    except Exception as e:  # truncated/corrupt files surface as assorted numpy/struct errors
        raise ValueError(f"{path}: not a valid or complete GGUF file ({type(e).__name__}: {e})") from e

    out: dict[str, Any] = {}
    for key, field in reader.fields.items():
        if not (key.startswith("tokenizer.") or key.startswith("general.")):
            continue
        try:
            if not field.types:
                continue
            if field.types[0] == GGUFValueType.ARRAY:
                elem = field.types[-1] if len(field.types) > 1 else None
                if elem == GGUFValueType.STRING:
                    out[key] = [field.parts[i].tobytes().decode("utf-8", errors="replace") for i in field.data]
                else:
                    out[key] = [field.parts[i].tolist()[0] for i in field.data]
            elif field.types[0] == GGUFValueType.STRING:
                out[key] = field.parts[field.data[0]].tobytes().decode("utf-8", errors="replace")
            else:
                out[key] = field.parts[field.data[0]].tolist()[0]
        except Exception as e:
            raise ValueError(f"{path}: cannot decode GGUF metadata {key!r} ({type(e).__name__}: {e})") from e
    return out


_TEMPLATE_CACHE: dict[str, Any] = {}


def _compile_template(source: str):
    """Compile a chat template in a sandbox configured like transformers' renderer."""
    cached = _TEMPLATE_CACHE.get(source)
    if cached is not None:
        return cached

    class _Generation(Extension):
        """`{% generation %}...{% endgeneration %}` marks assistant text; render the body as is."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

        def _render(self, caller):
            return caller()

    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.datetime.now().strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[_Generation, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    try:
        template = env.from_string(source)
    except jinja2.exceptions.TemplateSyntaxError as e:
        raise ValueError(f"chat template does not compile: {e}") from e
    _TEMPLATE_CACHE[source] = template
    return template
