"""RL for verifiable rewards: rollout -> reward -> advantage -> update (PDR paper §3.3, §4.2).

One trainer step is one rollout batch: P prompts x G samples from the in-graph sampler
(prefill-once fan-out), recording the sampling policy's logprobs; rewards from
`prd_jax.rewards` (math grading on the host); group advantages (GRPO / Dr.GRPO / RLOO);
then optimizer updates on that batch inside one compiled step: `rl.updates_per_batch` epochs
over it, each split into `rl.minibatches` mini-batches with one update apiece
(`minibatch_updates`), so from the second update on the ratio to the sampling policy moves
and the clip bounds act (PPO, arXiv 1707.06347, §5, Alg. 1: K epochs over minibatches).

The loss (per completion token, `losses.policy_loss`): PPO-clip with asymmetric
eps_low/eps_high or CISPO, aggregated token-mean, sequence-mean-token-mean or with Dr.GRPO's
constant normaliser (`losses.aggregate`); plus
`kl_coef` x k3 KL to the frozen initial policy and `aux_sft_coef` x NLL on the tokens of
correct rollouts (an auxiliary SFT term, alpha = 0.1: ours, not stated in ../shared/papers/). The KL term uses the
policy loss's denominator; the SFT term's normaliser is `rl.aux_sft_normaliser` (RLConfig),
exact under accumulation given the batch's `aux_sft_scale`.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Optional

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax import prompts as P
from prd_jax.config_schema import MOVED, check_moved, default
from prd_jax.host import to_host
from prd_jax.model.decoder import forward, init_params, param_shapes
from prd_jax.model.weights import param_shardings
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.registry import build_spec, operator_for
from prd_jax.operators.runner import answer_texts
from prd_jax.operators.specs import OperatorSpec, Sampling
from prd_jax.sampling import SamplingConfig
from prd_jax.train import advantages as adv_lib, operator_rl, router_aux
from prd_jax.train.chunked_xent import chunked_token_logprobs
from prd_jax.train.rl_eval import HeldOutEval
from prd_jax.train.rollout_log import StepSamples
from prd_jax.train.losses import (AGGREGATIONS, AUX_SFT_NORMALISERS, LOSSES, aggregate, aux_sft_scale,
                                  aux_sft_term, check_choice, k3_kl, policy_loss)
from prd_jax.train.rl_rows import pad_group, sequences_to_batch, verifier_rows_per_prompt
from prd_jax.train.setup import build_model, rl_problems, training_task

GRADIENT_TARGETS = ("refine", "drafts_and_refine")
VERIFIERS = ("none", "pairwise", "pointwise")
VERIFIER_BASELINES = ("group", "batch")  # per prompt group (Dr. GRPO) or the whole step's verifier rows
VERIFIER_SAMPLES = ("policy", "frozen_base")  # whose rollouts the verifier rows quote


@dataclasses.dataclass(frozen=True)
class RLConfig:
    """Validated `config.rl` (field errors name the field).

    - `loss="cispo"` clips the importance weight from above only, `min(r, 1 + eps_high)`
      (MiniMax-M1, arXiv 2506.13585, §3.1: no lower bound), so `eps_low` is unused unless
      `cispo_lower_clip=True` (ours) asks for `clip(r, 1 - eps_low, 1 + eps_high)`. PPO's clip
      is always two-sided.
    - `aux_sft_coef` x the NLL of correct-rollout tokens, normalised by `aux_sft_normaliser`:
      "correct_token_mean" (default): the mean over correct-rollout completion tokens, an SFT
      loss on the correct samples (as VAPO's positive-example LM loss, arXiv 2504.05118);
      exact per optimizer update when the batch carries `aux_sft_scale`
      (`losses.aux_sft_scale` of the global batch, one block per mini-batch), else computed
      over each microbatch. "policy": the policy loss's denominator (token_mean: all
      completion tokens, correct or not), i.e. the correct-token mean times the correct
      share. The term, alpha = 0.1 and this normaliser are ours: the PDR paper's text in
      ../shared/papers/ states no RL objective.
    """

    prompts_per_step: int = 4
    samples_per_prompt: int = 8
    max_prompt_tokens: int = 128
    max_new_tokens: int = 128
    advantage: str = "grpo"
    loss: str = "cispo"
    eps_low: float = 0.2
    eps_high: float = 0.28
    aggregation: str = "token_mean"
    kl_coef: float = 0.0
    aux_sft_coef: float = 0.1
    aux_sft_normaliser: str = "correct_token_mean"  # or "policy" (losses.aux_sft_term)
    cispo_lower_clip: bool = False  # CISPO: also clip the IS weight below at 1 - eps_low (ours)
    updates_per_batch: int = 1  # epochs over each rollout batch
    minibatches: int = 1  # optimizer updates per epoch, each on 1/minibatches of the rows
    # operator-consistent RL (PDR paper §3.3): share of each step's prompts given PDR-round rollouts
    operator_fraction: float = 0.0
    operator: Any = None  # operator spec: a dict of its fields, `type` a registered name (default "pdr")
    gradient_targets: str = "refine"
    # V1 §5 self-verification objective
    verifier: str = "none"
    verifier_coef: float = 1.0
    verifier_threshold: float = 0.2
    verifier_pairs_per_prompt: int = 4
    verifier_max_new_tokens: int = 64
    verifier_candidate_max_tokens: int = 128
    verifier_pointwise_per_prompt: int = 0  # pointwise rows per prompt (0 = every one of its G rollouts)
    verifier_baseline: str = "group"
    verifier_samples: str = "policy"
    seed_offset: int = 0
    code_reward: str = "fraction"  # code tasks: "fraction" of tests passed or "all_pass" (1 when all pass)
    templates: str = "default"  # prompt set (prompts.TEMPLATE_SETS) of rollouts and judges
    # the width of a problem quoted in operator / verifier prompts (0 = max_prompt_tokens);
    # standard rollout prompts are max_prompt_tokens wide
    max_problem_tokens: int = 0
    # held-out eval every config.eval_every steps (`rl_eval`): the split ("" = the task's default,
    # "test" for built-in tasks), its first eval_problems problems, and the operators run on them
    # (None = Long-CoT at max_new_tokens, plus `operator` for operator RL; else entries as an eval
    # config's `operators`, each with an optional `name` for its metrics)
    eval_split: str = ""
    eval_problems: int = 8
    eval_operators: Optional[tuple] = None
    # sample rollouts as text every log_rollouts_every steps (0 = off), log_rollouts of them (`rollout_log`)
    log_rollouts_every: int = 0
    log_rollouts: int = 4
    # how rollout, operator and verifier calls sample, and their memory bounds (`max_rows`:
    # decode rows in flight per call): `config.sampling`, the one sampling config
    sampling: Sampling = Sampling()

    def __post_init__(self):
        for f in ("prompts_per_step", "samples_per_prompt", "max_prompt_tokens", "max_new_tokens",
                  "updates_per_batch", "minibatches"):
            if getattr(self, f) < 1:
                raise ValueError(f"config.rl.{f}={getattr(self, f)}; must be >= 1")
        for f in ("eval_problems", "log_rollouts"):
            if getattr(self, f) < 1:
                raise ValueError(f"config.rl.{f}={getattr(self, f)}; must be >= 1")
        if self.log_rollouts_every < 0:
            raise ValueError(f"config.rl.log_rollouts_every={self.log_rollouts_every}; must be >= 0 (0 = off)")
        if self.max_problem_tokens < 0:
            raise ValueError(f"config.rl.max_problem_tokens={self.max_problem_tokens}; must be >= 0 "
                             "(0 = max_prompt_tokens)")
        if not isinstance(self.sampling, Sampling):
            object.__setattr__(self, "sampling", Sampling.from_config(self.sampling))
        self.sampling.check_in_graph()
        if self.sampling.max_rows and self.sampling.max_rows < self.samples_per_prompt:
            raise ValueError(f"config.sampling.max_rows={self.sampling.max_rows}; must be 0 or >= "
                             f"config.rl.samples_per_prompt={self.samples_per_prompt} (a prompt's samples "
                             "decode together)")
        if self.advantage not in adv_lib.KINDS:
            raise ValueError(f"config.rl.advantage={self.advantage!r}; allowed: {adv_lib.KINDS}")
        # The allowed values are the tables of `losses` (one place to add a loss or aggregation).
        check_choice("config.rl.loss", self.loss, LOSSES)
        check_choice("config.rl.aggregation", self.aggregation, AGGREGATIONS)
        if self.kl_coef < 0 or self.aux_sft_coef < 0:
            raise ValueError("config.rl.kl_coef and config.rl.aux_sft_coef must be >= 0")
        check_choice("config.rl.aux_sft_normaliser", self.aux_sft_normaliser, AUX_SFT_NORMALISERS)
        if not isinstance(self.cispo_lower_clip, bool):
            raise ValueError(f"config.rl.cispo_lower_clip={self.cispo_lower_clip!r}; allowed: True, False")
        if self.cispo_lower_clip and self.loss != "cispo":
            raise ValueError(f"config.rl.cispo_lower_clip=True needs config.rl.loss='cispo'; got "
                             f"{self.loss!r} (PPO's clip is always two-sided)")
        if not 0.0 <= self.operator_fraction <= 1.0:
            raise ValueError(f"config.rl.operator_fraction={self.operator_fraction}; allowed: [0, 1]")
        if self.gradient_targets not in GRADIENT_TARGETS:
            raise ValueError(f"config.rl.gradient_targets={self.gradient_targets!r}; allowed: {GRADIENT_TARGETS}")
        if self.templates not in P.TEMPLATE_SETS:
            raise ValueError(f"config.rl.templates={self.templates!r}; allowed: {sorted(P.TEMPLATE_SETS)}")
        if self.code_reward not in CODE_REWARDS:
            raise ValueError(f"config.rl.code_reward={self.code_reward!r}; allowed: {CODE_REWARDS}")
        if self.verifier not in VERIFIERS:
            raise ValueError(f"config.rl.verifier={self.verifier!r}; allowed: {VERIFIERS}")
        if self.verifier_baseline not in VERIFIER_BASELINES:
            raise ValueError(f"config.rl.verifier_baseline={self.verifier_baseline!r}; allowed: {VERIFIER_BASELINES}")
        if self.verifier_samples not in VERIFIER_SAMPLES:
            raise ValueError(f"config.rl.verifier_samples={self.verifier_samples!r}; allowed: {VERIFIER_SAMPLES}")
        if self.verifier_samples == "frozen_base" and self.verifier == "none":
            raise ValueError("config.rl.verifier_samples='frozen_base' needs config.rl.verifier "
                             "('pairwise' or 'pointwise'); it has no verifier rows to feed")
        if not 0 <= self.verifier_pointwise_per_prompt <= self.samples_per_prompt:
            raise ValueError(f"config.rl.verifier_pointwise_per_prompt={self.verifier_pointwise_per_prompt}; allowed: "
                             f"0 (every rollout) .. samples_per_prompt={self.samples_per_prompt}")
        if self.operator_fraction > 0:
            if self.operator is None:
                raise ValueError("config.rl.operator_fraction > 0 needs config.rl.operator (a dict of the "
                                 "operator's fields, with `type` a registered operator name; default 'pdr')")
            if not isinstance(self.operator, OperatorSpec):
                try:
                    object.__setattr__(self, "operator", build_spec(self.operator, default_type="pdr"))
                except ValueError as e:
                    raise ValueError(f"config.rl.operator: {e}") from None
            if not self.operator.trainable_rounds(self.gradient_targets):
                raise ValueError(f"config.rl.operator: operator {operator_for(self.operator).name!r} declares no "
                                 "round operator RL can train (OperatorSpec.round_sizes / trainable_rounds)")
        if self.eval_operators is not None:
            object.__setattr__(self, "eval_operators", eval_entries(self.eval_operators))

    def eval_specs(self) -> tuple:
        """((metric name, operator spec), ...) of the held-out eval (`rl_eval`): `eval_operators`,
        or by default Long-CoT with the rollout budget and, for operator RL, the RL operator
        itself (PDR §4.2 compares the two)."""
        if self.eval_operators is not None:
            return self.eval_operators
        out = (("long_cot", build_spec({"type": "long_cot", "max_new_tokens": self.max_new_tokens})),)
        if self.operator_fraction > 0:
            out += ((operator_for(self.operator).name, self.operator),)
        return eval_entries(out)

    @property
    def problem_tokens(self) -> int:
        """Width of a problem quoted inside operator and verifier prompts."""
        return self.max_problem_tokens or self.max_prompt_tokens

    def call_sampling(self, stop_ids) -> Sampling:
        """The operator context's sampling for operator-RL rounds: `sampling` with the tokenizer's stop ids."""
        return dataclasses.replace(self.sampling, stop_ids=tuple(stop_ids))

    def sampler_config(self, max_new: int, num_samples: int, stop_ids) -> SamplingConfig:
        """A standard rollout's or verifier call's sampler settings (`sampling`, the call's budget)."""
        return SamplingConfig.of(self.call_sampling(stop_ids), max_new, num_samples=num_samples)

    @classmethod
    def from_config(cls, config) -> "RLConfig":
        """From `config.rl` and `config.sampling`; a key that moved (`config_schema.MOVED`) raises,
        naming its new place."""
        check_moved(config, [k for k in MOVED if k.startswith("rl.")])
        rl = config.rl.to_dict() if hasattr(config.rl, "to_dict") else dict(config.rl)
        if "sampling" in rl:
            raise ValueError("config.rl.sampling: the sampling config is top-level, config.sampling "
                             "(shared by eval and RL)")
        rl["sampling"] = Sampling.from_config(config.get("sampling") if hasattr(config, "get") else None)
        if isinstance(rl.get("operator"), dict) and not rl["operator"]:
            rl["operator"] = None
        unknown = set(rl) - set(cls.__dataclass_fields__)
        if unknown:
            raise ValueError(f"config.rl: unknown fields {sorted(unknown)}; allowed: {sorted(cls.__dataclass_fields__)}")
        return cls(**rl)


def verifier_budget(rl: RLConfig) -> dict:
    """Per-step verifier budget (upper bounds): rows, candidate tokens quoted in their prompts
    (2 per pairwise row, 1 per pointwise row, `verifier_candidate_max_tokens` each) and tokens
    they generate (`verifier_max_new_tokens` each). PointRL is budget-matched to PairRL when
    these agree (our reading of the issue's "same rows and tokens"; V1 §5 gives no budget)."""
    p_std = rl.prompts_per_step - int(round(rl.prompts_per_step * rl.operator_fraction))
    rows = p_std * verifier_rows_per_prompt(rl)
    slots = 2 if rl.verifier == "pairwise" else 1
    return {"rows": rows, "candidate_tokens": rows * slots * rl.verifier_candidate_max_tokens,
            "generated_tokens": rows * rl.verifier_max_new_tokens}


def batch_rows(rl: RLConfig) -> int:
    """Training rows per step: standard G per prompt, operator G refines (+ G x M drafts), verifier rows."""
    g = rl.samples_per_prompt
    p_op = int(round(rl.prompts_per_step * rl.operator_fraction))
    p_std = rl.prompts_per_step - p_op
    # the operator's trained rounds (OperatorSpec.trainable_rounds), M calls each per run
    per_run = (sum(rl.operator.round_sizes()[r] for r in rl.operator.trainable_rounds(rl.gradient_targets))
               if p_op else 0)
    return p_std * g + p_op * g * per_run + verifier_budget(rl)["rows"]


def initial_params(config, cfg, mesh):
    """The params a run started from, rebuilt from `config.model` as `trainer.fit` got them
    (`setup.build_model`; random init: the key `state.create_state` draws). Ours: a resumed
    run needs them for the frozen KL reference and frozen-base verifier candidates."""
    _, params, _ = build_model(config, mesh)
    if params is None:
        init_key = jax.random.split(jax.random.key(config.seed))[0]
        params = jax.jit(lambda: init_params(cfg, init_key), out_shardings=param_shardings(cfg, mesh))()
    return params


def rl_loss_fn(cfg, mesh, rl: RLConfig):
    """`(params, batch) -> (loss_sum, count, metrics)` for one rollout microbatch; a
    mixture-of-experts model with `router_aux_loss_coef` > 0 adds the router load-balancing
    term over the completion tokens (`router_aux`, metric `router_aux_loss`)."""
    def loss(params, b):
        hidden, aux_router = router_aux.hidden_states(cfg, params, b, mesh)
        logp, _, entropy = chunked_token_logprobs(cfg, params, hidden, b["targets"], mesh=mesh, with_entropy=True)
        w = b["weights"]
        total, count, metrics = policy_loss(logp, b["old_logp"], b["advantages"], w, kind=rl.loss,
                                            eps_low=rl.eps_low, eps_high=rl.eps_high, aggregation=rl.aggregation,
                                            cispo_lower_clip=rl.cispo_lower_clip)
        metrics = dict(metrics)
        metrics["entropy"] = aggregate(entropy, w)
        kl = k3_kl(logp, b["ref_logp"])
        metrics["kl"] = aggregate(jax.lax.stop_gradient(kl), w)
        if rl.kl_coef:
            total = total + rl.kl_coef * aggregate(kl, w, rl.aggregation)[0]
        if rl.aux_sft_coef:
            # scale: the update's global N / C when the batch carries it (losses.aux_sft_scale)
            aux, metrics["aux_sft_nll"] = aux_sft_term(logp, w, b["correct"], normaliser=rl.aux_sft_normaliser,
                                                       aggregation=rl.aggregation, scale=b.get("aux_sft_scale"))
            total = total + rl.aux_sft_coef * aux
        return router_aux.add_term(cfg, total, aux_router, b, count, metrics), count, metrics

    return router_aux.attach(loss, cfg, lambda mb: aggregate(jnp.zeros_like(mb["weights"]), mb["weights"],
                                                             rl.aggregation)[1])


CODE_REWARDS = ("fraction", "all_pass")


def eval_entries(entries) -> tuple:
    """`config.rl.eval_operators` as ((name, spec), ...): each entry is an eval config's operator
    entry (a dict with `type` and the spec's fields) with an optional `name`
    (default: the registered operator name), a spec, or a (name, spec) pair. Names must differ."""
    if isinstance(entries, (str, dict)) or not isinstance(entries, (tuple, list)) or not entries:
        raise ValueError(f"config.rl.eval_operators={entries!r}; must be None (Long-CoT, plus the RL operator "
                         "for operator RL) or a non-empty tuple of operator entries such as "
                         "({'type': 'long_cot', 'max_new_tokens': 64},)")
    out = []
    for i, entry in enumerate(entries):
        if hasattr(entry, "to_dict"):
            entry = entry.to_dict()
        if isinstance(entry, (tuple, list)) and len(entry) == 2 and isinstance(entry[1], OperatorSpec):
            name, spec = entry
        elif isinstance(entry, OperatorSpec):
            name, spec = operator_for(entry).name, entry
        elif isinstance(entry, dict):
            entry = dict(entry)
            name = entry.pop("name", None)
            try:
                spec = build_spec(entry)
            except (ValueError, TypeError) as e:
                raise ValueError(f"config.rl.eval_operators[{i}]: {e}") from None
            name = name or operator_for(spec).name
        else:
            raise ValueError(f"config.rl.eval_operators[{i}]={entry!r}; must be a dict of an operator's fields "
                             "with `type` (and an optional `name`)")
        if not isinstance(name, str) or not name or "/" in name:
            raise ValueError(f"config.rl.eval_operators[{i}]: name={name!r}; must be a non-empty string without '/'")
        out.append((name, spec))
    names = [n for n, _ in out]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"config.rl.eval_operators: entries share the name(s) {twice}; give each a distinct "
                         "`name` (its metrics are eval/<name>/...)")
    return tuple(out)


