"""DSPy baseline: the real `dspy` package's MIPROv2: instructions + few-shot demonstrations, as in the
paper (a MIPRO candidate is an instruction with a set of demos); `few_shot=False` tunes instructions only.

How the compound system meets DSPy:
- `CompoundProgram` is a dspy.Module with one dspy.Predict per PROMPT component; the predictor's
  signature instruction is that component's prompt. Its forward runs OUR components (their own
  message templates, models, parsing, the run's LM layer and ledger) with the instructions read
  from the predictors, and returns the system's final outputs. The predictors are never called
  through DSPy's adapters; besides carrying the instruction and the demos MIPROv2 tunes, they
  record each component's inputs and outputs in DSPy's trace, which MIPROv2 bootstraps its task
  demonstrations from (kept when the run's traces scored, plus labeled training examples). A
  component's configuration is one string: the instruction, then its demos as "Examples:"
  blocks of 'field: value' lines (each value cut at DEMO_FIELD_CHARS, so long contexts stay
  within a small model's window). Other components keep their default configuration.
- The metric is the pipeline's global metric on the final output. MIPROv2's trials run on the
  validation split (phase "validation" in the ledger), bootstrapping on the training split
  (phase "local_optimization"). Trajectories are cached per (example, instructions), and a
  candidate re-runs only the components whose instruction changed and what follows them.
- DSPy's own LM calls (dataset summary, program description, instruction proposals) go through
  a custom DSPy engine (`RunLMEngine`) to the run's LM client, tagged "dspy.proposer" in the usage
  ledger: the same model and backend as everything else (the embedded local model by default),
  DSPy's response cache off. (dspy.LM("local/...") would also reach our litellm provider, but
  would bypass the run's LM client, its cache, its usage ledger, and the test doubles.)
- A DSPy Evaluate call is served as one batch: a callback sees its devset before the per-example
  calls and runs the system on all of it at once, so a local model batches generation.

Candidate space (`proposer`, Table 2 compares like with like): `lm` is MIPROv2 as published, its
instruction candidates written by the LM; `mixed` adds the pipeline's own instruction pool
(optim/prompt_pool.py: the alternatives it ships, the original plus a format constraint, the original
shortened) to every predictor's candidates, the pool the Optimas family's `mixed` search draws from;
`pool` keeps only the original and the pool; `auto` is `mixed` for an embedded local LM, else `lm`
(the Optimas family's rule). MIPROv2 fixes its candidates before the trials, so the pool's edits
apply to the original instruction only (the Optimas loop applies them to the best one so far).

Budget caps: checked before the default program's evaluation and before each trial (MIPROv2's trials
run inside compile(); a reached cap stops the Optuna study there, and compile() returns the best
program evaluated so far). In a matched-cost run (budget.max_runs_from), `num_trials: null` means as
many trials as the run cap can pay for: one trial re-runs at least one of the K components on each
evaluated example, so at most cap x K / examples trials; the cap stops the search where it is spent.

A weak local model often breaks DSPy's structured output ([[ ## field ## ]] sections). Every
failed adapter parse is counted (extras["dspy"]["parse_failures"], with a few excerpts). MIPROv2's
instruction proposer has no fallback: one unparseable proposal raises and would end the whole
search before its first trial, leaving a matched-cost baseline that spent a few minutes and tested
the defaults. So when the proposer fails, its LM-written candidates are dropped as a whole (the
error is recorded in extras["dspy"]["lm_proposals"]) and MIPROv2 goes on with the candidates it
still has: the original instruction, the pool's under `mixed`, and its bootstrapped demo sets. A
parse failure anywhere else still stops MIPROv2; the run then keeps the default instructions and
records the error. DSPy's results are used as they come, never patched.
"""
from __future__ import annotations

import contextlib
import io
import logging
import math
import threading
from collections.abc import Sequence

import dspy
import optuna
from dspy.utils.callback import BaseCallback
from dspy.utils.exceptions import AdapterParseError

