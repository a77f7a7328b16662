"""TextGrad baseline: the real `textgrad` package (0.1.8), run offline through the run's LM layer.

Each step, on a minibatch of training examples (TextGrad's prompt-optimization recipe):
1. Forward: run the compound system (our components, ledger phase "local_optimization") and build
   TextGrad's computation graph from the trajectories: one `tg.Variable` per PROMPT component's
   instruction (the parameters), one per prompt component's output, whose predecessors are its
   instruction and the outputs of the nearest upstream prompt components. Their backward is
   TextGrad's own LLM-call backward (`LLMCall._backward_through_llm_base/_chain`), with the
   instruction as the LM's system prompt and the component's inputs as its input.
2. Loss: `tg.TextLoss` — an LM critique of the final output, told the expected result (the
   example's gold fields) and the metric value it got. `tg.sum` of the batch's losses.
3. Backward: `loss.backward(engine)` — LM feedback on every output, then on every instruction.
4. Update: `tg.TGD` — an LM rewrite of each instruction from its feedback, read between
   <IMPROVED_VARIABLE> tags. A reply without the tags makes TGD raise; that is counted as a
   parse failure and the instruction is kept.
5. Validation check (TextGrad's `run_validation_revert`): the changed components and what follows
   them are re-run on the validation split; the update is reverted only if the validation score
   drops (ties are kept, as in TextGrad).

Candidate space: TGD writes each new instruction from the LM's feedback, one rewrite of the current
instruction per step; its API takes no candidate list, so the pipeline's instruction pool
(optim/prompt_pool.py) has no place in it. Its proposer is `lm`, and Table 2 compares it with
Optimas runs whose proposer is `lm` too (report/targets.py). Budget caps are checked before each
step, and every step is checkpointed (`textgrad_state.json`: steps done, the current instructions
(whose validation a resumed run rebuilds), the minibatch order and generator, history; the run's
accounts), so a killed run resumes at the next step instead of replaying the finished ones (a
replay's update prompts miss the LM cache, as TextGrad orders their feedback by set iteration). In a
matched-cost run (budget.max_runs_from), `steps: null` means as many steps as the run cap
pays for (each step runs the system on its minibatch: at most cap / batch_size steps), the cap
stopping the search where it is spent.

TextGrad's LM calls go through `RunLMEngine` (a `tg.EngineLM`) to the run's LM client, tagged
"textgrad.loss", "textgrad.backward" and "textgrad.optimizer" in the usage ledger.

TextGrad itself makes one LM call at a time: a step of B examples is B critiques, then a backward
walk of ~B x (prompt components) feedback calls, each waiting for the last (~35 s apiece for the
embedded model on 2 cores: the first step had not finished after 18 minutes). Here the calls that
do not depend on each other run concurrently — the batch's critiques, the backward calls of one
depth of the graph (`backward_by_depth`: every example's call at that depth), the TGD updates of
the components — and each engine gathers concurrent calls into one LM-layer batch, so the local
model generates them together and an API model gets them in parallel. TextGrad writes
a JSON log on import; it goes under $TEXTGRAD_LOG_DIR (default: <optimas cache>/textgrad-logs).
TextGrad keeps gradients in sets, so the order of the feedback in an update prompt may differ
between runs.
"""
from __future__ import annotations

import logging
import math
import statistics
import threading
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from contextlib import nullcontext

import numpy as np
import textgrad as tg
from textgrad.autograd.function import BackwardContext
from textgrad.autograd.llm_ops import LLMCall
from textgrad.variable import _check_and_reduce_gradients

from optimas_cli.errors import UserError
from optimas_cli.lm.local.batching import DynamicBatcher
from optimas_cli.lm.types import LMRequest
from optimas_cli.lrf.text import format_value
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, full_runs, rerun_counts, scaled
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.progress import track
from optimas_cli.system import ConfigKind, Pipeline, RunContext, SystemConfig, Trajectory
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import cap_reached, end_as_planned
from optimas_cli.system.evaluate import rewards
from optimas_cli.system.run_folder import uncounted

log = logging.getLogger("optimas")
STATE_FILE = "textgrad_state.json"  # the checkpoint a killed run resumes from

FIELD_CHARS = 600  # each rendered field is cut to this many characters in TextGrad's prompts
GATHER_SECONDS = 0.05  # how long an engine waits for more concurrent calls before sending a batch
MAX_THREADS = 32  # concurrent TextGrad calls (critiques, backward calls of one depth, updates)

