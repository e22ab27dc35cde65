"""Uncertainty-adaptive PDR (`prd_jax/operators/adaptive_pdr.py`) on a scripted fake model:
budgets by hand (all stop after round 1, none stop, a mix), no refine for unanimous drafts,
the allocation within the cap, the `v1_mu` signal, bad settings named by field, and the
remote path (RemoteLM over an in-process fake endpoint) equal to the in-graph run."""

import dataclasses

import flax
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from prd_jax.operators import registry
from prd_jax.operators.adaptive_pdr import AdaptivePDR, allocate
from prd_jax.operators.runner import encode_problems, make_context, run_operator
from prd_jax.operators.specs import Sampling
from prd_jax.sampling import SampleOutput
from fakes import CharTokenizer

TOK = CharTokenizer()
NO_ANSWER = 7  # a candidate whose first token is 7 has no answer
N = 5  # every call's max_new_tokens


class FirstTokenGrouper:
    """Answer key = a candidate's first token (none when it is NO_ANSWER or the candidate is empty)."""

    def __call__(self, cand_tok, cand_len):
        first = np.asarray(cand_tok)[:, :, 0]
        return np.where((np.asarray(cand_len) > 0) & (first != NO_ANSWER), first, -1).astype(np.int32)


@flax.struct.dataclass
class ScriptLM:
    """Call `name` answers its row i (problem-major; a draft call's row is (problem, slot))
    with `script[name][i]` = (first token, length); every token of a row is its first token.
    Judges (no reasoning) read a flat next-token distribution: every rating is the same, so
    every mu is 0.5."""

    script: tuple = flax.struct.field(pytree_node=False)

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        rows = prompts.shape[0] * scfg.num_samples
        table = dict(self.script)[name]
        assert len(table) == rows, (name, len(table), rows)
        tok = jnp.asarray([t for t, _ in table], jnp.int32)
        length = jnp.asarray([n for _, n in table], jnp.int32)
        tokens = jnp.broadcast_to(tok[:, None], (rows, scfg.max_new_tokens))
        return SampleOutput(tokens, jnp.zeros(tokens.shape), length, jnp.zeros((rows,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], 256))


def ctx():
    return make_context(TOK, Sampling(), grouper=FirstTokenGrouper(), k_max=2)


def problems(b=2):
    return encode_problems(TOK, [f"q{i}?" for i in range(b)], ["0"] * b, max_problem_tokens=16)[0]


def spec(**kw):
    fields = dict(waves=2, min_fanout=2, max_fanout=2, tau=1.0, k=2, max_new_tokens=N, candidate_max_tokens=N,
                  truncation_head=1)
    fields.update(kw)
    return AdaptivePDR(**fields)


def script_lm(script):
    return ScriptLM(tuple((k, tuple(v)) for k, v in script.items()))


def run(script, **kw):
    res = run_operator(script_lm(script), problems(), jax.random.key(0), spec(**kw), ctx())
    return res, res.b_seq.tolist(), res.b_total.tolist()


def calls_of(res, i, name):
    """(in, out) of problem i's calls named `name` that ran (any token)."""
    return [(int(a), int(b)) for n, a, b in zip(res.calls.names, res.calls.in_tokens[i], res.calls.out_tokens[i])
            if n == name and (a or b)]


UNUSED = (99, N)  # a row that must not run: counted, it would show up as N tokens
REFINE_UNUSED = [UNUSED] * 2


def test_all_stop_after_wave_one():
    script = {"adaptive_pdr.draft": [(20, 3), (20, 4), UNUSED, UNUSED, (30, 5), (30, 2), UNUSED, UNUSED],
              "adaptive_pdr.refine": REFINE_UNUSED}
    res, b_seq, b_total = run(script)
    assert b_total == [3 + 4, 5 + 2]
    assert b_seq == [3, 5]  # the agreed answer: the largest group's first draft
    assert res.final_tokens[:, 0].tolist() == [20, 30]
    for i in range(2):  # unanimous drafts never pay for a refine call
        assert calls_of(res, i, "refine") == []
        assert len(calls_of(res, i, "draft")) == 2
    solve_in = [int(res.calls.in_tokens[i, 0]) for i in range(2)]
    assert solve_in[0] > 0 and res.b_total_io.tolist() == [2 * solve_in[0] + 7, 2 * solve_in[1] + 7]