from optimas_cli.errors import UserError
from optimas_cli.lrf.text import format_value
from optimas_cli.methods.base import Method, MethodOutcome
from optimas_cli.methods.cost import Conditions, Estimate, full_runs, rerun_counts, scaled
from optimas_cli.methods.scorers import input_key
from optimas_cli.optim.history import HistoryEntry
from optimas_cli.optim.prompt import resolve_proposer
from optimas_cli.optim.prompt_pool import fixed_drafts
from optimas_cli.progress import phase
from optimas_cli.system import ConfigKind, Pipeline, RunContext, SystemConfig, Trajectory
from optimas_cli.system.budget import Budget
from optimas_cli.system.caps import cap_reached, end_as_planned

log = logging.getLogger("optimas")
PROPOSER_TAG = "dspy.proposer"
EXCERPT_CHARS = 300
DEMO_FIELD_CHARS = 600


# -- DSPy's LM calls through the run's LM layer ------------------------------------------------------
class RunLMEngine:
    """A DSPy engine (complete(Request) -> Response) backed by the run's LM client.

    Each call gets a fresh sample index, so repeated identical prompts at temperature > 0 (DSPy
    asks for several proposals) are distinct samples rather than hits in our LM cache.
    """

    def __init__(self, ctx: RunContext, component: str = PROPOSER_TAG, max_tokens: int = 512):
        self.ctx, self.component, self.max_tokens = ctx, component, int(max_tokens)
        self.calls = 0
        self._lock = threading.Lock()

    def complete(self, request):
        from dspy.lm15 import Message, Response, TextPart, Usage

        messages = []
        if request.system:
            system = request.system if isinstance(request.system, str) else "".join(p.text or "" for p in request.system)
            messages.append({"role": "system", "content": system})
        for m in request.messages:
            role = m.role if m.role in ("user", "assistant", "system") else "user"
            messages.append({"role": role, "content": m.text or ""})
        with self._lock:
            index = self.calls
            self.calls += 1
        cfg = request.config
        text = self.ctx.replace(sample_index=self.ctx.sample_index + index).complete(
            self.component, [messages], temperature=cfg.temperature, max_tokens=cfg.max_tokens or self.max_tokens,
            stop=list(cfg.stop) or None,
        )[0]
        return Response(id=None, model=self.component, message=Message.assistant((TextPart(text),)),
                        finish_reason="stop", usage=Usage())

    def stream(self, request):
        from dspy.lm15 import response_to_events

        return response_to_events(self.complete(request))

    def close(self) -> None:
        pass


# -- the compound system as a DSPy program -------------------------------------------------------
def dspy_field(name: str) -> str:
    """Field names that would shadow a dspy.Signature attribute get a suffix."""
    return f"{name}_value" if hasattr(dspy.Signature, name) else name


def with_demos(instruction: str, demos: Sequence, inputs: Sequence[str], outputs: Sequence[str]) -> str:
    """The instruction followed by the demos that show at least one input and one output field."""
    blocks = []
    for demo in demos:
        shown = [[(f, demo.get(dspy_field(f))) for f in fields if demo.get(dspy_field(f)) is not None]
                 for fields in (inputs, outputs)]
        if all(shown):
            blocks.append("\n".join(f"{f}: {_cut(format_value(v))}" for f, v in shown[0] + shown[1]))
    return f"{instruction}\n\nExamples:\n\n" + "\n\n".join(blocks) if blocks else instruction


def _cut(text: str) -> str:
    return text if len(text) <= DEMO_FIELD_CHARS else text[: DEMO_FIELD_CHARS - 1] + "…"