class TaskReward:
    """The generator reward of the run's task (`prd_jax.tasks`): `(completion, gold key) -> float`.

    `grades(texts, keys)` grades a batch at once through `task.grade_many` (math: math-verify,
    code: `rewards.code.evaluate_many`, bounded parallelism) and returns dicts with `reward` and
    `correct`; `correct` (all tests pass for code) labels the auxiliary-SFT rows and the
    verifier's candidates. The gold key is `task.gold_key(row)` (math: the answer; code: the
    task id), and `task.row_for_key` recovers the row to grade against from the rows given here."""

    def __init__(self, task, rows=()):
        self.task = task
        self.rows = {task.gold_key(r): r for r in rows}

    def grades(self, texts, keys) -> list:
        if len(texts) != len(keys):
            raise ValueError(f"{len(texts)} completions but {len(keys)} gold keys")
        rows = [self.task.row_for_key(k, self.rows) for k in keys]
        return [{"reward": float(g["reward"]), "correct": float(g["correct"])}
                for g in self.task.grade_many(rows, list(texts))]

    def many(self, texts, keys) -> list:
        return [g["reward"] for g in self.grades(texts, keys)]

    def __call__(self, text: str, key: str) -> float:
        return self.grades([text], [key])[0]["reward"]


def run_task(config, rl: "RLConfig"):
    """The task an RL config trains on (`setup.training_task`), its code reward mode applied."""
    task = training_task(config)
    if "reward_mode" in task.__dataclass_fields__:
        task = task.options(reward_mode=rl.code_reward)
    return task