LOSS_INSTRUCTION = (
    "You evaluate the final output of a multi-step AI pipeline on one task example. "
    "The expected result is:\n{gold}\n"
    "The output scored {metric} = {score:.3f} (1.0 is best). "
    "Say concisely what is wrong with the output and what would make it score higher. Do not rewrite the output."
)


class RunLMEngine(tg.EngineLM):
    """TextGrad's engine interface backed by the run's LM client (one tag per role).

    Calls made at once from several threads are gathered into one LM-layer request list; `expect(n)`
    tells the engine how many are coming, so the batch waits for stragglers instead of leaving early.
    """

    def __init__(self, ctx: RunContext, component: str, max_tokens: int = 512, temperature: float = 0.0):
        if ctx.lm is None:
            raise UserError("textgrad needs an LM, but this run has none configured", "set lm=local (or another)")
        self.ctx, self.component = ctx, component
        self.model_string = component
        self.max_tokens, self.temperature = int(max_tokens), float(temperature)
        self.calls = 0
        self.expected = 1
        self._lock = threading.Lock()
        self.batcher = DynamicBatcher(self._complete, max_batch_size=MAX_THREADS, gather_seconds=GATHER_SECONDS,
                                      name=f"textgrad-{component}")

    def generate(self, prompt, system_prompt=None, **kwargs):
        messages = [{"role": "system", "content": system_prompt or self.system_prompt},
                    {"role": "user", "content": str(prompt)}]
        return self.batcher.submit(None, [messages], expected=self.expected)[0]

    def expect(self, n: int) -> RunLMEngine:
        self.expected = max(1, min(int(n), MAX_THREADS))
        return self

    def _complete(self, _key, chats: list[list[dict]]) -> list[str]:
        with self._lock:
            first = self.calls
            self.calls += len(chats)
        requests = [LMRequest(messages=m, temperature=self.temperature, max_tokens=self.max_tokens, seed=self.ctx.seed,
                              sample_index=self.ctx.sample_index + first + i) for i, m in enumerate(chats)]
        return [r.texts[0] for r in self.ctx.lm.complete(requests, component=self.component, phase=self.ctx.phase)]

    def __call__(self, prompt, **kwargs):
        return self.generate(prompt, **kwargs)


def _render(record: dict) -> str:
    lines = []
    for key, value in record.items():
        text = format_value(value)
        lines.append(f"{key}: {text if len(text) <= FIELD_CHARS else text[:FIELD_CHARS] + ' ...'}")
    return "\n".join(lines)


def _llm_backward(response, prompt: str, system_prompt: str, backward_engine) -> None:
    """TextGrad's LLMCall backward, for an LM call made by one of our components."""
    children = list(response.predecessors)
    if response.get_gradient_text() == "":
        LLMCall._backward_through_llm_base(children, response, prompt, system_prompt, backward_engine)
    else:
        LLMCall._backward_through_llm_chain(children, response, prompt, system_prompt, backward_engine)


def _pass_through_backward(response, backward_engine) -> None:
    """Feedback on an output made by non-LM steps goes unchanged to the LM outputs it was made from."""
    feedback = response.get_gradient_text()
    for child in response.predecessors:
        if child.requires_grad and feedback:
            child.gradients.add(tg.Variable(
                f"Feedback on {response.get_role_description()}, which was computed from this variable: {feedback}",
                role_description=f"feedback to {child.get_role_description()}"))


def backward_by_depth(root, engine, pool: ThreadPoolExecutor) -> None:
    """TextGrad's `Variable.backward`, with the variables at one depth below the root run concurrently.

    TextGrad walks the graph in reverse topological order, one variable (one LM call) at a time. A
    variable's feedback is complete once every variable that consumes it has run; those all sit at
    a smaller depth (the longest path from the root), so the variables of one depth are independent.
    """
    topo: list = []
    visited: set = set()
    stack = [(root, False)]
    while stack:  # iterative post-order (TextGrad's recursion, without its depth limit)
        node, expanded = stack.pop()
        if expanded:
            topo.append(node)
        elif node not in visited:
            visited.add(node)
            stack.append((node, True))
            stack.extend((p, False) for p in node.predecessors if p not in visited)
    depth = {root: 0}
    for node in reversed(topo):  # consumers come before what they consume
        for predecessor in node.predecessors:
            depth[predecessor] = max(depth.get(predecessor, 0), depth[node] + 1)
    levels: dict[int, list] = defaultdict(list)
    for node in reversed(topo):
        levels[depth[node]].append(node)
    root.gradients = set()
    for level in sorted(levels):
        active = [v for v in levels[level] if v.requires_grad]
        for v in active:
            v.gradients = _check_and_reduce_gradients(v, engine)
        calls = [v for v in active if v.get_grad_fn()]
        if hasattr(engine, "expect"):
            engine.expect(len(calls))
        list(pool.map(lambda v: v.grad_fn(backward_engine=engine), calls))