class SystemRuntime:
    """Everything behind the DSPy program: the system, run context, signatures and trajectory cache.

    DSPy deep-copies programs for every trial; the runtime is shared by all copies (its
    __deepcopy__ returns itself), so the LM, the ledger and the cache are never duplicated.
    """

    def __init__(self, pipeline: Pipeline, prompt_names: Sequence[str], ctx: RunContext, val_keys: set[str]):
        self.pipeline, self.system = pipeline, pipeline.system
        self.prompt_names = list(prompt_names)
        self.default = self.system.default_config()
        self.ctx, self.val_keys = ctx, val_keys
        self.cache: dict[tuple[str, tuple], Trajectory] = {}
        self._lock = threading.RLock()
        self.signatures, self.attribute, self.original = {}, {}, {}
        for name in self.prompt_names:
            comp = self.system.components[name]
            fields = {dspy_field(f): (str, dspy.InputField(desc=f"input field {f!r} of {name}")) for f in comp.inputs}
            fields.update({dspy_field(f): (str, dspy.OutputField(desc=f"output field {f!r} of {name}"))
                           for f in comp.outputs})
            instruction = self.default[name] if isinstance(self.default[name], str) else comp.description
            title = "".join(part.title() for part in name.split("_"))
            self.signatures[name] = dspy.make_signature(fields, instruction, signature_name=title)
            self.original[name] = self.signatures[name].instructions
            self.attribute[name] = name if not hasattr(dspy.Module, name) else f"{name}_predictor"

    def __deepcopy__(self, memo):
        return self

    # -- the program's view ----------------------------------------------------------------------
    def predictor(self, program, name: str) -> dspy.Predict:
        return getattr(program, self.attribute[name])

    def prompt_values(self, program) -> dict:
        """Each prompt component's configuration: its predictor's instruction (the default when unchanged)
        and demos."""
        values = {}
        for name in self.prompt_names:
            predictor, comp = self.predictor(program, name), self.system.components[name]
            text = predictor.signature.instructions
            shown = with_demos(text, predictor.demos, comp.inputs, comp.outputs)
            values[name] = self.default[name] if shown == self.original[name] else shown
        return values

    def forward(self, program, inputs: dict):
        """Run the system for one example; record each prompt component's step in DSPy's trace."""
        traj = self.run([inputs], self.prompt_values(program))[0]
        trace = dspy.settings.trace
        if trace is not None and dspy.settings.max_trace_size > 0:
            for name in self.prompt_names:
                step = traj.steps.get(name)
                if step and not step["skipped"]:
                    if len(trace) >= dspy.settings.max_trace_size:
                        trace.pop(0)
                    trace.append((self.predictor(program, name),
                                  {dspy_field(k): v for k, v in step["inputs"].items()},
                                  dspy.Prediction(**{dspy_field(k): v for k, v in step["outputs"].items()})))
        return dspy.Prediction(**traj.final(self.system.outputs))

    # -- execution ---------------------------------------------------------------------------------
    def example_key(self, example) -> str:
        return input_key({f: example[f] for f in self.system.inputs})

    def config_for(self, values: dict) -> SystemConfig:
        config = self.default
        for name, value in values.items():
            config = config.replace(name, value)
        return config

    def run(self, examples: Sequence[dict], values: dict) -> list[Trajectory]:
        """Trajectories of `examples` with these prompt values, computed batched and cached."""
        signature = tuple(input_key({"v": values[n]}) for n in self.prompt_names)
        base_signature = tuple(input_key({"v": self.default[n]}) for n in self.prompt_names)
        keys = [self.example_key(ex) for ex in examples]
        with self._lock:
            missing = {k: ex for k, ex in zip(keys, examples, strict=True) if (k, signature) not in self.cache}
            for phase in ("local_optimization", "validation"):
                group = {k: ex for k, ex in missing.items() if (k in self.val_keys) == (phase == "validation")}
                if group:
                    self._fill(group, values, signature, base_signature, self.ctx.replace(phase=phase))
            return [self.cache[(k, signature)] for k in keys]

    def _fill(self, group: dict, values: dict, signature: tuple, base_signature: tuple, ctx: RunContext) -> None:
        need_base = [k for k in group if (k, base_signature) not in self.cache]
        if need_base:
            inputs = [{f: group[k][f] for f in self.system.inputs} for k in need_base]
            for k, traj in zip(need_base, self.system.run(inputs, self.default, ctx), strict=True):
                self.cache[(k, base_signature)] = traj
        if signature == base_signature:
            return
        config = self.config_for(values)
        trajs = [self.cache[(k, base_signature)] for k in group]
        changed = [n for n in self.prompt_names if config[n] != self.default[n]]
        trajs = self.system.run_changed(changed, trajs, config, ctx)
        for k, traj in zip(group, trajs, strict=True):
            self.cache[(k, signature)] = traj


