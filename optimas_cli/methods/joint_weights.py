"""What SysDPO and REINFORCE share: train every trainable node's LoRA adapter jointly from full-system
rollouts scored by the global metric, and keep the configuration that validates best.

Each iteration draws `batch_size` training inputs (cycling through the train split), rolls them out
through the whole system with the current adapters (every node execution counted in the ledger,
phase local_optimization), hands the rollouts and their global rewards to the method's `update`,
saves the updated adapters in a fresh folder and scores that configuration on the validation split
(re-running only the trainable nodes and what follows them). Training goes on from the updated
adapters whatever the validation says (both methods are on-policy trainers, not a gated search);
the configuration returned is the best validated one, the unoptimized one included, as every
method here is selected on validation. It runs budget.iterations iterations; in a matched-cost run
(budget.max_runs_from) it iterates until the run cap, as the loop methods, DSPy and TextGrad do, so
the baseline spends what the reference spent.

Caps are exact: the opening validation pass and each iteration's validation pass (known costs) are
not started when they would cross a cap; the rollouts and the update (their cost is not known in
advance) run inside system/caps.stops_mid_phase, so a run that crosses its cap there stops after
that batch, and the iteration in progress is dropped: what is returned is the best configuration
validated within the cap.

Every iteration is checkpointed (`<method>_state.json`: iterations done, the current and the best
configuration, history; the AdamW state beside the iteration's adapters; the run's accounts), so a
killed run resumes at the next iteration with the adapters and optimizer moments it had, instead of
training everything again.
"""
from __future__ import annotations

import itertools
import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass

from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.methods.base import MethodOutcome
from optimas_cli.methods.cost import WEIGHTS_SAMPLE, Estimate, PhaseCount, full_runs, rerun_counts, scaled
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.optim.node_policies import NodePolicies, NodeSegments, Segment, shared_base_model
from optimas_cli.optim.rollouts import Rollout
from optimas_cli.optim.weights import CONTRACT
from optimas_cli.system import ConfigKind, Pipeline, RunContext, Splits, SystemConfig
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import (
    BudgetExhausted,
    cap_reached,
    check_caps,
    end_as_planned,
    ends_at_run_cap,
    iterations_in_words,
    stops_mid_phase,
)
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.run_folder import RunFolder, adapters_found_in, relative_inside, uncounted

log = logging.getLogger("optimas")
OPTIMIZER_FILE = "optimizer.pt"  # the AdamW state after an iteration's update, beside its adapters


def state_file(label: str) -> str:
    """The checkpoint a killed run resumes from: iterations done, current and best configuration, history."""
    return f"{label}_state.json"

# update(policies, rollouts, rewards, iteration) -> a log dict; "updated": False when nothing was trained
Update = Callable[[NodePolicies, list[Rollout], list[float], int], dict]
# sample(config, examples, ctx, iteration) -> rollouts with the configuration's adapters
Sample = Callable[[SystemConfig, list[dict], RunContext, int], list[Rollout]]


@dataclass
class JointSettings:
    iterations: int
    batch_size: int  # training inputs rolled out per iteration
    lora: dict
    until_cap: bool = False  # a matched-cost run: the run cap, not `iterations`, ends the training
    learning_rate: float = 1e-4  # the AdamW kept over all adapters for the whole training

    @classmethod
    def from_budget(cls, budget: Budget, lora: dict, learning_rate: float = 1e-4) -> JointSettings:
        return cls(budget.iterations, budget.search_size, lora, until_cap=bool(budget.max_runs_from),
                   learning_rate=float(learning_rate))


def trainable_nodes(pipeline: Pipeline, method: str) -> list[str]:
    """The weights-kind components, in execution order (Method.fit refused a pipeline without one); each must
    follow the weights contract."""
    system = pipeline.system
    nodes = [n for n in system.order if system.components[n].kind is ConfigKind.WEIGHTS]
    for name in nodes:
        missing = [m for m in (*CONTRACT, "base_model_path") if not callable(getattr(system.components[name], m, None))]
        if missing:
            raise UserError(f"weights component {name!r} lacks {', '.join(missing)}",
                            "implement the contract in optimas_cli/optim/weights.py")
    return nodes