def test_none_stop_budgets_by_hand():
    # wave 1 shares: p0 1/2 (20, 21), p1 1/2 (one answer, one without); u = 0.5, and
    # min = max = 2: each draws slots 2-3; after wave 2 every answer is alone (1/4): refine
    script = {"adaptive_pdr.draft": [(20, 3), (21, 4), (22, 2), (23, 5), (NO_ANSWER, 5), (30, 2), (31, 1), (32, 1)],
              "adaptive_pdr.refine": [(25, 4), (34, 3)]}
    res, b_seq, b_total = run(script)
    assert b_total == [3 + 4 + 2 + 5 + 4, 5 + 2 + 1 + 1 + 3]
    # path: the refine, its workspace's top-1 (p0: slot 0, a tie to the lower slot; p1: slot 1,
    # the first answered) in wave 1, and wave 2's longest call (p0: slot 3; p1: a tie, slot 2)
    assert b_seq == [4 + 3 + 5, 3 + 2 + 1]
    assert res.final_tokens[:, 0].tolist() == [25, 34]
    assert [len(calls_of(res, i, "draft")) for i in range(2)] == [4, 4]


def test_a_mix_budgets_by_hand():
    # p0 unanimous: stops after wave 1. p1 (1/2) draws wave 2; 30 then holds 3 of 4 >= 0.75:
    # it stops with slot 0 (the first 30) and pays no refine
    script = {"adaptive_pdr.draft": [(20, 3), (20, 4), UNUSED, UNUSED, (30, 5), (31, 2), (30, 2), (30, 3)],
              "adaptive_pdr.refine": REFINE_UNUSED}
    res, b_seq, b_total = run(script, tau=0.75)
    assert b_total == [3 + 4, 5 + 2 + 2 + 3]
    assert b_seq == [3, 5 + 3]  # p1: slot 0 in wave 1, wave 2's longest (slot 3)
    assert res.final_tokens[:, 0].tolist() == [20, 30]
    assert calls_of(res, 0, "refine") == calls_of(res, 1, "refine") == []
    assert res.workspace_lengths.tolist() == [0, 0]


@pytest.mark.parametrize("cap,wave2", [(15, [0, 0]), (25, [4, 0])])
def test_the_cap_is_never_passed(cap, wave2):
    # every call generates its whole budget; p0 has no answer (u = 1), p1 half (u = 0.5)
    script = {"adaptive_pdr.draft": [(NO_ANSWER, N)] * 6 + [(30, N), (31, N)] + [(40 + j, N) for j in range(4)],
              "adaptive_pdr.refine": [(50, N), (51, N)]}
    res, _, b_total = run(script, cap=cap, max_fanout=4)
    assert sum(b_total) <= cap * 2
    # cap 15: 30 - 20 spent = 2 calls left, both reserved for the refines; cap 25: 6 left,
    # 2 reserved; p0 (most uncertain) asks 2 + 2 = 4 and gets them, p1 asks 3 of 0 left
    assert [len(calls_of(res, i, "draft")) for i in range(2)] == [2 + m for m in wave2]
    assert b_total == [N * (2 + m + 1) for m in wave2]


@pytest.mark.slow
def test_with_disagreeing_drafts_it_is_pdr_over_the_same_drafts():
    from prd_jax.operators.pdr import PDR

    drafts = [(20, 3), (21, 4), (22, 2), (23, 5), (NO_ANSWER, 5), (30, 2), (31, 1), (32, 1)]
    script = {"adaptive_pdr.draft": drafts, "pdr.draft": drafts, "adaptive_pdr.refine": [(25, 4), (34, 3)],
              "pdr.refine": [(25, 4), (34, 3)]}
    lm = script_lm(script)
    fixed = run_operator(lm, problems(), jax.random.key(0), PDR((4, 1), "shared_topk", 2, "majority", 8, N, N, 1),
                         ctx())
    res, b_seq, b_total = run(script)
    np.testing.assert_array_equal(res.final_tokens, fixed.final_tokens)
    np.testing.assert_array_equal(res.workspace_tokens, fixed.workspace_tokens)
    assert b_total == fixed.b_total.tolist()
    # B_seq: PDR's path (refine + parent draft) plus the second wave's longest call
    assert b_seq == [int(fixed.b_seq[0]) + 5, int(fixed.b_seq[1]) + 1]