class CompoundProgram(dspy.Module):
    """A compound AI system run as one program. Each prompt component is a predictor whose signature
    holds the component's instruction. forward runs the components in pipeline order, each reading
    the fields that earlier components wrote, and returns the system's final output fields."""

    def __init__(self, runtime: SystemRuntime):
        super().__init__()
        self.runtime = runtime
        for name in runtime.prompt_names:
            setattr(self, runtime.attribute[name], dspy.Predict(runtime.signatures[name]))

    def forward(self, **inputs):
        return self.runtime.forward(self, inputs)


class MiproObserver(BaseCallback):
    """Batches each Evaluate call, records its score, and counts DSPy's failed output parses."""

    def __init__(self, runtime: SystemRuntime):
        super().__init__()
        self.runtime = runtime
        self.parse_failures = 0
        self.failure_excerpts: list[str] = []
        self.evaluations: list[HistoryEntry] = []
        self._open: dict[str, dict] = {}
        self._parsing: dict[str, str] = {}

    def on_evaluate_start(self, call_id, instance, inputs):
        program, devset = inputs.get("program"), inputs.get("devset") or instance.devset
        if isinstance(program, CompoundProgram) and devset:
            values = self.runtime.prompt_values(program)
            self.runtime.run([ex.inputs().toDict() for ex in devset], values)
            self._open[call_id] = {"values": values, "n": len(devset)}

    def on_evaluate_end(self, call_id, outputs, exception=None):
        """One history entry per evaluation, in the loop's terms (validation totals, strict improvement)."""
        opened = self._open.pop(call_id, None)
        if opened is None or outputs is None:
            return
        total = float(outputs.score) / 100.0 * opened["n"]
        before = self.evaluations[-1].val_after if self.evaluations else total
        self.evaluations.append(HistoryEntry(
            iteration=len(self.evaluations) + 1, component=list(self.runtime.prompt_names), kind="prompt",
            proposal=opened["values"], val_before=before, val_candidate=total, val_after=max(before, total),
            accepted=total > before, runs_so_far=round(self.runtime.ctx.ledger.equivalent_runs(), 2),
            n=opened["n"],
        ))

    def on_adapter_parse_start(self, call_id, instance, inputs):
        self._parsing[call_id] = str(inputs.get("completion", ""))

    def on_adapter_parse_end(self, call_id, outputs, exception=None):
        completion = self._parsing.pop(call_id, "")
        if exception is not None:
            self.parse_failures += 1
            if len(self.failure_excerpts) < 3:
                self.failure_excerpts.append(completion[:EXCERPT_CHARS])


def within_cap(values: dict, evaluations: Sequence[HistoryEntry], n_val: int, caps) -> dict:
    """The prompt values to keep: MIPROv2's pick, unless its only evaluations ended past the run cap (a trial's
    batch crossed it); then the best full validation that ended within the cap (none: the original program)."""
    cap = getattr(caps, "max_runs", None)
    if cap is None or not values or any(e.proposal == values and e.runs_so_far <= cap for e in evaluations):
        return values
    kept = [e for e in evaluations if e.n == n_val and e.runs_so_far <= cap]
    return dict(max(kept, key=lambda e: e.val_candidate).proposal) if kept else {}