def joint_estimate(pipeline: Pipeline, splits: Splits, budget: Budget, rollouts: Callable[[PhaseCount, int], None],
                   trained_per_iteration: float) -> Estimate:
    """optimize_jointly's work: the opening validation pass, then per iteration the rollouts of a training batch
    (`rollouts(phase, inputs)` counts them), the update on `trained_per_iteration` completions, and the
    trainable roots and what follows them on validation. budget.iterations iterations (a matched-cost run
    iterates until its cap: flows/plan.py plans that from the reference's spend)."""
    system, est, config = pipeline.system, Estimate(), pipeline.system.default_config()
    nodes = [n for n in system.order if system.components[n].kind is ConfigKind.WEIGHTS]
    roots = [n for n in nodes if not any(n in system.downstream(m) for m in nodes if m != n)]
    batch, n_val, opt = min(budget.search_size, len(splits.train)), len(splits.val), est.phases["local_optimization"]
    est.assume("every iteration trains the adapters and validates them")
    full_runs(system, n_val, est.phases["validation"])
    scaled(lambda p: rollouts(p, batch), budget.iterations, opt)
    opt.work[WEIGHTS_SAMPLE] += budget.iterations * trained_per_iteration
    scaled(lambda p: rerun_counts(system, roots, n_val, config, p), budget.iterations, est.phases["validation"])
    return est


def node_segments(policies: NodePolicies, rollout: Rollout) -> NodeSegments:
    """A rollout's trainable-node outputs as (rendered prompt, completion, ended) per node."""
    return {node: Segment(policies.render(messages), text, ended)
            for node, (messages, text, ended) in rollout.segments.items()}