class TextGradGraph:
    """Builds TextGrad's graph over the prompt components of one trajectory."""

    def __init__(self, pipeline: Pipeline, params: dict):
        self.pipeline, self.system, self.params = pipeline, pipeline.system, params

    def _prompt_ancestors(self, name: str, made: dict) -> list:
        found, stack, seen = [], list(self.system.parents(name)), set()
        while stack:
            parent = stack.pop()
            if parent in seen:
                continue
            seen.add(parent)
            if parent in made:
                found.append(made[parent])
            else:
                stack.extend(self.system.parents(parent))
        return found

    def final_output(self, traj: Trajectory):
        made = {}
        for name in self.system.order:
            step = traj.steps.get(name)
            if name not in self.params or not step or step["skipped"]:
                continue
            comp = self.system.components[name]
            inputs = tg.Variable(_render(step["inputs"]), requires_grad=False, role_description=f"inputs of {name}")
            out = tg.Variable(_render(step["outputs"]) or "(empty)",
                              predecessors=[self.params[name], *self._prompt_ancestors(name, made), inputs],
                              role_description=f"output of the pipeline step '{name}' ({comp.description})")
            out.set_grad_fn(BackwardContext(backward_fn=_llm_backward, response=out, prompt=inputs.value,
                                            system_prompt=self.params[name].value))
            made[name] = out
        producers = {self.system.producer.get(f) for f in self.system.outputs}
        if len(producers) == 1 and next(iter(producers)) in made:
            return made[next(iter(producers))]
        final_text = _render(traj.final(self.system.outputs))
        sources = [made[n] for n in made if n in producers] or list(made.values())
        final = tg.Variable(final_text or "(empty)", predecessors=sources, role_description="final output of the pipeline")
        final.set_grad_fn(BackwardContext(backward_fn=_pass_through_backward, response=final))
        return final

    def loss(self, traj: Trajectory, score: float, engine):
        gold = {k: v for k, v in traj.example.items() if k not in self.system.inputs}
        instruction = LOSS_INSTRUCTION.format(gold=_render(gold) or "(not given)", metric=self.pipeline.metric.name,
                                              score=score)
        return tg.TextLoss(instruction, engine=engine)(self.final_output(traj))


UNPARSED_WARNING_STEP = 3  # the step after which a run whose every rewrite lacked the tags says so