# -- MIPROv2 with the run's candidate space and caps ---------------------------------------------
class RunMIPROv2(dspy.MIPROv2):
    """dspy.MIPROv2 plus `extra_instructions` (predictor attribute -> instructions added to its
    candidates; `lm_proposals=False` skips MIPROv2's grounded proposer) and the run's caps, checked
    at the safe points between MIPROv2's steps: before the default program's evaluation and before
    each trial."""

    def __init__(self, *args, ctx: RunContext, extra_instructions: dict[str, list[str]], lm_proposals: bool = True,
                 **kwargs):
        super().__init__(*args, **kwargs)
        self.ctx, self.extra_instructions, self.lm_proposals = ctx, extra_instructions, lm_proposals
        self.lm_proposal_status = "used" if lm_proposals else "off"

    def _propose_instructions(self, program, trainset, demo_candidates, *args, **kwargs):
        candidates = None
        if self.lm_proposals:
            try:
                candidates = super()._propose_instructions(program, trainset, demo_candidates, *args, **kwargs)
            except AdapterParseError as exc:  # the proposer has no fallback; the search can go on without it
                self.lm_proposal_status = f"failed, dropped: {type(exc).__name__}: {str(exc)[:EXCERPT_CHARS]}"
                log.warning("DSPy MIPROv2's instruction proposer could not parse its LM's reply; searching the "
                            "original instruction%s and the demo sets without LM-written candidates",
                            ", the pool" if self.extra_instructions else "")
        if candidates is None:
            candidates = {i: [p.signature.instructions] for i, p in enumerate(program.predictors())}
        for i, (attribute, _) in enumerate(program.named_predictors()):
            candidates[i] += [t for t in self.extra_instructions.get(attribute, []) if t not in candidates[i]]
        return candidates

    def _optimize_prompt_parameters(self, program, *args, **kwargs):
        if cap_reached(self.ctx):  # spent while bootstrapping: the original program, unevaluated
            return program
        return super()._optimize_prompt_parameters(program, *args, **kwargs)

    def _select_and_insert_instructions_and_demos(self, candidate_program, instruction_candidates, demo_candidates,
                                                  trial, *args, **kwargs):
        if cap_reached(self.ctx):  # the study ends after this (unevaluated) trial
            trial.study.stop()
            raise optuna.TrialPruned(str(self.ctx.caps.stopped))
        return super()._select_and_insert_instructions_and_demos(candidate_program, instruction_candidates,
                                                                 demo_candidates, trial, *args, **kwargs)


def pool_instructions(runtime: SystemRuntime) -> dict[str, list[str]]:
    """Per predictor attribute, the pipeline's instruction pool for its component (optim/prompt_pool.py)."""
    return {runtime.attribute[name]: [d.text for d in fixed_drafts(runtime.system.components[name],
                                                                   runtime.original[name])]
            for name in runtime.prompt_names}


# -- the method ---------------------------------------------------------------------------------
class _LinesToLog(io.TextIOBase):
    """A stdout stand-in that hands each complete line to a logger."""

    def __init__(self, logger: logging.Logger):
        self.logger, self.pending = logger, ""

    def write(self, text: str) -> int:
        *lines, self.pending = (self.pending + text).split("\n")
        for line in lines:
            if line.strip():
                self.logger.info(line)
        return len(text)


@contextlib.contextmanager
def dspy_logs_to_run_log():
    """DSPy logs to its own stderr handler and print()s its proposer's prompts and the weak model's
    raw replies to stdout; send both to the run's log instead, while it runs."""
    dspy_logger = logging.getLogger("dspy")
    propagate = dspy_logger.propagate
    dspy.disable_logging()
    dspy_logger.propagate = True
    try:
        with contextlib.redirect_stdout(_LinesToLog(dspy_logger)):
            yield
    finally:
        dspy_logger.propagate = propagate
        dspy.enable_logging()