ALLOCATE = jax.jit(allocate, static_argnums=(3, 4))
LO, EXTRA = 2, 3  # fan-out 2..5


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1, width=32, allow_subnormal=False), st.booleans()), min_size=9, max_size=9),
       st.integers(0, 50))  # no subnormals: XLA:CPU flushes them to 0 when it sorts (shares are k/n)
def test_allocate_stays_within_calls_left_and_fanout_bounds(rows, left):
    u = jnp.asarray([r[0] for r in rows], jnp.float32)
    live = np.asarray([r[1] for r in rows])
    grant = np.asarray(ALLOCATE(u, jnp.asarray(live), jnp.int32(left), LO, LO + EXTRA))
    assert grant.sum() <= left
    assert all(g == 0 or LO <= g <= LO + EXTRA for g in grant)
    assert not grant[~live].any()
    want = LO + np.round(np.asarray(u) * EXTRA).astype(int)
    if live.sum() * (LO + EXTRA) <= left:  # enough for everyone: each gets what it asks
        assert grant.tolist() == [int(w) if a else 0 for w, a in zip(want, live)]
    # served by descending uncertainty: a problem left without calls saw fewer than LO left
    # after every more uncertain problem had been served
    for i in np.flatnonzero(live & (grant == 0)):
        before = sum(grant[j] for j in np.flatnonzero(live) if (float(u[j]), -j) > (float(u[i]), -i))
        assert left - before < LO


@pytest.mark.slow  # the in-graph tournament compiles a while_loop with host callbacks
def test_v1_mu_signal_judges_only_live_problems_and_counts_its_calls():
    # flat ratings: every mu is 0.5, the gap 0, so no problem stops; a judged wave runs
    # budget_multiple x n calls per problem: 2 over wave 1's 2 drafts, 4 over all 4 after wave 2
    script = {"adaptive_pdr.draft": [(20, 3), (20, 4), (41, 1), (41, 1), (30, 5), (30, 2), (42, 1), (42, 1)],
              "adaptive_pdr.refine": [(50, 2), (51, 2)]}
    res, b_seq, b_total = run(script, signal="v1_mu", tau=0.5)
    judge = [calls_of(res, i, "judge") for i in range(2)]
    assert [len(j) for j in judge] == [2 + 4, 2 + 4]
    assert all(b > 0 for j in judge for _, b in j)  # a forced rating's suffix is generated output
    judged = [sum(b for _, b in j) for j in judge]
    assert b_total == [7 + 2 + 2 + judged[0], 7 + 2 + 2 + judged[1]]


@pytest.mark.parametrize("field,value,needle", [
    ("waves", 0, "AdaptivePDR.waves=0"), ("min_fanout", 0, "AdaptivePDR.min_fanout=0"),
    ("max_fanout", 1, "AdaptivePDR.max_fanout=1; must be an int >= min_fanout=2"), ("tau", 0.0, "AdaptivePDR.tau=0.0; allowed: (0, 1]"),
    ("tau", 1.5, "AdaptivePDR.tau=1.5"), ("signal", "entropy", "AdaptivePDR.signal='entropy'; allowed"),
    ("cap", 10, "AdaptivePDR.cap=10; allowed: 0 (no cap) or an int >= (min_fanout + 1) x max_new_tokens = 15"),
    ("k", 3, "AdaptivePDR.k=3 exceeds min_fanout=2"),
])
def test_bad_settings_name_the_field(field, value, needle):
    with pytest.raises(ValueError) as e:
        spec(**{field: value})
    assert needle in str(e.value)


def test_registered_built_from_a_config_entry_and_labelled():
    built = registry.build_spec(dict(type="adaptive_pdr", waves=3, min_fanout=2, max_fanout=3, tau=0.125, cap=640,
                                     max_new_tokens=80))
    assert built == AdaptivePDR(waves=3, min_fanout=2, max_fanout=3, tau=0.125, cap=640, max_new_tokens=80)
    assert built.drafts == 8 and registry.get_operator("adaptive_pdr").spec is AdaptivePDR
    assert built.label.startswith("adaptive_pdr(waves=3,M=2-3,tau=0.125,cap=640,sig=majority,k=2")
    assert dataclasses.replace(built, tau=0.5).label != built.label


