"""RL for verifiable rewards: rollout -> reward -> advantage -> update (PDR paper §3.3, §4.2).

One trainer step is one rollout batch: P prompts x G samples from the in-graph sampler
(prefill-once fan-out), recording the sampling policy's logprobs; rewards from
`prd_jax.rewards` (math grading on the host); group advantages (GRPO / Dr.GRPO / RLOO);
then optimizer updates on that batch inside one compiled step: `rl.updates_per_batch` epochs
over it, each split into `rl.minibatches` mini-batches with one update apiece
(`minibatch_updates`), so from the second update on the ratio to the sampling policy moves
and the clip bounds act (PPO, arXiv 1707.06347, §5, Alg. 1: K epochs over minibatches).
With `rl.off_policy_steps=1` the batch's rollouts were sampled one step earlier, with the
previous step's params (`async_rollouts`: one-step-asynchronous RL). With `rl.decoupled` (stale
rollouts, or a float8 decode cache) each batch also carries `prox_logp`, the rollouts'
log-probabilities under the step's params, and the loss is the decoupled one.

The loss (per completion token, `losses.policy_loss`): PPO-clip with asymmetric
eps_low/eps_high or CISPO, aggregated token-mean, sequence-mean-token-mean or with Dr.GRPO's
constant normaliser (`losses.aggregate`); plus
`kl_coef` x k3 KL to the frozen initial policy and `aux_sft_coef` x NLL on the tokens of
correct rollouts (an auxiliary SFT term, alpha = 0.1: ours, not stated in ../shared/papers/). The KL term uses the
policy loss's denominator; the SFT term's normaliser is `rl.aux_sft_normaliser` (RLConfig),
exact under accumulation given the batch's `aux_sft_scale`.
"""

from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

from prd_jax import prompts as P
from prd_jax.host import to_host
from prd_jax.model.decoder import init_params, param_shapes
from prd_jax.model.weights import param_shardings
from prd_jax.operators.lm import ModelLM
from prd_jax.operators.runner import answer_texts
from prd_jax.train import advantages as adv_lib, async_rollouts, operator_rl, router_aux
from prd_jax.train.chunked_xent import chunked_token_logprobs
from prd_jax.train.config import TrainConfig
from prd_jax.train.rl_config import RLConfig, eval_entries
from prd_jax.train.rl_eval import HeldOutEval
from prd_jax.train.rollout_mesh import RolloutLayout, rollout_mesh
from prd_jax.train.rollout_log import StepSamples
from prd_jax.train.losses import aggregate, aux_sft_scale, aux_sft_term, k3_kl, policy_loss
from prd_jax.train.policy_logp import PolicyLogp
from prd_jax.train.rl_rows import pad_group, sequences_to_batch, verifier_rows_per_prompt
from prd_jax.train.setup import build_model, rl_problems, training_task