class DSPyMIPRO(Method):
    optimizes = frozenset({ConfigKind.PROMPT})
    """MIPROv2 with auto=None: `num_candidates` instructions (the first is the original, so the default
    budget adds budget.num_candidates new ones; `proposer` mixed or pool adds the pipeline's pool) and
    as many demo sets per predictor, `num_trials` Bayesian-optimization trials (default
    budget.iterations; in a matched-cost run, as many as the run cap pays for), each a full evaluation
    on the validation split unless `minibatch` is set. `few_shot`: demo sets of up to
    `max_bootstrapped_demos` bootstrapped and `max_labeled_demos` labeled examples (MIPROv2's
    defaults, 4 and 4); False: instructions only."""

    def __init__(self, budget: Budget, name: str = "dspy", console=None, seed: int = 0, num_candidates: int | None = None,
                 num_trials: int | None = None, minibatch: bool = False, minibatch_size: int = 35,
                 init_temperature: float = 1.0, max_tokens: int = 512, view_data_batch_size: int = 10,
                 program_aware: bool = True, data_aware: bool = True, tip_aware: bool = True, fewshot_aware: bool = True,
                 few_shot: bool = True, max_bootstrapped_demos: int = 4, max_labeled_demos: int = 4,
                 proposer: str = "auto"):
        super().__init__(name, budget, console)
        self.seed = int(seed)
        self.num_candidates = int(num_candidates if num_candidates is not None else budget.num_candidates + 1)
        self.num_trials = int(num_trials if num_trials is not None else budget.iterations)
        self.trials_from_cap = num_trials is None  # a matched-cost run sizes them from its run cap
        self.proposer = str(proposer)
        self.minibatch, self.minibatch_size = bool(minibatch), int(minibatch_size)
        self.init_temperature, self.max_tokens = float(init_temperature), int(max_tokens)
        self.few_shot = bool(few_shot)
        self.demos = {"max_bootstrapped_demos": int(max_bootstrapped_demos) if few_shot else 0,
                      "max_labeled_demos": int(max_labeled_demos) if few_shot else 0}
        self.grounded = {"view_data_batch_size": int(view_data_batch_size), "program_aware_proposer": program_aware,
                         "data_aware_proposer": data_aware, "tip_aware_proposer": tip_aware,
                         "fewshot_aware_proposer": fewshot_aware}

    def optimize(self, pipeline, splits, ctx, folder) -> MethodOutcome:
        system = pipeline.system
        prompt_names = self.fit(pipeline)
        if self.num_candidates < 2:
            raise UserError(f"dspy: num_candidates={self.num_candidates} leaves MIPROv2 only the original instruction",
                            "set method.num_candidates >= 2")
        proposer = self.prompt_proposer(pipeline, ctx)
        runtime = SystemRuntime(pipeline, prompt_names, ctx, {input_key({f: ex[f] for f in system.inputs})
                                                              for ex in splits.val})
        extra = pool_instructions(runtime) if proposer in ("pool", "mixed") else {}
        num_trials = self._num_trials(len(system), len(splits.val), ctx)
        program = CompoundProgram(runtime)
        engine = RunLMEngine(ctx.replace(phase="local_optimization"), max_tokens=self.max_tokens)
        lm = dspy.LM(f"optimas/{PROPOSER_TAG}", engine=engine, cache=False, temperature=self.init_temperature,
                     max_tokens=self.max_tokens)
        observer = MiproObserver(runtime)
        metric = self._metric(pipeline)
        trainset = [dspy.Example(**ex).with_inputs(*system.inputs) for ex in splits.train]
        valset = [dspy.Example(**ex).with_inputs(*system.inputs) for ex in splits.val]
        optimizer = RunMIPROv2(metric=metric, prompt_model=lm, task_model=lm, auto=None,
                               num_candidates=self.num_candidates, **self.demos, num_threads=1, seed=self.seed,
                               init_temperature=self.init_temperature, ctx=ctx, extra_instructions=extra,
                               lm_proposals=proposer != "pool")
        self.console.print(f"[bold]DSPy MIPROv2[/] · {prompt_names} · {self.num_candidates} candidates"
                           f" + {sum(map(len, extra.values()))} from the pool · {num_trials} trials · "
                           + ("few-shot" if self.few_shot else "instructions only"))
        status, error, best = "optimized", None, None
        if cap_reached(ctx, {"max_runs": system.rerun_cost(None, len(splits.val), runtime.default)}):
            # the default program's validation pass, MIPROv2's first, would cross a cap: nothing is started
            end_as_planned(self.trials_from_cap and bool(self.budget.max_runs_from), ctx.caps, "DSPy's search")
            return MethodOutcome(config=runtime.default, extras={"dspy": {"status": "not started",
                                                                          "error": str(ctx.caps.stopped)}})
        with ctx.ledger.timed("local_optimization"), phase("DSPy MIPROv2 trials", lm=ctx.lm), dspy_logs_to_run_log(), \
                dspy.context(lm=lm, callbacks=[observer]):
            try:
                best = optimizer.compile(program, trainset=trainset, valset=valset, num_trials=num_trials,
                                         minibatch=self.minibatch, minibatch_size=min(self.minibatch_size, len(valset)),
                                         seed=self.seed, **self.grounded)
            except AdapterParseError as exc:  # a weak model's unparseable reply outside the proposer stopped MIPROv2
                status, error = "failed", f"{type(exc).__name__}: {str(exc)[:EXCERPT_CHARS]}"
                log.warning("DSPy MIPROv2 stopped on a parse failure; keeping the default instructions: %s", error)
        end_as_planned(self.trials_from_cap and bool(self.budget.max_runs_from), ctx.caps, "DSPy's search")
        values = within_cap(runtime.prompt_values(best) if best is not None else {}, observer.evaluations,
                            len(splits.val), ctx.caps)
        for entry in observer.evaluations:  # an evaluation whose batch crossed the cap is shown, never kept
            if ctx.caps is not None and ctx.caps.max_runs is not None and entry.runs_so_far > ctx.caps.max_runs:
                entry.accepted, entry.note = False, f"ended past the run cap of {ctx.caps.max_runs:g}: not kept"
        config = runtime.config_for(values)
        extras = {
            "status": status, "error": error, "parse_failures": observer.parse_failures,
            "parse_failure_excerpts": observer.failure_excerpts, "proposer_calls": engine.calls,
            "lm_proposals": optimizer.lm_proposal_status,
            "num_candidates": self.num_candidates, "num_trials": num_trials, "components": prompt_names,
            "proposer": proposer, "pool_candidates": {n: len(extra.get(runtime.attribute[n], [])) for n in prompt_names},
            "few_shot": self.few_shot, **self.demos,
            "demos": {n: len(runtime.predictor(best, n).demos) for n in prompt_names} if best is not None else {},
            "best_val_mean": (float(best.score) / 100.0) if best is not None and hasattr(best, "score") else None,
            "changed": [n for n in prompt_names if config[n] != runtime.default[n]],
        }
        self.console.print(f"  {status} · parse failures {observer.parse_failures} · changed {extras['changed']}")
        return MethodOutcome(config=config, history=observer.evaluations, extras={"dspy": extras})

    def prompt_proposer(self, pipeline, ctx) -> str:
        return resolve_proposer(self.proposer, None, ctx)

    def estimate(self, pipeline, splits, conditions: Conditions) -> Estimate:
        """Demo bootstrapping on training examples, the proposer's instructions, then the default program and
        `num_trials` trials on validation, each re-running the prompt components and what follows them."""
        system, est = pipeline.system, Estimate()
        names, n_val, config = self.targets(pipeline), len(splits.val), system.default_config()
        bootstrapped = min(len(splits.train), self.num_candidates * self.demos["max_bootstrapped_demos"])
        est.assume(f"dspy bootstraps its demos from {bootstrapped} training runs and each of its {self.num_trials} "
                   "trials re-runs every prompt component (an upper bound: MIPROv2 reuses unchanged steps)")
        full_runs(system, bootstrapped, est.phases["local_optimization"])
        est.phases["local_optimization"].calls[PROPOSER_TAG] += self.num_candidates * len(names)
        evaluated = min(self.minibatch_size, n_val) if self.minibatch else n_val
        full_runs(system, n_val, est.phases["validation"])
        scaled(lambda p: rerun_counts(system, names, evaluated, config, p), self.num_trials, est.phases["validation"])
        return est

    def _num_trials(self, components: int, val_size: int, ctx) -> int:
        """`num_trials`, else budget.iterations; in a matched-cost run, as many trials as the run cap pays
        for at the cheapest (one component re-run on each evaluated example), the cap stopping the rest."""
        cap = ctx.caps.max_runs if self.budget.max_runs_from and ctx.caps is not None else None
        if not self.trials_from_cap or cap is None:
            return self.num_trials
        evaluated = min(self.minibatch_size, val_size) if self.minibatch else val_size
        return max(self.num_trials, math.ceil(cap * components / evaluated))

    @staticmethod
    def _metric(pipeline: Pipeline):
        outputs = pipeline.system.outputs

        def metric(example, prediction, trace=None) -> float:
            return pipeline.metric(example.toDict(), {f: prediction.get(f) for f in outputs})

        return metric