class RLStage:
    """Data side of RL for `trainer.fit`: problems, rollouts, rewards, advantages.

    Each step's `prompts_per_step` problems are split: the first (1 - operator_fraction)
    get standard long-trace rollouts (G samples, prefill-once fan-out), the rest get G
    PDR-round rollouts each through the eval operator (`operator_rl.OperatorRollouts`).
    With `verifier` set, V1 verifier rows are built from the standard rollouts. All row
    groups are right-padded to one width and trained on in one update.
    """

    def __init__(self, config, cfg, tokenizer, mesh, *, load_data: bool = True):
        self.config, self.cfg, self.tok, self.mesh = config, cfg, tokenizer, mesh
        self.rl = rl = RLConfig.from_config(config)
        self.solve_template = P.template_set(rl.templates)["solve"]
        self.task = task = run_task(config, rl)
        self.problems, self.skipped = [], 0
        if not load_data:
            rows = []
        else:  # the task is the one way data enters (issue 35 §1)
            rows = rl_problems(config, task)
        for row in rows:
            text = task.problem_text(row)
            ids = self.prompt_ids(text)
            if len(ids) > rl.max_prompt_tokens or len(tokenizer.encode(text)) > rl.problem_tokens:
                self.skipped += 1
                continue
            self.problems.append((ids, task.gold_key(row), text))
        if load_data and len(self.problems) < rl.prompts_per_step:
            raise ValueError(f"{len(self.problems)} problems fit config.rl.max_prompt_tokens="
                             f"{rl.max_prompt_tokens} (prompt) and max_problem_tokens={rl.problem_tokens} "
                             f"(problem text) ({self.skipped} too long); need at least "
                             f"config.rl.prompts_per_step={rl.prompts_per_step}")
        self.num_operator = int(round(rl.prompts_per_step * rl.operator_fraction))
        self.num_standard = rl.prompts_per_step - self.num_operator
        if rl.verifier != "none" and self.num_standard == 0:
            raise ValueError("config.rl.verifier needs standard rollouts: operator_fraction must be < 1")
        accum = config.get("grad_accum_steps", default("grad_accum_steps"))
        if accum % rl.minibatches:
            raise ValueError(f"config.rl.minibatches={rl.minibatches} must divide config.grad_accum_steps={accum} "
                             "(a mini-batch is a whole number of microbatches)")
        self.epoch, self.offset = 0, 0
        self.ref_params = None
        self.initial_params = None  # the run's starting params (KL reference, frozen-base candidates)
        self.reward_fn = TaskReward(task, rows)  # (completion text, gold key) -> reward; .grades for a batch
        self._generate = jax.jit(self._rollout_fn, static_argnames=("scfg",))
        self.operator = (operator_rl.OperatorRollouts(rl, cfg, tokenizer, mesh, rl.operator, self.num_operator,
                                                      task=task, rows=rows)
                         if self.num_operator else None)
        self.verifier = (operator_rl.VerifierRollouts(rl, cfg, tokenizer, mesh, self.num_standard, task=task)
                         if rl.verifier != "none" else None)
        shapes = param_shapes(cfg)
        widths = [rl.max_prompt_tokens + rl.max_new_tokens - 1] if self.num_standard else []
        widths += self.operator.widths(shapes) if self.operator else []
        widths += [self.verifier.width(shapes)] if self.verifier else []
        self.width = max(widths)
        self.rows = (self.num_standard * rl.samples_per_prompt + (self.operator.rows if self.operator else 0)
                     + (self.verifier.rows if self.verifier else 0))
        assert self.rows == batch_rows(rl), (self.rows, batch_rows(rl))
        # held-out eval (`rl_eval`, every config.eval_every steps) and sample rollouts (`rollout_log`)
        self.held_out = (HeldOutEval(config, rl, cfg, tokenizer, mesh, task)
                         if load_data and config.get("eval_every") else None)
        self._rollout_records = {}  # trainer step -> picked rollout records

    # -- prompts and data position
    def prompt_ids(self, problem: str) -> list:
        text = P.render(self.solve_template, problem=problem)
        return self.tok.encode_chat([{"role": "user", "content": text}]) if hasattr(self.tok, "encode_chat") \
            else self.tok.encode(self.tok.apply_chat_template([{"role": "user", "content": text}]))

    def _take(self, k: int) -> list:
        out = []
        while len(out) < k:
            order = np.random.default_rng([self.config.seed, self.epoch]).permutation(len(self.problems))
            if self.offset >= len(order):
                self.epoch, self.offset = self.epoch + 1, 0
                continue
            out.append(self.problems[order[self.offset]])
            self.offset += 1
        return out

    def data_state(self) -> dict:
        return {"epoch": self.epoch, "offset": self.offset}

    def restore_data(self, state) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])

    # -- shapes and loss
    def abstract_batch(self):
        t = self.width
        shapes = {k: ((self.rows, t), jnp.float32) for k in ("weights", "old_logp", "ref_logp")}
        shapes.update({k: ((self.rows, t), jnp.int32) for k in ("inputs", "targets", "positions", "segment_ids")})
        shapes.update(advantages=((self.rows,), jnp.float32), correct=((self.rows,), jnp.float32))
        if self._aux_scaled:
            shapes["aux_sft_scale"] = ((self.rows,), jnp.float32)
        return {k: jax.ShapeDtypeStruct(s, d) for k, (s, d) in shapes.items()}

    @property
    def _aux_scaled(self) -> bool:
        """Whether batches carry `aux_sft_scale` (the correct-token-mean SFT term's normaliser)."""
        return bool(self.rl.aux_sft_coef) and self.rl.aux_sft_normaliser == "correct_token_mean"

    @property
    def updates_per_batch(self) -> int:
        return self.rl.updates_per_batch

    @property
    def minibatches(self) -> int:
        return self.rl.minibatches

    def _initial(self, state, step: int):
        """The starting params: the state's at step 0, else rebuilt from the config (resume)."""
        if self.initial_params is None:
            self.initial_params = (jax.tree.map(jnp.copy, state.params) if step == 0
                                   else initial_params(self.config, self.cfg, self.mesh))
        return self.initial_params

    def loss_fn(self):
        return rl_loss_fn(self.cfg, self.mesh, self.rl)

    # -- rollouts
    def _rollout_fn(self, params, prompts, lengths, keys, scfg):
        return ModelLM(params, self.cfg, self.tok.pad_id, self.mesh).generate(prompts, lengths, keys, scfg,
                                                                             name="rl.rollout")

    def _ref_logp(self, batch: dict) -> np.ndarray:
        if self.ref_params is None:
            return batch["old_logp"]
        if not hasattr(self, "_ref_forward"):
            self._ref_forward = jax.jit(lambda p, b: chunked_token_logprobs(
                self.cfg, p, forward(self.cfg, p, b["inputs"], b["positions"], segment_ids=b["segment_ids"],
                                     mesh=self.mesh, return_hidden=True)[0], b["targets"], mesh=self.mesh)[0])
        keys = ("inputs", "positions", "segment_ids", "targets")
        return np.asarray(to_host(self._ref_forward(self.ref_params, {k: batch[k] for k in keys})))

    def _advantages(self, rewards: np.ndarray) -> np.ndarray:
        return np.asarray(adv_lib.compute(self.rl.advantage, jnp.asarray(rewards)))

    def _standard(self, params, key, chosen, samples=None):
        rl, g = self.rl, self.rl.samples_per_prompt
        pw = rl.max_prompt_tokens
        prompts = np.full((len(chosen), pw), self.tok.pad_id, np.int32)
        lengths = np.array([len(c[0]) for c in chosen], np.int32)
        for i, c in enumerate(chosen):
            prompts[i, pw - len(c[0]):] = c[0]
        keys = jax.random.split(key, len(chosen))
        scfg = rl.sampler_config(rl.max_new_tokens, g, self.tok.stop_ids)
        t0 = time.perf_counter()
        out = to_host(self._generate(params, jnp.asarray(prompts), jnp.asarray(lengths), keys, scfg=scfg))
        t1 = time.perf_counter()
        rows = len(chosen) * g
        texts = answer_texts(self.tok, out.tokens[:rows], out.lengths[:rows])  # after any thinking block
        grades = self.reward_fn.grades(texts, [chosen[r // g][1] for r in range(rows)])
        reward = np.array([x["reward"] for x in grades], np.float32)
        correct = np.array([x["correct"] for x in grades], np.float32)
        if samples is not None:
            samples.add("standard", np.repeat(prompts, g, axis=0), np.repeat(lengths, g), out.tokens[:rows],
                        out.lengths[:rows], texts, reward, [chosen[r // g][1] for r in range(rows)])
        batch = sequences_to_batch(np.repeat(prompts, g, axis=0), np.repeat(lengths, g), out.tokens,
                                   out.lengths, out.logprobs)
        batch.update(advantages=self._advantages(reward.reshape(-1, g)).reshape(-1).astype(np.float32),
                     correct=correct)
        metrics = {"reward/standard": float(reward.mean()), "accuracy/standard": float(correct.mean()),
                   "length/standard": float(out.lengths.mean()), "time/rollout_s": t1 - t0,
                   "rollout/tokens_per_s": float(out.lengths.sum()) / max(t1 - t0, 1e-9)}
        return batch, metrics, (out.tokens, out.lengths - out.stopped.astype(np.int32), correct)

    def next_batch(self, state, step: int, rows=None):
        rl = self.rl
        if rl.kl_coef and self.ref_params is None:
            self.ref_params = self._initial(state, step)  # frozen reference: the starting policy
        chosen = self._take(rl.prompts_per_step)
        standard, operator = chosen[:self.num_standard], chosen[self.num_standard:]
        step_key = jax.random.fold_in(state.rng, step)
        groups, metrics, t0 = [], {}, time.perf_counter()
        every = rl.log_rollouts_every  # the trainer logs this batch's step as step + 1
        samples = StepSamples(self.tok) if every and (step + 1) % every == 0 else None
        if standard:
            batch, m, rollouts = self._standard(state.params, jax.random.fold_in(step_key, 0), standard, samples)
            groups.append(batch)
            metrics.update(m)
        if operator:
            t1 = time.perf_counter()
            op_groups, m = self.operator(state.params, jax.random.fold_in(step_key, 1),
                                         [(c[2], c[1]) for c in operator], self.reward_fn, self._advantages,
                                         samples=samples)
            groups += op_groups
            metrics.update(m, **{"time/operator_rollout_s": time.perf_counter() - t1})
        if self.verifier:
            rng = np.random.default_rng([self.config.seed, rl.seed_offset, step])
            candidates = rollouts
            if rl.verifier_samples == "frozen_base":  # non-co-evolving ablation: the base model's samples
                _, m, candidates = self._standard(self._initial(state, step), jax.random.fold_in(step_key, 3),
                                                  standard)
                metrics["time/frozen_base_rollout_s"] = m["time/rollout_s"]
            metrics["verifier/candidate_accuracy"] = float(np.mean(candidates[2]))
            batch, m = self.verifier(state.params, jax.random.fold_in(step_key, 2),
                                     [self.tok.encode(c[2]) for c in standard], *candidates, rng)
            groups.append(batch)
            metrics.update(m)
        batch = {k: np.concatenate([pad_group(g, self.width, self.tok.pad_id)[k] for g in groups])
                 for k in groups[0]}
        batch["ref_logp"] = self._ref_logp(batch)
        if rl.minibatches > 1:  # mini-batches are consecutive rows: mix generator and verifier rows
            order = np.random.default_rng([self.config.seed, rl.seed_offset, step, 1]).permutation(self.rows)
            batch = {k: v[order] for k, v in batch.items()}
        if self._aux_scaled:  # the global batch's per-row factor: exact over any microbatch split
            batch["aux_sft_scale"] = np.asarray(aux_sft_scale(batch["weights"], batch["correct"], rl.aggregation,
                                                              blocks=rl.minibatches), np.float32)
        if rows is not None:  # every host graded the (small) rollout; it feeds its own rows
            batch = {k: v[np.asarray(rows)] for k, v in batch.items()}
        trained = [k for k in ("standard", "operator") if f"reward/{k}" in metrics]
        metrics["reward/mean"] = float(np.mean([metrics[f"reward/{k}"] for k in trained]))
        metrics["accuracy"] = metrics["reward/mean"]
        metrics["response_length"] = float(np.mean([metrics[f"length/{k}"] for k in trained]))
        metrics["time/rollouts_total_s"] = time.perf_counter() - t0
        metrics["rollout/compilations"] = float(self._generate._cache_size())
        if samples is not None:
            self._rollout_records[step + 1] = samples.pick(rl.log_rollouts)
        return batch, metrics

    # -- held-out eval and sample rollouts (the trainer's hooks)
    def evaluate(self, params, step: int) -> dict:
        """Held-out accuracy and budgets per eval operator (`rl_eval.HeldOutEval`); {} when off."""
        return self.held_out(params) if self.held_out is not None else {}

    def rollout_records(self, step: int) -> list:
        """The rollouts picked at trainer step `step` for the text log (`rollout_log`); [] on other steps."""
        return self._rollout_records.pop(step, [])