__all__ = ["RLConfig", "RLStage", "TaskReward", "batch_rows", "eval_entries", "initial_params", "rl_loss_fn",
           "run_task", "sequences_to_batch", "verifier_budget"]


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
    tc = TrainConfig.from_config(config)
    _, params, _ = build_model(tc, mesh)
    if params is None:
        init_key = jax.random.split(jax.random.key(tc.seed))[0]
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
                                            cispo_lower_clip=rl.cispo_lower_clip, prox_logp=b.get("prox_logp"),
                                            behaviour_weight_cap=rl.off_policy_weight_cap)
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

    Rollouts sample on `config.rollout`'s mesh (`rollout_mesh`): each step reshards the
    policy's params into its layout once (`RolloutLayout.put`) before any sampling; `devices`
    are the devices the split rule divides (default `jax.devices()`; `prd-jax compile` passes
    the target's).
    """

    def __init__(self, config, cfg, tokenizer, mesh, *, load_data: bool = True, devices=None):
        self.config = config = TrainConfig.from_config(config)
        self.cfg, self.tok, self.mesh = cfg, tokenizer, mesh
        self.rollout_mesh = rmesh = rollout_mesh(config, mesh, devices)
        self.layout = RolloutLayout(cfg, mesh, rmesh)
        self._rollout_copy = None  # (step, params in the rollout layout) while that step's batch is built
        if config.rl is None:
            raise ValueError(f"config.stage={config.stage!r}: RLStage needs config.stage='rl' and config.rl")
        self.rl = rl = config.rl
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
        self.epoch, self.offset = 0, 0
        self.ref_params = None
        self._policy_logp = None  # the proximal / reference forward, built on first use
        self.initial_params = None  # the run's starting params (KL reference, frozen-base candidates)
        self._initial_rollout = None  # the same in the rollout layout (frozen-base candidates)
        self.reward_fn = TaskReward(task, rows)  # (completion text, gold key) -> reward; .grades for a batch
        self._generate = jax.jit(self._rollout_fn, static_argnames=("scfg",))
        self.operator = (operator_rl.OperatorRollouts(rl, cfg, tokenizer, rmesh, rl.operator, self.num_operator,
                                                      task=task, rows=rows)
                         if self.num_operator else None)
        self.verifier = (operator_rl.VerifierRollouts(rl, cfg, tokenizer, rmesh, self.num_standard, task=task)
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
        self.held_out = (HeldOutEval(config, rl, cfg, tokenizer, rmesh, task)
                         if load_data and config.eval_every else None)
        self._rollout_records = {}  # trainer step -> picked rollout records
        # rl.off_policy_steps=1: step t+1's rollouts launched with the step-t weights (`async_rollouts`)
        self.async_rollouts = async_rollouts.AsyncRollouts(self) if rl.off_policy_steps else None

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
        state = {"epoch": self.epoch, "offset": self.offset}
        return self.async_rollouts.data_state(state) if self.async_rollouts else state

    def restore_data(self, state) -> None:
        self.epoch, self.offset = int(state["epoch"]), int(state["offset"])
        if self.async_rollouts or "in_flight" in state:  # the in-flight rollouts' prompts are retaken
            async_rollouts.restore(self, state)

    # -- shapes and loss
    def abstract_batch(self):
        t = self.width
        shapes = {k: ((self.rows, t), jnp.float32) for k in ("weights", "old_logp", "ref_logp")
                  + (("prox_logp",) if self.rl.decoupled else ())}
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
        return ModelLM(params, self.cfg, self.tok.pad_id, self.rollout_mesh).generate(prompts, lengths, keys, scfg,
                                                                                     name="rl.rollout")

    def _ref_logp(self, batch: dict) -> np.ndarray:
        if self.ref_params is None:
            return batch["old_logp"]
        return self.policy_logp(self.ref_params, batch)

    def policy_logp(self, params, batch: dict) -> np.ndarray:
        """Per-token logprobs `[B, T]` of the host batch's targets under `params`: one forward pass
        in the update's microbatches (`policy_logp.PolicyLogp`)."""
        if self._policy_logp is None:
            self._policy_logp = PolicyLogp(self.cfg, self.mesh, self.rows, self.width, self.config.grad_accum_steps)
        return self._policy_logp(params, batch)

    def _advantages(self, rewards: np.ndarray) -> np.ndarray:
        return np.asarray(adv_lib.compute(self.rl.advantage, jnp.asarray(rewards)))

    def _prompt_block(self, chosen):
        """Left-padded standard rollout prompts `[P, max_prompt_tokens]` and their lengths `[P]`."""
        pw = self.rl.max_prompt_tokens
        prompts = np.full((len(chosen), pw), self.tok.pad_id, np.int32)
        lengths = np.array([len(c[0]) for c in chosen], np.int32)
        for i, c in enumerate(chosen):
            prompts[i, pw - len(c[0]):] = c[0]
        return prompts, lengths

    def launch_standard(self, params, key, chosen):
        """Dispatch the standard rollouts of `chosen` (device arrays; `to_host` waits for them)."""
        rl = self.rl
        prompts, lengths = self._prompt_block(chosen)
        scfg = rl.sampler_config(rl.max_new_tokens, rl.samples_per_prompt, self.tok.stop_ids)
        return self._generate(params, jnp.asarray(prompts), jnp.asarray(lengths), jax.random.split(key, len(chosen)),
                              scfg=scfg)

    def _standard(self, params, key, chosen, samples=None, out=None):
        """Standard rollouts of `chosen` (or `out`, ones `launch_standard` dispatched), graded."""
        g = self.rl.samples_per_prompt
        prompts, lengths = self._prompt_block(chosen)
        t0 = time.perf_counter()
        out = to_host(self.launch_standard(params, key, chosen) if out is None else out)
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
        try:
            if self.async_rollouts:
                return self.async_rollouts.next_batch(state, step, rows)
            return self.batch(state, step, rows)
        finally:
            self._rollout_copy = None  # the rollout-layout params are not held through the update

    def rollout_params(self, state, step: int):
        """`state.params` (step `step`'s) in the rollout layout: resharded once per step, shared by
        the step's own rollouts and, off-policy, the next step's launch (`rollout_mesh`)."""
        if self._rollout_copy is None or self._rollout_copy[0] != step:
            self._rollout_copy = (step, self.layout.put(state.params))
        return self._rollout_copy[1]

    def batch(self, state, step: int, rows=None, launched=None):
        """Step `step`'s batch: its prompts, rollouts with `state.params`, rewards, advantages; or the
        prompts and rollouts of `launched` (an `async_rollouts.Launched`, sampled earlier)."""
        rl = self.rl
        if rl.kl_coef and self.ref_params is None:
            self.ref_params = self._initial(state, step)  # frozen reference: the starting policy
        chosen = launched.chosen if launched is not None else self._take(rl.prompts_per_step)
        # the launched device outputs, as keyword `out` of the call that grades them
        outs = {k: {"out": v} for k, v in launched.outputs.items()} if launched is not None else {}
        standard, operator = chosen[:self.num_standard], chosen[self.num_standard:]
        step_key = self.layout.replicate(jax.random.fold_in(state.rng, step))
        groups, metrics, t0 = [], {}, time.perf_counter()
        params = self.rollout_params(state, step)  # the rollout layout, once per step (rollout_mesh)
        every = rl.log_rollouts_every  # the trainer logs this batch's step as step + 1
        samples = StepSamples(self.tok) if every and (step + 1) % every == 0 else None
        if standard:
            batch, m, rollouts = self._standard(params, jax.random.fold_in(step_key, 0), standard, samples,
                                                **outs.get("standard", {}))
            groups.append(batch)
            metrics.update(m)
        if operator:
            t1 = time.perf_counter()
            op_groups, m = self.operator(params, jax.random.fold_in(step_key, 1),
                                         [(c[2], c[1]) for c in operator], self.reward_fn, self._advantages,
                                         samples=samples, **outs.get("operator", {}))
            groups += op_groups
            metrics.update(m, **{"time/operator_rollout_s": time.perf_counter() - t1})
        if self.verifier:
            rng = np.random.default_rng([self.config.seed, rl.seed_offset, step])
            candidates = rollouts
            if rl.verifier_samples == "frozen_base":  # non-co-evolving ablation: the base model's samples
                if self._initial_rollout is None:
                    self._initial_rollout = self.layout.put(self._initial(state, step))
                _, m, candidates = self._standard(self._initial_rollout, jax.random.fold_in(step_key, 3), standard)
                metrics["time/frozen_base_rollout_s"] = m["time/rollout_s"]
            metrics["verifier/candidate_accuracy"] = float(np.mean(candidates[2]))
            batch, m = self.verifier(params, jax.random.fold_in(step_key, 2),
                                     [self.tok.encode(c[2]) for c in standard], *candidates, rng)
            groups.append(batch)
            metrics.update(m)
        batch = {k: np.concatenate([pad_group(g, self.width, self.tok.pad_id)[k] for g in groups])
                 for k in groups[0]}
        batch["ref_logp"] = self._ref_logp(batch)
        if rl.decoupled:  # the proximal policy: this step's params, on the training mesh
            t1 = time.perf_counter()
            batch["prox_logp"] = self.policy_logp(state.params, batch)
            metrics["time/prox_logp_s"] = time.perf_counter() - t1
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
        return self.held_out(self.layout.put(params)) if self.held_out is not None else {}

    def rollout_records(self, step: int) -> list:
        """The rollouts picked at trainer step `step` for the text log (`rollout_log`); [] on other steps."""
        return self._rollout_records.pop(step, [])