def optimize_jointly(pipeline: Pipeline, splits: Splits, ctx: RunContext, folder: RunFolder, settings: JointSettings,
                     label: str, sample: Sample, update: Update, console: Console) -> MethodOutcome:
    system = pipeline.system
    nodes = trainable_nodes(pipeline, label)
    base = shared_base_model([system.components[n] for n in nodes])
    if not splits.train:
        raise UserError(f"{label} needs training inputs, but the train split is empty", "raise budget.train_size")
    config = system.default_config()
    vctx, octx = ctx.replace(phase="validation"), ctx.replace(phase="local_optimization")
    # Validation re-runs the trainable nodes that no other trainable node feeds, and what follows them.
    roots = [n for n in nodes if not any(n in system.downstream(m) for m in nodes if m != n)]
    state = folder.read_json(state_file(label))
    if not state and cap_reached(ctx, {"max_runs": system.rerun_cost(None, len(splits.val), config)}):
        end_as_planned(settings.until_cap, ctx.caps, label)  # stopped before the opening validation pass
        return MethodOutcome(config=config, history=[], extras={label: {"trainable_nodes": nodes, "base_model": base}})
    # The initial configuration's validation trajectories feed every later validation; a resumed run
    # rebuilds them uncounted (the checkpoint's accounts hold them).
    with uncounted(ctx) if state else nullcontext(), ctx.ledger.timed("validation"):
        val_trajs = system.run(splits.val, config, vctx)
        best_val = float(sum(rewards(pipeline, val_trajs)))
    best, history, start = config, [], 0
    if state:
        start, best_val = state["iteration"], state["best_val"]
        history = [HistoryEntry.from_dict(e) for e in state["history"]]
        config = SystemConfig(adapters_found_in(state["config"], folder.path))  # the folder may have moved
        best = SystemConfig(adapters_found_in(state["best"], folder.path))
        log.info("resuming %s after iteration %d", label, start)
    policies = NodePolicies(base, {n: config[n] for n in nodes}, settings.lora, learning_rate=settings.learning_rate)
    if state and state["optimizer"]:
        policies.load_optimizer(folder.path / state["optimizer"])
    optimizer_file = state["optimizer"] if state else None
    until_cap = ends_at_run_cap(settings.until_cap, ctx.caps)
    console.print(f"[bold]{label}[/] · {iterations_in_words(settings.until_cap, settings.iterations, ctx.caps)}"
                  f" · nodes {', '.join(nodes)} · val {best_val:.3f}" + (f" · resumed after iteration {start}" if state else ""))
    for t in itertools.count(start) if until_cap else range(start, settings.iterations):
        if cap_reached(ctx):  # a safe point: the last iteration is checkpointed
            break
        runs_before = ctx.ledger.equivalent_runs()
        first = (t * settings.batch_size) % len(splits.train)
        examples = [splits.train[(first + i) % len(splits.train)] for i in range(min(settings.batch_size, len(splits.train)))]
        entry = HistoryEntry(iteration=t + 1, component=list(nodes), kind="weights", val_before=best_val,
                             val_after=best_val, accepted=False, runs_so_far=0.0, n=len(splits.val))
        try:
            with stops_mid_phase(ctx):
                with ctx.ledger.timed("local_optimization"):
                    rollouts = sample(config, examples, octx, t)
                    scores = rewards(pipeline, [r.trajectory for r in rollouts])
                    details = update(policies, rollouts, scores, t)
                entry.details = {"rollouts": len(rollouts), "mean_reward": round(sum(scores) / len(scores), 5), **details}
                if details.get("updated"):
                    adapters = f"adapters/iteration-{t + 1}"
                    for node, adapter in policies.save(folder.file(adapters)).items():
                        config = config.replace(node, adapter)
                    optimizer_file = f"{adapters}/{OPTIMIZER_FILE}"
                    policies.save_optimizer(folder.path / optimizer_file)
                    check_caps(ctx, {"max_runs": system.rerun_cost(roots, len(splits.val), config)})  # known cost
                    with ctx.ledger.timed("validation"), ctx.ledger.provisional() as validation_pass:
                        trajs = system.run_changed(roots, val_trajs, config, vctx)
                        candidate = float(sum(rewards(pipeline, trajs)))
                    entry.val_candidate, entry.proposal = candidate, {n: config[n] for n in nodes}
                    if candidate > best_val:  # the same strict gate as Algorithm 1
                        validation_pass.keep()  # the paper charges accepted updates' validation only
                        best, best_val = config, candidate
                        entry.accepted, entry.val_after = True, candidate
                else:
                    entry.note = details.get("note", "nothing was trained")
        except BudgetExhausted as stop:
            # In the returned history with what it spent; not checkpointed: a resume with a raised cap redoes it.
            entry.note = f"stopped at the cap, nothing of this iteration kept: {stop}"
            entry.runs_so_far = round(ctx.ledger.equivalent_runs(), 2)
            history.append(entry)
            log.info("%s iteration %d: %s", label, t + 1, entry.note)
            break
        entry.runs_so_far = round(ctx.ledger.equivalent_runs(), 2)
        history.append(entry)
        folder.write_json(f"{label}_history.json", [e.to_dict() for e in history])
        best.save(folder.file("best_config.json"))
        folder.checkpoint(ctx, {state_file(label): {
            "iteration": t + 1, "config": config.to_dict(), "best": best.to_dict(), "best_val": best_val,
            "optimizer": optimizer_file, "history": [e.to_dict() for e in history]}})
        console.print(f"  iter {t + 1:>3} · mean reward {entry.details['mean_reward']:.3f} · val {entry.val_before:.3f}"
                      f" → {entry.val_candidate if entry.val_candidate is not None else '-'}"
                      f" {'accepted' if entry.accepted else 'kept'} · runs {entry.runs_so_far:.1f}")
        logged = {k: v for k, v in entry.to_dict().items() if k != "details"} | {"mean_reward": entry.details["mean_reward"]}
        log.info("%s iteration %d: %s", label, t + 1, relative_inside(logged, folder.path))
        if until_cap and ctx.ledger.equivalent_runs() <= runs_before:  # nothing spent: the cap would never come
            log.warning("%s iteration %d spent no system run; stopping before the cap", label, t + 1)
            break
    end_as_planned(settings.until_cap, ctx.caps, label)
    return MethodOutcome(config=best, history=history,
                         extras={label: {"trainable_nodes": nodes, "base_model": base, "best_validation": best_val}})