class TextGrad(Method):
    optimizes = frozenset({ConfigKind.PROMPT})
    """`steps` TGD steps (default budget.iterations; in a matched-cost run, as many as the run cap pays
    for) on minibatches of `batch_size` training examples."""

    def __init__(self, budget: Budget, name: str = "textgrad", console=None, seed: int = 0, steps: int | None = None,
                 batch_size: int = 3, max_tokens: int = 512, temperature: float = 0.0,
                 constraints: list[str] | None = None):
        super().__init__(name, budget, console)
        self.seed = int(seed)
        self.steps = int(steps if steps is not None else budget.iterations)
        self.steps_from_cap = steps is None  # a matched-cost run sizes them from its run cap
        self.batch_size, self.max_tokens, self.temperature = int(batch_size), int(max_tokens), float(temperature)
        self.constraints = list(constraints or [])

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system = pipeline.system
        prompt_names = self.fit(pipeline)
        octx, vctx = ctx.replace(phase="local_optimization"), ctx.replace(phase="validation")
        engines = {role: RunLMEngine(octx, f"textgrad.{role}", self.max_tokens, self.temperature)
                   for role in ("loss", "backward", "optimizer")}
        state = folder.read_json(STATE_FILE)  # a killed run's last step
        config = SystemConfig(state["config"]) if state else system.default_config()
        params = {
            n: tg.Variable(config[n] if isinstance(config[n], str) else "", requires_grad=True,
                           role_description=f"instruction (system prompt) of the pipeline step '{n}', which: "
                                            f"{system.components[n].description}")
            for n in prompt_names
        }
        # No `gradient_memory`: textgrad 0.1.8's TGD stores past feedback but never puts it in its prompt.
        optimizers = {n: tg.TGD(parameters=[params[n]], engine=engines["optimizer"], constraints=self.constraints)
                      for n in prompt_names}
        graph = TextGradGraph(pipeline, params)
        steps = self._steps(ctx)
        # The current instructions' validation trajectories feed every later validation; a resumed run
        # rebuilds them uncounted (the checkpoint's accounts hold them).
        if not state and cap_reached(ctx, {"max_runs": system.rerun_cost(None, len(splits.val), config)}):
            end_as_planned(self.steps_from_cap and bool(self.budget.max_runs_from), ctx.caps, "TextGrad")
            return MethodOutcome(config=config, extras={"textgrad": {"steps": 0, "steps_planned": steps}})
        with uncounted(ctx) if state else nullcontext(), ctx.ledger.timed("validation"):
            val_trajs = system.run(splits.val, config, vctx)
        val_total = float(sum(rewards(pipeline, val_trajs)))  # summed, as the Optimas loop reports it
        rng = np.random.default_rng(self.seed)
        order: list[int] = []
        history: list[HistoryEntry] = []
        parse_failures, start = 0, 0
        if state:
            start, order, parse_failures = state["step"], state["order"], state["parse_failures"]
            rng.bit_generator.state = state["rng"]
            history = [HistoryEntry.from_dict(e) for e in state["history"]]
            for role, calls in state["calls"].items():
                engines[role].calls = calls
            log.info("resuming textgrad after step %d", start)
        self.console.print(f"[bold]TextGrad[/] · {prompt_names} · {steps} steps of {self.batch_size} · "
                           f"val {val_total:.3f}" + (f" · resumed after step {start}" if state else ""))

        def update(name: str) -> str | None:
            """TGD's rewrite of one instruction; None when its reply had no <IMPROVED_VARIABLE> tags."""
            try:
                optimizers[name].step()
                return params[name].value
            except IndexError:
                return None
            finally:
                optimizers[name].zero_grad()

        with ThreadPoolExecutor(MAX_THREADS, thread_name_prefix="textgrad") as pool:
            label = f"TextGrad steps {start + 1}-{steps}" if start else "TextGrad steps"  # a resumed run's part
            for step in track(range(start + 1, steps + 1), label, lm=ctx.lm):
                forward = system.rerun_cost(None, min(self.batch_size, len(splits.train)), config)
                if cap_reached(ctx, {"max_runs": forward}):  # a safe point: the best instructions so far are saved
                    break
                while len(order) < self.batch_size:  # shuffled epochs over the training split
                    order.extend(rng.permutation(len(splits.train)).tolist())
                batch, order = [splits.train[i] for i in order[: self.batch_size]], order[self.batch_size :]
                with ctx.ledger.timed("local_optimization"):
                    trajs = system.run(batch, config, octx)
                    scores = rewards(pipeline, trajs)
                    critic = engines["loss"].expect(len(trajs))
                    losses = list(pool.map(lambda ts, critic=critic: graph.loss(ts[0], ts[1], critic),
                                           zip(trajs, scores, strict=True)))
                    backward_by_depth(tg.sum(losses), engines["backward"], pool)
                    with_feedback = [n for n in prompt_names if params[n].gradients]
                    engines["optimizer"].expect(len(with_feedback))
                    updates = dict(zip(with_feedback, pool.map(update, with_feedback), strict=True))
                    proposal = {n: text for n, text in updates.items() if text is not None}
                    parse_failures += sum(text is None for text in updates.values())
                candidate = config
                for name, text in proposal.items():
                    candidate = candidate.replace(name, text)
                changed = [n for n in prompt_names if candidate[n] != config[n]]
                entry = HistoryEntry(iteration=step, component=changed or None, kind="prompt",
                                     proposal={n: proposal[n] for n in changed}, val_before=val_total,
                                     val_after=val_total, accepted=False, runs_so_far=0.0, n=len(splits.val),
                                     details={"train_batch_mean": statistics.fmean(scores)})
                if changed and cap_reached(ctx, {"max_runs": system.rerun_cost(changed, len(splits.val), candidate)}):
                    # In the returned history with what it spent; not checkpointed: a resume redoes the step.
                    entry.note = f"not validated: {ctx.caps.stopped}"
                    entry.runs_so_far = round(ctx.ledger.equivalent_runs(), 2)
                    history.append(entry)
                    break
                if changed:
                    with ctx.ledger.timed("validation"), ctx.ledger.provisional() as validation_pass:
                        cand_trajs = system.run_changed(changed, val_trajs, candidate, vctx)
                    cand_total = float(sum(rewards(pipeline, cand_trajs)))
                    entry.val_candidate = cand_total
                    if cand_total >= val_total:  # TextGrad reverts only when validation gets worse
                        validation_pass.keep()  # the paper charges accepted updates' validation only
                        config, val_trajs, val_total = candidate, cand_trajs, cand_total
                        entry.accepted, entry.val_after = True, cand_total
                else:  # why TGD changed nothing
                    entry.note = ("no update: TGD's rewrite had no <IMPROVED_VARIABLE> tags" if updates and not proposal
                                  else "no update: the rewrite equals the current instruction" if proposal
                                  else "no update: no feedback reached an instruction")
                for name in prompt_names:  # a reverted (or unparsed) update leaves the parameter as configured
                    params[name].set_value(config[name] if isinstance(config[name], str) else "")
                entry.runs_so_far = round(ctx.ledger.equivalent_runs(), 2)
                history.append(entry)
                config.save(folder.file("best_config.json"))
                folder.checkpoint(ctx, {STATE_FILE: {
                    "step": step, "config": config.to_dict(), "order": order,
                    "rng": rng.bit_generator.state, "parse_failures": parse_failures,
                    "calls": {role: e.calls for role, e in engines.items()},
                    "history": [e.to_dict() for e in history]}})
                self.print_iteration(entry)
                if step == UNPARSED_WARNING_STEP and parse_failures == engines["optimizer"].calls > 0:
                    self._warn_unparsed(parse_failures, step, ctx)
        end_as_planned(self.steps_from_cap and bool(self.budget.max_runs_from), ctx.caps, "TextGrad")
        # steps: the steps taken (the history's length; Amazon s0 reported its 206 planned steps after 47)
        extras = {"implementation": f"textgrad {tg.__version__}", "steps": len(history), "steps_planned": steps,
                  "parse_failures": parse_failures,
                  "lm_calls": {role: e.calls for role, e in engines.items()},
                  "lm_batches": {role: list(e.batcher.batch_sizes) for role, e in engines.items()},
                  "final_val_mean": val_total / len(splits.val),
                  "changed": [n for n in prompt_names if config[n] != system.default_config()[n]]}
        return MethodOutcome(config=SystemConfig(config), history=history, extras={"textgrad": extras})

    def _warn_unparsed(self, failures: int, step: int, ctx) -> None:
        """Hours of steps that change nothing, said once: on Amazon the embedded 135M model wrote no tagged
        rewrite in 25 of its first 26 steps (echoes of the prompt, repeated sentences), then a string of digits."""
        model = getattr(ctx.lm, "model", "the run's LM")
        message = (f"none of the {failures} rewrites of the first {step} steps had TGD's <IMPROVED_VARIABLE> tags: "
                   f"{model} does not follow TextGrad's update format, and no instruction changes while it does not. "
                   "The run goes on; TextGrad needs an LM that follows the format (e.g. lm=openai).")
        log.warning("TextGrad: %s", message)
        self.console.print(f"[yellow]TextGrad: {message}[/]")

    def prompt_proposer(self, pipeline, ctx) -> str:
        return "lm"

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """Per step: the forward pass on a training minibatch, a critique per example, feedback per component and
        example, a rewrite per instruction, then the changed instructions on validation."""
        system, est = pipeline.system, Estimate()
        names, n_val, config = self.targets(pipeline), len(splits.val), system.default_config()
        batch, opt = min(self.batch_size, len(splits.train)), est.phases["local_optimization"]
        est.assume(f"each of textgrad's {self.steps} steps rewrites every instruction and validates the rewrite")
        scaled(lambda p: full_runs(system, batch, p), self.steps, opt)
        opt.calls["textgrad.loss"] += self.steps * batch
        opt.calls["textgrad.backward"] += self.steps * batch * len(system)
        opt.calls["textgrad.optimizer"] += self.steps * len(names)
        full_runs(system, n_val, est.phases["validation"])
        scaled(lambda p: rerun_counts(system, names, n_val, config, p), self.steps, est.phases["validation"])
        return est

    def _steps(self, ctx) -> int:
        """`steps`, else budget.iterations; in a matched-cost run, as many steps as the run cap pays for
        (a step's forward pass alone is batch_size system runs), the cap stopping the rest."""
        cap = ctx.caps.max_runs if self.budget.max_runs_from and ctx.caps is not None else None
        if not self.steps_from_cap or cap is None:
            return self.steps
        return max(self.steps, math.ceil(cap / self.batch_size))
