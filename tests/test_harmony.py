"""GPT-OSS's harmony chat format (issue 34, "Tokenizer and chat template"): the reasoning
effort as a chat-template variable set from the model config, `<|return|>` / `<|call|>` as
stop tokens, and the channels kept apart: the analysis channel is the thinking block, the
final channel's header (`<|channel|>final<|message|>`, several ids) ends it, so a quoted
candidate is the final channel's text; budgets still count every generated token.

The tokenizer is built here (byte-level BPE without merges plus the harmony special tokens)
with a harmony-style template written for these tests, not the released one."""

import types

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as RustTokenizer

from prd_jax.model.config import get_model_config
from prd_jax.model.tokenizer import Tokenizer, for_model
from prd_jax.operators.call_budget import CallBudget
from prd_jax.operators.calls import quotable, strip_thinking
from prd_jax.operators.runner import encode_problems, make_context, run_operator, thinking_marker
from prd_jax.operators.sr import SR
from prd_jax.sampling import SampleOutput, Sampling

SPECIALS = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|return|>", "<|call|>", "<|constrain|>",
            "<|endoftext|>")

# Harmony-style: a system message naming the reasoning level (default "medium"), messages as
# `<|start|>ROLE<|message|>TEXT<|end|>`, an assistant turn in the final channel, and the
# generation prompt `<|start|>assistant` (the model writes the channel itself).
HARMONY_STYLE = (
    "{% if reasoning_effort is defined %}{% set level = reasoning_effort %}{% else %}{% set level = 'medium' %}"
    "{% endif %}"
    "<|start|>system<|message|>Reasoning level: {{ level }}\nChannels: analysis, final.<|end|>"
    "{% for m in messages %}"
    "{% if m.role == 'assistant' %}<|start|>assistant<|channel|>final<|message|>{{ m.content }}<|end|>"
    "{% elif m.role == 'system' %}<|start|>developer<|message|>{{ m.content }}<|end|>"
    "{% else %}<|start|>{{ m.role }}<|message|>{{ m.content }}<|end|>{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant{% endif %}")


def harmony_rust() -> RustTokenizer:
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    rust = RustTokenizer(models.BPE(vocab={c: i for i, c in enumerate(sorted(alphabet))}, merges=[]))
    rust.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    rust.decoder = decoders.ByteLevel()
    rust.add_special_tokens([AddedToken(t, normalized=False, special=True) for t in SPECIALS])
    return rust


RUST = harmony_rust()
TOK = Tokenizer(RUST, eos_id=RUST.token_to_id("<|return|>"), pad_id=RUST.token_to_id("<|endoftext|>"),
                chat_template=HARMONY_STYLE)
USER = [{"role": "user", "content": "2+2?"}]
HEADER = "<|channel|>final<|message|>"
BOTH = "<|channel|>analysis<|message|>2 and 2 make 4<|end|><|start|>assistant" + HEADER + "answer 4"
ANALYSIS_ONLY = "<|channel|>analysis<|message|>still thinking about"


def ids(name: str) -> int:
    return RUST.token_to_id(name)


# ----------------------------------------------------------------------------- template and stops

def test_reasoning_effort_is_a_template_variable_from_the_model_config():
    assert "Reasoning level: medium" in TOK.apply_chat_template(USER)  # the template's default
    assert get_model_config("gpt-oss-20b").reasoning_effort == "medium"
    high = for_model(TOK, get_model_config("gpt-oss-20b", reasoning_effort="high"))
    text = high.apply_chat_template(USER)
    assert text == ("<|start|>system<|message|>Reasoning level: high\nChannels: analysis, final.<|end|>"
                    "<|start|>user<|message|>2+2?<|end|><|start|>assistant")
    assert high.encode_chat(USER) == TOK.encode(text)
    assert "Reasoning level: low" in high.apply_chat_template(USER, reasoning_effort="low")  # an argument wins
    assert TOK.chat_template_vars == {}
    with pytest.raises(ValueError, match=r"ModelConfig.reasoning_effort='max'; allowed: None or one of "
                                         r"\('low', 'medium', 'high'\)"):
        get_model_config("gpt-oss-20b", reasoning_effort="max")
    from prd_jax.data.synthetic import CharVocab

    assert for_model(CharVocab(), get_model_config("gpt-oss-20b")).__class__ is CharVocab  # no template to reach


def test_return_and_call_stop_generation_and_end_does_not():
    assert TOK.stop_ids == (ids("<|return|>"), ids("<|endoftext|>"), ids("<|call|>"))
    assert ids("<|end|>") not in TOK.stop_ids  # ends the analysis message, not the turn


# ----------------------------------------------------------------------------- the marker and the strip

def test_the_marker_is_the_final_channel_header():
    marker, skip = thinking_marker(TOK)
    assert marker == (ids("<|channel|>"), *TOK.encode("final"), ids("<|message|>"))
    assert len(marker) == 7  # "final" is five byte tokens here
    assert skip == (TOK.encode("\n")[0], TOK.encode(" ")[0])


def rows_of(texts, end=()):
    seqs = [TOK.encode(t) + list(end) for t in texts]
    width = max(len(s) for s in seqs) + 2
    table = np.full((len(seqs), width), TOK.pad_id, np.int32)
    for i, s in enumerate(seqs):
        table[i, :len(s)] = s
    return jnp.asarray(table), jnp.asarray([len(s) for s in seqs], jnp.int32)


