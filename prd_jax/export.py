"""`prd-jax export`: a model as a Hugging Face directory that transformers (and vLLM, SGLang,
`transformers serve`, `prd-jax serve --path`) load.

    export_model("/tmp/hf_sft", workdir="/tmp/sft_tiny")        # a training workdir's newest step
    export_model("/tmp/smollm2", model="smollm2-135m")          # the embedded default (GGUF)

Files written:
- `model.safetensors` and `config.json` (`checkpoint.export_hf`; config.json also carries the
  bos / eos / pad ids);
- `tokenizer.json`, `tokenizer_config.json` (special tokens, `chat_template`, no clean-up of
  spaces on decode), `special_tokens_map.json`: `AutoTokenizer` encodes like our tokenizer.
  A byte-level BPE tokenizer (GGUF or HF) is written as it is; a GGUF one that adds BOS gets
  the post-processor that does so. The synthetic `CharVocab` of from-scratch runs becomes a
  `tokenizers` word-level model with one token per character, its special tokens as added
  tokens and a Jinja chat template that renders its chat format (`char_tokenizer`);
- `generation_config.json`: `bos_token_id`, `eos_token_id` (every stop id of the tokenizer,
  so transformers stops where our sampler does), `pad_token_id`, and sampling defaults
  `GENERATION_DEFAULTS`: temperature 1.0, top-p 1.0, top-k 0 (off), `do_sample` true, the
  papers' sampling and `prd-jax serve`'s defaults. A server that applies the file (vLLM,
  `transformers serve`) then changes no request; transformers' `generate` samples unless
  given `do_sample=False` (greedy).

A model without a tokenizer (an HF directory without tokenizer.json) exports weights and
config alone; `Export.missing` says which files were not written and why.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
from typing import Optional

from tokenizers import AddedToken, Regex, Tokenizer as RustTokenizer, decoders, models, pre_tokenizers, processors

from prd_jax.checkpoint import export_hf, load_workdir
from prd_jax.data.synthetic import CharVocab
from prd_jax.model.loader import load

log = logging.getLogger(__name__)

GENERATION_DEFAULTS = {"do_sample": True, "temperature": 1.0, "top_p": 1.0, "top_k": 0}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")

# CharVocab's chat format (`data.synthetic.CharVocab.apply_chat_template`) as a Jinja template.
CHAR_CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] not in ['system', 'user', 'assistant'] %}"
    "{{ raise_exception('role ' + message['role'] + ' is not one of system, user, assistant') }}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '<|assistant|>' + message['content'] + '<|eos|>' }}"
    "{% else %}{{ '<|' + message['role'] + '|>' + message['content'] + '\\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}")


@dataclasses.dataclass
class Export:
    """What `export_model` wrote: the directory, its files, the source and what is missing."""

    out_dir: str
    files: list
    source: str
    missing: dict  # {file name: why it was not written}


def char_tokenizer(vocab: CharVocab) -> RustTokenizer:
    """A `tokenizers` tokenizer that encodes and decodes as `vocab` does: one word-level token
    per character (unknown characters to `<|unk|>`), the special tokens matched whole, and
    decoding that joins the pieces with nothing between them."""
    ids = {text: i for i, text in enumerate(vocab.specials + tuple(vocab.chars))}
    tok = RustTokenizer(models.WordLevel(vocab=ids, unk_token=vocab.specials[vocab.unk_id]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    tok.add_special_tokens([AddedToken(s, special=True, normalized=False) for s in vocab.specials])
    return tok


def _text(tok, token_id: Optional[int]) -> Optional[str]:
    return None if token_id is None else tok.id_to_token(int(token_id))


def tokenizer_files(tok, max_length: int) -> dict:
    """{file name: text} of the HF tokenizer files for our `Tokenizer` or a `CharVocab`."""
    if isinstance(tok, CharVocab):
        rust, template, add_bos = char_tokenizer(tok), CHAR_CHAT_TEMPLATE, False
    else:
        rust, template, add_bos = RustTokenizer.from_str(tok.hf_json()), tok.chat_template, tok.add_bos_token
        if add_bos and rust.post_processor is None:  # GGUF's add_bos_token, as tokenizer.json applies it
            bos = _text(tok, tok.bos_id)
            rust.post_processor = processors.TemplateProcessing(
                single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tok.bos_id)])
    specials = {name: _text(tok, getattr(tok, f"{name}_id"))
                for name in ("bos", "eos", "pad", "unk")}
    specials = {f"{k}_token": v for k, v in specials.items() if v is not None}
    config = {"tokenizer_class": "PreTrainedTokenizerFast", **specials, "add_bos_token": add_bos,
              "add_eos_token": False, "clean_up_tokenization_spaces": False, "model_max_length": max_length}
    if template:
        config["chat_template"] = template
    return {"tokenizer.json": rust.to_str(), "tokenizer_config.json": json.dumps(config, indent=2),
            "special_tokens_map.json": json.dumps(specials, indent=2)}


def generation_config(tok) -> dict:
    """`generation_config.json`: the special ids and `GENERATION_DEFAULTS` (module docstring)."""
    stops = [int(i) for i in tok.stop_ids]
    out = {"bos_token_id": tok.bos_id, "eos_token_id": stops if len(stops) > 1 else stops[0],
           "pad_token_id": tok.pad_id, **GENERATION_DEFAULTS}
    return {k: v for k, v in out.items() if v is not None}


def export_loaded(cfg, params, tok, out_dir, *, dtype: str = "float32", source: str = "") -> Export:
    """Write the HF directory of a model in memory (`tok` None: weights and config only)."""
    out_dir = export_hf(cfg, params, out_dir, dtype=dtype)
    files, missing = ["model.safetensors", "config.json"], {}
    if tok is None:
        why = "the model has no tokenizer (its directory has no tokenizer.json)"
        missing = {name: why for name in TOKENIZER_FILES + ("generation_config.json",)}
    else:
        written = {**tokenizer_files(tok, cfg.max_position),
                   "generation_config.json": json.dumps(generation_config(tok), indent=2)}
        for name, text in written.items():
            with open(os.path.join(out_dir, name), "w", encoding="utf-8") as f:
                f.write(text)
        files += list(written)
        config_path = os.path.join(out_dir, "config.json")
        with open(config_path) as f:
            config = json.load(f)
        config.update({k: v for k, v in generation_config(tok).items() if k.endswith("_token_id")})
        with open(config_path, "w") as f:
            json.dump(config, f, indent=2)
    for name, why in missing.items():
        log.warning("export %s: %s not written: %s", out_dir, name, why)
    return Export(out_dir, files, source, missing)


def export_model(out_dir, *, workdir: Optional[str] = None, step: Optional[int] = None,
                 model: Optional[str] = None, path: Optional[str] = None, dtype: str = "float32") -> Export:
    """Write an HF directory at `out_dir` (module docstring) of a training `workdir` (its `step`,
    None = the newest readable one; model, tokenizer and params via `checkpoint.load_workdir`),
    or of a model `load` reads (`model` name and/or `path`; neither: the embedded smollm2-135m)."""
    if workdir:
        if model or path:
            raise ValueError("export: give --workdir or --model/--path, not both")
        loaded = load_workdir(workdir, step)
    else:
        if step is not None:
            raise ValueError("export: --step needs --workdir (a training workdir's checkpoint step)")
        loaded = load(model, path)
    out = export_loaded(loaded.cfg, loaded.params, loaded.tokenizer, out_dir, dtype=dtype, source=loaded.source)
    log.info("exported %s to %s (%s)", loaded.source, out.out_dir, ", ".join(out.files))
    return out


def summary(out: Export) -> str:
    """The lines `prd-jax export` prints."""
    lines = [f"exported {out.source} to {out.out_dir}: {', '.join(out.files)}"]
    lines += [f"not written: {name}: {why}" for name, why in out.missing.items()]
    return "\n".join(lines)