# ----------------------------------------------------------------------------- the remote path

def seeded_answer(ids, seed):
    """What the fake endpoint (and its in-graph twin) answers: the first token and the length
    follow the request's seed, so drafts of one prompt agree or not by chance."""
    return [20 + seed % 2] * (1 + seed % N)


class WireTokenizer(CharTokenizer):
    vocab_size, stop_ids = 256, ()


class FakeEndpoint:
    """In-process stand-in for `backends.client.Client`: answers /completions bodies with
    `seeded_answer`, billing the prompt and the answer; counts the requests."""

    def __init__(self):
        self.requests = []

    def post_many(self, path, bodies, check, tags=None):
        from prd_jax.backends.client import Answer

        out = []
        for body in bodies:
            assert path == "completions"
            ids = seeded_answer(body["prompt"], body["seed"])
            self.requests.append(body)
            out.append(Answer(True, {"choices": [{"text": "", "token_ids": ids, "finish_reason": "length"}],
                                     "usage": {"prompt_tokens": len(body["prompt"]), "completion_tokens": len(ids)}}))
        return out

    def scrub(self, text):
        return text


@flax.struct.dataclass
class SeededLM:
    """The in-graph twin of `FakeEndpoint`: row (b, m) answers `seeded_answer` with the seed the
    remote LM would send (`remote_lm.sample_seed` of prompt b's key and sample m)."""

    def generate(self, prompts, lengths, keys, scfg, fanout=True, name="", live=None):
        from prd_jax.backends.remote_lm import sample_seed

        b, m, n = prompts.shape[0], scfg.num_samples, scfg.max_new_tokens

        def host(prompts, lengths, key_data):
            tok, length = np.zeros((b * m, n), np.int32), np.zeros((b * m,), np.int32)
            for i in range(b):
                ids = np.asarray(prompts)[i, prompts.shape[1] - int(lengths[i]):].tolist()
                for j in range(m):
                    answer = seeded_answer(ids, sample_seed(np.asarray(key_data)[i], j))
                    tok[i * m + j, :len(answer)], length[i * m + j] = answer, len(answer)
            return tok, length

        tok, length = jax.pure_callback(host, (jax.ShapeDtypeStruct((b * m, n), jnp.int32),
                                               jax.ShapeDtypeStruct((b * m,), jnp.int32)),
                                        prompts, lengths, jax.random.key_data(keys))
        return SampleOutput(tok, jnp.zeros(tok.shape), length, jnp.zeros((b * m,), bool))

    def next_logits(self, prompts, lengths, name="", live=None):
        return jnp.zeros((prompts.shape[0], 256))


@pytest.mark.slow
def test_remote_token_mode_equals_in_graph_and_sends_only_the_calls_that_ran():
    from prd_jax.backends.config import BackendConfig
    from prd_jax.backends.remote_lm import RemoteHost, RemoteLM

    backend = BackendConfig.from_config(dict(kind="openai", base_url="http://127.0.0.1:9/v1", model="m",
                                             api="completions", api_key_env=""))
    endpoint = FakeEndpoint()
    host = RemoteHost(backend, WireTokenizer(), endpoint)
    b, s = 6, spec(max_fanout=3)  # 2 + 3 draft slots, one refine
    probs = encode_problems(TOK, [f"q{i}?" for i in range(b)], ["0"] * b, max_problem_tokens=16)[0]
    key = jax.random.key(3)
    local = run_operator(SeededLM(), probs, key, s, ctx())
    host.begin(b)
    remote = run_operator(RemoteLM(host), probs, key, s, ctx())
    for field in ("final_tokens", "final_lengths", "workspace_tokens", "workspace_lengths"):
        np.testing.assert_array_equal(getattr(local, field), getattr(remote, field), err_msg=field)
    for field in ("b_seq", "b_total", "b_seq_io", "b_total_io"):
        assert getattr(local, field).tolist() == getattr(remote, field).tolist(), field
    ran = [len(calls_of(local, i, "draft")) + len(calls_of(local, i, "refine")) for i in range(b)]
    assert len(endpoint.requests) == sum(ran)  # masked rows were never sent
    stops = [calls_of(local, i, "refine") == [] for i in range(b)]
    assert any(stops) and not all(stops)  # the seeds give a mix: some agree after wave 1
    assert sum(ran) < b * (s.drafts + 1)