def test_analysis_and_final_are_stripped_to_the_final_text_and_no_final_is_kept_whole():
    ctx = types.SimpleNamespace(sampling=Sampling(stop_ids=TOK.stop_ids), think_end=thinking_marker(TOK)[0],
                                think_skip=thinking_marker(TOK)[1])
    spec = types.SimpleNamespace(budget=CallBudget(quote_thinking=False))
    tok, length = rows_of([BOTH, ANALYSIS_ONLY, "plain", BOTH + "<|end|><|start|>assistant" + HEADER + " again"],
                          end=[ids("<|return|>")])
    out, n = jax.jit(lambda t, l: quotable(t, l, spec, ctx))(tok, length)
    got = [TOK.decode(np.asarray(out[r, :int(n[r])]).tolist(), skip_special=False) for r in range(4)]
    # the stop is dropped; an unopened final channel is kept as an unclosed </think> block is;
    # two final messages: the text after the last header (as for the last </think>)
    assert got == ["answer 4", ANALYSIS_ONLY, "plain", "again"]
    full = types.SimpleNamespace(budget=CallBudget(quote_thinking=True))
    whole, n_whole = jax.jit(lambda t, l: quotable(t, l, full, ctx))(tok, length)
    assert TOK.decode(np.asarray(whole[0, :int(n_whole[0])]).tolist(), skip_special=False) == BOTH


# ----------------------------------------------------------------------------- through an operator

@flax.struct.dataclass
class ScriptLM:
    """Every call's output row j is script row j mod S, cut at the call's budget."""

    table: jax.Array
    lengths: jax.Array

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        rows = prompts.shape[0] * scfg.num_samples
        pick = jnp.arange(rows) % self.table.shape[0]
        width = scfg.max_new_tokens
        table = jnp.pad(self.table, ((0, 0), (0, max(0, width - self.table.shape[1]))))[:, :width]
        return SampleOutput(table[pick], jnp.zeros((rows, width)), jnp.minimum(self.lengths[pick], width),
                            jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], TOK.vocab_size))


def run_sr(text):
    table, lengths = rows_of([text], end=[ids("<|return|>")])
    lm = ScriptLM(table, lengths)
    ctx = make_context(TOK, Sampling(stop_ids=TOK.stop_ids), kappa=32, k_max=2)
    probs = encode_problems(TOK, ["2+2?"], ["4"], max_problem_tokens=16)[0]
    res = run_operator(lm, probs, jax.random.key(0), SR(1, False, 96, 96, 8), ctx)
    row = np.asarray(res.workspace_tokens[0]).tolist()
    return res, row[len(row) - int(res.workspace_lengths[0]):], int(lengths[0])


@pytest.mark.slow
def test_an_operator_quotes_the_final_channel_and_bills_every_token():
    res, quoted, generated = run_sr(BOTH)
    assert quoted == TOK.encode("answer 4")
    assert int(res.b_seq[0]) == 2 * generated  # draft + refine, analysis and stop included
    res, quoted, _ = run_sr(ANALYSIS_ONLY)
    assert quoted == TOK.encode(ANALYSIS_ONLY)


def test_strip_thinking_matches_the_marker_only_as_the_whole_id_sequence():
    marker = thinking_marker(TOK)[0]
    near = "<|channel|>finals<|message|>x"  # one id off: not the final channel
    tok, length = rows_of([near])
    out, n = jax.jit(strip_thinking, static_argnums=2)(tok, length, marker)
    assert int(n[0]) == int(length[0])


# ----------------------------------------------------------------------------- peer: transformers renders the same

@pytest.mark.peer
@pytest.mark.parametrize("effort", [None, "low", "high"])
def test_rendered_prompt_equals_transformers_apply_chat_template(effort):
    transformers = pytest.importorskip("transformers")
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=harmony_rust(), chat_template=HARMONY_STYLE)
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"},
                {"role": "assistant", "content": "4"}, {"role": "user", "content": "and 3+3?"}]
    kwargs = {} if effort is None else {"reasoning_effort": effort}
    theirs = fast.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    ours = for_model(TOK, get_model_config("gpt-oss-20b", reasoning_effort=effort)).apply_chat_template(messages)
    assert ours == theirs
    assert f"Reasoning level: {effort or 'medium'}" in ours
    their_ids = fast(theirs, add_special_tokens=False)["input_ids"]
    assert TOK.encode(ours) == list(their_ids)
    assert list(thinking_marker(TOK)[0]) == fast(HEADER, add_special_tokens=False)["input_ids"]


def test_reasoning_effort_is_an_eval_config_key_that_reaches_the_model_config():
    from prd_jax.eval_config import EvalConfig

    base = dict(model="gpt-oss-20b", operators=[{"type": "long_cot"}], num_problems=1, batch_size=1,
                max_problem_tokens=8, seed=0)
    assert "reasoning_effort" not in EvalConfig.from_config(base).settings()  # older workdirs' settings stay
    high = EvalConfig.from_config(dict(base, reasoning_effort="high"))
    assert high.model_overrides() == {"reasoning_effort": "high"} and high.settings()["reasoning_effort"] == "high"
    assert get_model_config("gpt-oss-20b", **high.model_overrides()).reasoning_effort == "high"
    with pytest.raises(ValueError, match=r"config.reasoning_effort='max'; allowed: None or one of"):
        EvalConfig.from_config(dict(base, reasoning_effort="max"))
