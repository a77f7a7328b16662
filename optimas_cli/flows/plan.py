"""`optimas plan`: what a run will spend, per phase, before it spends anything (no LM is called).

Equivalent system runs follow from the budget and the pipeline's wiring by the same arithmetic the
run's ledger counts with (lrf/collect.py, optim/loop.py, system/ledger.py): a phase's runs are its
(component, input) executions divided by the number of components. Optimas' loop depends on what
the validation gate accepts, which no plan can know; the plan assumes the first proposal for each
component is accepted and every later one rejected, and says so. A per-instance choice proposes
its routing policy, which after an acceptance equals the current value and is not validated again.
On the deterministic toys this reproduces the executed runs exactly. Stage 2 follows
method.adaptation: paper adapts every r_k after each accepted update (planned under that assumption);
lazy refreshes the picked component's r_k when an accepted update in its context came after its pairs,
which the plan cannot know either, so it plans the most lazy can spend whatever the gate accepts (a
refresh in every iteration after the first) and says that this is an upper bound; none adapts nothing.
lrf=oracle has no Stage 1 or Stage 2: nothing is collected, trained, judged or adapted.

LM calls come from the components that declare `calls_lm`; tokens and seconds per call, and seconds
per run of each phase, come from the most recent earlier run of the same pipeline under outputs/
or multirun/ when there is one, else from the stated estimates below. Dollars use litellm's offline
cost map (or `lm.price`), tokens counted as if nothing were cached.
"""
from __future__ import annotations

import json
import math
import os
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from optimas_cli.errors import UserError
from optimas_cli.flows.matched import matched_reference, reference_run
from optimas_cli.flows.resume import LRF_ONLY_TASKS, option_name
from optimas_cli.flows.setup import build_budget
from optimas_cli.lm.local.registry import is_local
from optimas_cli.lrf.collect import expected_collection
from optimas_cli.lrf.judge import JUDGE_COMPONENT
from optimas_cli.lrf.oracle import OracleLRF, is_oracle
from optimas_cli.lrf.stage import DrawnVersions, collecting_alone
from optimas_cli.report.paper_tables import optimization_runs
from optimas_cli.system import Pipeline, Splits
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.ledger import SEARCH_SAMPLE_PHASE, RunLedger
from optimas_cli.system.run_folder import ACCOUNTS_FILE

# Stated estimates, used where no earlier run of the pipeline measured the real value.
ESTIMATE = {
    "prompt_tokens": 400,  # per component call; the completion is estimated at its max_tokens (an upper bound)
    "judge_prompt_tokens": 1300, "judge_completion_tokens": 16,  # k=8 scored examples + the pair
    "optimizer_prompt_tokens": 600,  # an OPRO meta-prompt: instructions so far + three scored examples
    "seconds_per_local_call": 1.5,  # embedded 135M model, batched, on 2 CPU cores
    "seconds_per_api_call": 2.0,  # one API round trip; calls overlap up to lm.concurrency
    "seconds_per_lrf_step": 1.5,  # one MiniLM step of 16 pairs on a CPU
}
COLLECTION_PHASES = ("lrf_collection", "adaptation")  # Stage 1's and Stage 2's preference collection
PHASES = ("lrf_collection", "lrf_training", "lrf_judge", "local_optimization", SEARCH_SAMPLE_PHASE, "validation",
          "adaptation", "final_validation", "test", "test_initial")
LOOP_METHODS = ("optimas", "optimas_no_adapt")  # Algorithm 1 on r_k; Stage 2 as their method.adaptation says
ASSUMPTIONS = [
    "every component runs on every input (no `when` skips) and every sampled candidate output is distinct",
    "the first proposal for each component is accepted by the validation gate, every later one rejected",
    "every optimizable component gets preference pairs (skip_unpaired never picks one without)",
]
PAIRS_ASSUMPTION = ASSUMPTIONS[2]  # not made where there are no pairs (lrf=oracle)


class PhaseCount:
    """Expected executions per component and LM calls per attribution name, for one phase."""

    def __init__(self) -> None:
        self.executions: dict[str, float] = defaultdict(float)
        self.calls: dict[str, float] = defaultdict(float)
        self.fixed_seconds: float | None = None  # time that is not proportional to runs (LRF training)

    def run(self, comp: Component, n: float, values_per_input: float = 1.0) -> None:
        """n inputs through `comp`; a routing policy runs (and the ledger counts) every value on each."""
        self.executions[comp.name] += n * values_per_input
        if comp.calls_lm:
            self.calls[comp.name] += n * values_per_input


def rerun_counts(system, names: str | Sequence[str], n: float, config, phase: PhaseCount) -> None:
    """run_from(name), or run_changed(names): the components and everything downstream of them, on n inputs."""
    changed = {c for name in ([names] if isinstance(names, str) else names) for c in (name, *system.downstream(name))}
    for other in (c for c in system.order if c in changed):
        phase.run(system.components[other], n, system.components[other].values_per_input(config[other]))


def _optimizer(comp: Component, search: int, opt: Mapping, phase: PhaseCount) -> None:
    """The local optimizer's executions (optim/choice.py, prompt.py, weights.py) on the search sample."""
    if comp.kind is ConfigKind.CHOICE and not comp.per_instance:
        phase.run(comp, len(comp.choices) * search)  # every value scored by r_k
    elif comp.kind is ConfigKind.PROMPT:
        steps, cands = int(opt["num_steps"]), int(opt["num_candidates"])
        phase.run(comp, (1 + steps * cands) * search)  # the current prompt, then each proposal (at most)
        phase.calls[f"{comp.name}.optimizer"] += steps * cands
    elif comp.kind is ConfigKind.WEIGHTS:
        phase.run(comp, 2 * search)  # the current adapter and the trained one


def _first_picks(iterations: int, m: int, scheduler: str) -> float:
    """Expected number of iterations, among the first `iterations`, that pick a given component for
    the first time, divided by the chance 1/m of picking it: the sum over t of the chance that
    iteration t is a first pick. Closed forms (the plan takes no time per iteration): round robin
    picks each of the m once in the first m iterations; uniform (prioritized is planned as uniform)
    first picks at t with (1 - 1/m)^t, a geometric series."""
    if m == 0 or iterations <= 0:
        return 0.0
    if scheduler == "round_robin":
        return float(min(iterations, m))
    return m * (1 - (1 - 1 / m) ** iterations)


def _stage1(pipeline: Pipeline, splits: Splits, cfg: DictConfig, phases: dict, pair_share: float,
            train: bool = True) -> dict:
    """Stage 1 (lrf/stage.py): preference collection on the training split, then (`train`) the LRF's
    training steps and, where a component has a test split, the LLM judge on its test pairs.
    `pair_share`: the share of candidate pairs expected to differ in reward (the rest tie downstream)."""
    system, lrf = pipeline.system, OmegaConf.to_container(cfg.lrf, resolve=True)
    lm_temperature = float(OmegaConf.select(cfg, "lm.temperature", default=0.0) or 0.0)
    pairs = pair_share * expected_collection(system, system.default_config(), len(splits.train),
                                             lrf.get("collect") or {}, phases["lrf_collection"], lm_temperature)
    if not train:
        return {"pairs": pairs}
    settings = lrf.get("train") or {}
    # Pairs split by input into train / dev / test; a test split only where there are enough pairs
    # (lrf/stage.py: per component; the plan applies the threshold to the total, an estimate).
    enough = pairs >= int(lrf.get("min_test_pairs", 0) or 0)
    test_share = float(settings.get("test_fraction", 0.2)) if enough else 0.0
    dev_share = float(settings.get("dev_fraction", 0.2))
    if (lrf.get("judge") or {}).get("enabled", True):
        phases["lrf_judge"].calls[JUDGE_COMPONENT] += round(pairs * test_share)
    batches = max(1, math.ceil(pairs * max(0.0, 1 - test_share - dev_share) / int(settings.get("batch_size", 16))))
    return {"pairs": pairs, "lrf_steps": max(int(settings.get("epochs", 10)) * batches, int(lrf.get("min_steps", 0) or 0))}


def _lazy_refreshes(system, optimizable: list[str], iterations: int, scheduler: str) -> dict[str, float]:
    """Per component, the most times method.adaptation=lazy can refresh its r_k (optim/loop.py), whatever the gate
    accepts: when it is picked, at most once per iteration, never in the first (no update is accepted yet) and never
    for a component with no other optimizable one upstream or downstream of it (no update can make its pairs stale:
    lrf/stage.DrawnVersions). Its expected picks after the first iteration; round robin's are counted exactly
    (optim/scheduler.py picks component t mod m in iteration t), prioritized is planned as uniform."""
    context, m = DrawnVersions(system).context, len(optimizable)
    refreshes = {}
    for index, name in enumerate(optimizable):
        if iterations > 1 and context[name] & set(optimizable):
            refreshes[name] = (float(len(range(index, iterations, m)) - (index == 0)) if scheduler == "round_robin"
                               else (iterations - 1) / m)
    return refreshes


def _optimas(pipeline: Pipeline, splits: Splits, cfg: DictConfig, phases: dict, pair_share: float) -> dict:
    system, budget, method = pipeline.system, build_budget(cfg), cfg.method
    lrf = OmegaConf.to_container(cfg.lrf, resolve=True)
    collect, train = lrf.get("collect") or {}, lrf.get("train") or {}
    lm_temperature = float(OmegaConf.select(cfg, "lm.temperature", default=0.0) or 0.0)
    config = system.default_config()
    if is_oracle(lrf):  # the exact local reward: no Stage 1, no Stage 2 (methods/optimas.py)
        OracleLRF(pipeline)  # a pipeline without an exact model of itself is refused, as the run refuses it
        stage1, adaptation = {}, "none"
    else:
        stage1, adaptation = _stage1(pipeline, splits, cfg, phases, pair_share), str(method.get("adaptation", "lazy"))

    optimizable = [n for n in system.order if system.components[n].kind is not ConfigKind.NONE]
    m, search, n_val = len(optimizable), min(int(budget.search_size), len(splits.train)), len(splits.val)
    beyond = method.get("stage2_pool", "train") == "beyond_train"  # as methods/optimas.py picks Stage 2's inputs
    fresh_pool = (pipeline.splits.train[len(splits.train):] if beyond else None) or splits.train
    fresh = min(int(budget.fresh_size), len(fresh_pool))
    opt = {"num_steps": int(budget.num_steps), "num_candidates": int(budget.num_candidates),
           **dict((method.get("optimizer") or {}).get("prompt") or {})}
    loop_opt, val, sample = phases["local_optimization"], phases["validation"], phases[SEARCH_SAMPLE_PHASE]
    for name in system.order:  # the opening validation and search-sample runs
        comp = system.components[name]
        val.run(comp, n_val, comp.values_per_input(config[name]))
        sample.run(comp, search, comp.values_per_input(config[name]))
    # Every iteration adds the same expected work, except what follows an acceptance, which happens
    # at a first pick: T iterations add T times the one, `first` (the summed first-pick chances) the other.
    iterations, scheduler = int(budget.iterations), str(method.get("scheduler", "uniform"))
    first = _first_picks(iterations, m, scheduler)
    for name in optimizable:  # each component is picked with probability 1/m
        comp, share = system.components[name], 1 / m
        _scaled(lambda p, c=comp: _optimizer(c, search, opt, p), share * iterations, loop_opt)
        validated = first if comp.kind is ConfigKind.CHOICE and comp.per_instance else iterations
        _scaled(lambda p, n=name: rerun_counts(system, n, n_val, config, p), share * validated, val)
        # an acceptance: the search sample follows the new configuration; paper's Stage 2; routes re-measured
        _scaled(lambda p, n=name: rerun_counts(system, n, search, config, p), share * first, sample)
        if adaptation == "paper":
            _scaled(lambda p: expected_collection(system, config, fresh, collect, p, lm_temperature), share * first, phases["adaptation"])
            if comp.kind is ConfigKind.CHOICE and comp.per_instance:  # adapted routes: validation and search
                _scaled(lambda p, n=name: rerun_counts(system, n, n_val, config, p), share * first, val)
                _scaled(lambda p, n=name: rerun_counts(system, n, search, config, p), share * first, sample)
    accepted = first if optimizable else 0.0
    adaptations = accepted if adaptation == "paper" else 0.0
    loop: dict = {}
    if adaptation == "lazy" and (refreshes := _lazy_refreshes(system, optimizable, iterations, scheduler)):
        # A refresh moves the LRF routes it rescores (Stage2.scores_changed_by: on a frozen backbone only its own),
        # which are re-validated and re-run on the search sample: at most every per-instance choice's.
        routers = [n for n in optimizable if system.components[n].kind is ConfigKind.CHOICE and system.components[n].per_instance]
        heads, rerouted = lrf.get("train_backbone") == "heads", False
        for name, times in refreshes.items():
            _scaled(lambda p, n=name: expected_collection(collecting_alone(system, n), config, fresh, collect, p,
                                                          lm_temperature), times, phases["adaptation"])
            if routed := [r for r in routers if r == name or not heads]:
                rerouted = True
                _scaled(lambda p, r=routed: rerun_counts(system, r, n_val, config, p), times, val)
                _scaled(lambda p, r=routed: rerun_counts(system, r, search, config, p), times, sample)
        adaptations = sum(refreshes.values())
        loop["adaptation_bound"] = (
            f"adaptation is an upper bound (method.adaptation=lazy): at most {adaptations:.2f} refreshes, one per "
            f"iteration after the first, each of the picked component's r_k on {fresh} fresh inputs (budget.fresh_size)"
            + (", then the LRF routes it moves re-validated" if rerouted else "")
            + "; how many happen depends on what the gate accepts")
    stage2 = int(train.get("stage2_steps", 10)) * adaptations
    return {**stage1, **loop, "stage2_steps": stage2, "accepted_updates": accepted}


def _scaled(add, weight: float, into: PhaseCount) -> None:
    """Add what `add(phase)` counts, weighted by the probability that it happens."""
    if weight <= 0:
        return
    part = PhaseCount()
    add(part)
    for k, v in part.executions.items():
        into.executions[k] += weight * v
    for k, v in part.calls.items():
        into.calls[k] += weight * v


def lrf_task(cfg: DictConfig) -> str | None:
    """`collect` or `train-lrf` when the config runs Stage 1 alone, else None."""
    task = OmegaConf.select(cfg, "task", default=None)
    return str(task) if task in LRF_ONLY_TASKS else None


def count_phases(pipeline: Pipeline, splits: Splits, cfg: DictConfig,
                 pair_share: float = 1.0) -> tuple[dict[str, PhaseCount], dict]:
    """Expected executions and calls of each phase of `optimas run` (or `collect` / `train-lrf`) with
    this config; `pair_share` as in _stage1 (1.0: every candidate pair is a preference)."""
    system, method = pipeline.system, str(cfg.method.name)
    phases = {p: PhaseCount() for p in PHASES}
    loop: dict = {}
    task = lrf_task(cfg)
    if task:  # `optimas collect` / `optimas train-lrf`: Stage 1 only, no method, no test
        # imported here: lrf_tasks imports flows.run, which imports this module
        from optimas_cli.flows.lrf_tasks import refuse_oracle

        refuse_oracle(cfg)
        return phases, _stage1(pipeline, splits, cfg, phases, pair_share, train=task == "train-lrf")
    if matched_reference(cfg):  # the cap, not the iterations, ends it: see matched_phase
        pass
    elif method in LOOP_METHODS:
        loop = _optimas(pipeline, splits, cfg, phases, pair_share)
    elif method not in ("unoptimized", "single_llm"):
        loop = {"not_planned": f"the optimization phases of method {method!r} are not modelled; "
                               "only the final validation and test are planned"}
    config = system.default_config()
    evaluations = [("final_validation", len(splits.val)), ("test", len(splits.test) * int(cfg.repeats))]
    if method != "unoptimized":  # the initial configuration on the same test examples (flows/run.before_and_after)
        evaluations.append(("test_initial", len(splits.test) * int(cfg.repeats)))
    for phase, n in evaluations:
        if method == "single_llm" and phase != "test_initial":  # one call per example, counted as one system run
            phases[phase].executions["single_llm"] += n * len(system)
            phases[phase].calls["single_llm"] += n
            continue
        for name in system.order:
            phases[phase].run(system.components[name], n, system.components[name].values_per_input(config[name]))
    return phases, loop


# -- what was measured before ------------------------------------------------------------------------
def previous_run(pipeline: str, method: str, root: Path = Path(".")) -> tuple[Path, dict] | None:
    """The newest results.json of the same pipeline (the same method preferred) under outputs/ or multirun/."""
    found = []
    for pattern in ("outputs/*/*/results.json", "multirun/*/*/*/results.json"):
        for path in root.glob(pattern):
            try:
                results = json.loads(path.read_text())
            except (OSError, ValueError):
                continue
            if results.get("pipeline") == pipeline and "ledger" in results:
                found.append((results.get("method") == method, path.stat().st_mtime, path, results))
    if not found:
        return None
    _, _, path, results = max(found, key=lambda f: f[:2])
    return path.parent, results


def measured_pairs(folder: Path) -> tuple[int, int] | None:
    """(preference pairs, candidate pairs considered) of an earlier run's collection, from its
    collect_stats.json (the candidate pairs that found no preference tied downstream or were the same
    text); None where it collected none."""
    try:
        stats = json.loads((folder / "collect_stats.json").read_text())
        considered = sum(s["pairs"] + s["near_ties"] + s["identical_outputs"] for s in stats.values())
        return (sum(s["pairs"] for s in stats.values()), considered) if considered else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None


def _per_call_tokens(measured: dict | None, name: str) -> tuple[float, float] | None:
    """(prompt, completion) tokens per generated call of `name` in an earlier run."""
    row = ((measured or {}).get("ledger", {}).get("lm", {}).get("by_component") or {}).get(name)
    generated = (row or {}).get("calls", 0) - (row or {}).get("cache_hits", 0)
    if not row or generated <= 0:
        return None
    return row["prompt_tokens"] / generated, row["completion_tokens"] / generated


def _estimated_tokens(system, name: str, lm: Mapping) -> tuple[float, float]:
    if name == JUDGE_COMPONENT:
        return ESTIMATE["judge_prompt_tokens"], ESTIMATE["judge_completion_tokens"]
    if name.endswith(".optimizer"):
        return ESTIMATE["optimizer_prompt_tokens"], 256
    comp = system.components.get(name)
    return ESTIMATE["prompt_tokens"], float(getattr(comp, "max_tokens", None) or lm.get("max_tokens") or 256)


def price_per_token(lm: Mapping) -> tuple[float, float, str] | None:
    """($ per prompt token, $ per completion token, source); None when the model has no known price."""
    model = str(lm.get("model", ""))
    if is_local(model):
        return 0.0, 0.0, "embedded model: no API charge"
    price = lm.get("price") or {}
    if price.get("input_per_mtok") is not None and price.get("output_per_mtok") is not None:
        return float(price["input_per_mtok"]) / 1e6, float(price["output_per_mtok"]) / 1e6, "lm.price"
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # the cost map litellm ships, not the network
    import litellm

    entry = litellm.model_cost.get(model) or litellm.model_cost.get(model.split("/", 1)[-1])
    if not entry or entry.get("input_cost_per_token") is None:
        return None
    return float(entry["input_cost_per_token"]), float(entry.get("output_cost_per_token") or 0.0), "litellm cost map"


def _seconds(phase: str, runs: float, calls: float, loop: dict, measured: dict | None, lm: Mapping) -> tuple[float, str]:
    """Wall seconds of a phase: an earlier run's seconds per run of that phase, else the estimates."""
    before = ((measured or {}).get("ledger", {}).get("by_phase") or {}).get(phase)
    if before and before.get("runs", 0) > 0 and runs > 0:
        batched = loop.get("collection_runs_ratio") if phase in COLLECTION_PHASES else None
        return runs * before["seconds"] / before["runs"] * (batched or 1.0), "measured"
    judged = (((measured or {}).get("ledger", {}).get("lm") or {}).get("by_component") or {}).get(JUDGE_COMPONENT) or {}
    if before and before["seconds"] and phase == "lrf_judge" and calls > 0 and judged.get("calls"):
        return calls * before["seconds"] / judged["calls"], "measured"  # seconds per judged pair
    if before and before["seconds"] and phase == "lrf_training" and loop.get("lrf_steps") and loop.get("earlier_pairs"):
        # seconds per collected pair: an epoch's steps grow with the pairs (Amazon: 2.6 s per pair at 61
        # pairs, 2.7 at 405); the earlier run's total said 2.7 min for a run that trained 18
        return loop["pairs"] * before["seconds"] / loop["earlier_pairs"], "measured"
    if before and before["seconds"] and ((phase == "lrf_training" and loop.get("lrf_steps")) or
                                         (phase == "lrf_judge" and calls > 0)):
        return float(before["seconds"]), "measured"  # no runs to scale by: the earlier run's time as it was
    local = is_local(str(lm.get("model", "")))
    per_call = ESTIMATE["seconds_per_local_call"] if local else (
        ESTIMATE["seconds_per_api_call"] / max(1, int(lm.get("concurrency", 1) or 1)))
    steps = {"lrf_training": loop.get("lrf_steps", 0), "adaptation": loop.get("stage2_steps", 0)}.get(phase, 0)
    return calls * per_call + steps * ESTIMATE["seconds_per_lrf_step"], "estimate"


def _collection_runs_ratio(pipeline: Pipeline, cfg: DictConfig, measured: dict) -> float | None:
    """The earlier run's collection runs per input over this plan's, where they differ (another candidate
    count): the embedded model generates an input's candidates, and then their downstream runs, as one
    batch, so collection time follows inputs, not runs. Amazon, 50 inputs, similar cache hits: 3
    candidates 66 s per input (7 runs), 8 candidates 57 s (17 runs); timed per run, the 8-candidate
    collection was planned at 2.2 h and took 47 min."""
    earlier = measured.get("config") or {}
    if not isinstance((earlier.get("lrf") or {}).get("collect"), Mapping):
        return None

    def per_input(collect: Mapping, lm_temperature) -> float:
        tally = PhaseCount()
        expected_collection(pipeline.system, pipeline.system.default_config(), 1, collect, tally,
                            float(lm_temperature or 0.0))
        return sum(tally.executions.values())

    planned = per_input(OmegaConf.to_container(cfg.lrf.collect, resolve=True) or {},
                        OmegaConf.select(cfg, "lm.temperature", default=0.0))
    before = per_input(earlier["lrf"]["collect"], (earlier.get("lm") or {}).get("temperature"))
    return round(before / planned, 4) if planned and before and abs(before - planned) > 1e-9 else None


def make_plan(cfg: DictConfig, pipeline: Pipeline, splits: Splits, root: Path = Path("."),
              run_dir: Path | None = None) -> dict:
    """The plan as results.json stores it: per phase runs, calls, tokens, dollars and seconds.
    `run_dir`: the run's folder, where a matched-cost run finds its reference (flows/matched.py)."""
    system, lm = pipeline.system, OmegaConf.to_container(cfg.lm, resolve=True)
    earlier = previous_run(pipeline.name, str(cfg.method.name), root)
    measured = earlier[1] if earlier else None
    collected = measured_pairs(earlier[0]) if earlier else None
    share = collected[0] / collected[1] if collected else None
    counts, loop = count_phases(pipeline, splits, cfg, 1.0 if share is None else share)
    if collected and "pairs" in loop:
        loop["pair_share"], loop["earlier_pairs"] = round(share, 4), collected[0]
    if measured and is_local(str(lm.get("model", ""))) and (ratio := _collection_runs_ratio(pipeline, cfg, measured)):
        loop["collection_runs_ratio"] = ratio
    price = price_per_token(lm)
    rows = {phase: row for phase, count in counts.items()
            if (row := phase_row(phase, count, system, lm, loop, measured, price)) is not None}
    if matched_reference(cfg) and not lrf_task(cfg):
        row, loop["not_planned"] = matched_phase(cfg, pipeline.name, run_dir, price, root)
        if row is not None:
            rows = {MATCHED_PHASE: row, **rows}
    return {
        **totals(rows, price), "model": lm.get("model"),
        "price": None if price is None else {"input_per_token": price[0], "output_per_token": price[1],
                                             "source": price[2]},
        "measured_from": str(earlier[0]) if earlier else None,
        "estimates": {} if earlier else dict(ESTIMATE),
        "assumptions": ([a for a in ASSUMPTIONS if a != PAIRS_ASSUMPTION or "pairs" in loop]
                        if cfg.method.name in LOOP_METHODS and not matched_reference(cfg) and not lrf_task(cfg)
                        else ASSUMPTIONS[:1]),
        **{k: v for k, v in loop.items() if k in ("accepted_updates", "pairs", "pair_share", "collection_runs_ratio",
                                                  "adaptation_bound", "not_planned")},
    }


def phase_row(phase: str, count: PhaseCount, system, lm: Mapping, loop: dict, measured: dict | None,
              price, timed_as: str | None = None) -> dict | None:
    """One phase's runs, calls, tokens, dollars and seconds (None when it spends nothing); its seconds
    per run are those an earlier run measured for phase `timed_as` (default: the same phase)."""
    runs = sum(count.executions.values()) / len(system)
    prompt = completion = 0.0
    basis = set()
    for name, calls in count.calls.items():
        per = _per_call_tokens(measured, name)
        basis.add("measured" if per else "estimate")
        p, c = per or _estimated_tokens(system, name, lm)
        prompt, completion = prompt + calls * p, completion + calls * c
    calls = sum(count.calls.values())
    seconds, time_basis = _seconds(timed_as or phase, runs, calls, loop, measured, lm)
    if not (runs or calls or seconds):
        return None
    return {
        "runs": round(runs, 4), "calls": round(calls, 2), "tokens": round(prompt + completion),
        "usd": None if price is None else round(prompt * price[0] + completion * price[1], 6),
        "seconds": round(seconds, 1), "tokens_from": "/".join(sorted(basis)) or "-", "seconds_from": time_basis,
    }


def totals(rows: dict[str, dict], price) -> dict:
    """The phases and their sums, as a plan stores them."""
    total = {k: round(sum(r[k] for r in rows.values()), 4) for k in ("runs", "calls", "tokens", "seconds")}
    total["usd"] = None if price is None else round(sum(r["usd"] for r in rows.values()), 6)
    return {"phases": rows, "total": total}


def plan_run(cfg: DictConfig, run_dir: Path | None = None) -> str:
    """`optimas plan`: build the pipeline and its splits as `optimas run` would, and render the plan
    (`run_dir`: the run folder the user named with hydra.run.dir, if any)."""
    from optimas_cli.flows.setup import budget_splits, build_method, build_pipeline

    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
    build_method(cfg, build_budget(cfg))  # the method's own checks of its settings, as `optimas run` makes them
    title = (f"plan: {pipeline.name} · {lrf_task(cfg) or f'method {cfg.method.name}'} · budget {cfg.budget.name} · "
             f"splits {splits.sizes()} · repeats {cfg.repeats}")
    return render(make_plan(cfg, pipeline, splits, run_dir=run_dir), title)


# -- matched cost: the optimization spends the reference's runs --------------------------------------
MATCHED_PHASE = "optimize_to_cap"


def matched_phase(cfg: DictConfig, pipeline: str, run_dir: Path | None, price,
                  root: Path = Path(".")) -> tuple[dict | None, str]:
    """A matched-cost run optimizes until its cap: the reference's executed optimization runs, found
    as the run will find them (flows/matched.py), at the pace (seconds per executed run) of an earlier
    run of the same method and pipeline when one measured it, else at the reference's; with the line
    that says so. Its LM calls and tokens are not modelled (they depend on what the method does)."""
    reference, method = matched_reference(cfg), str(cfg.method.name)
    what = f"matched cost: the optimization runs until the cap budget.max_runs_from={reference} sets"
    if run_dir is None:
        return None, (f"{what}, what the {reference} run in the run folder's parent spent optimizing (give "
                      "hydra.run.dir=<parent>/<name> to look it up); only the final validation and test are planned")
    try:
        _, results = reference_run(cfg, pipeline, Path(run_dir))
    except UserError as err:
        return None, f"{what}; no cap yet: {err}"
    cap = optimization_runs(results.get("ledger") or {})
    if cap is None:
        return None, f"{what}; the reference run predates the executed-run count, so the run will refuse it"
    own = earlier_pace(pipeline, method, root, exclude=Path(run_dir))
    if own:
        pace, timed_as = own[0], f"an earlier {method} run ({own[1]})"
    else:  # the reference's whole optimization phase over the runs it executed
        pace, timed_as = optimization_pace(results.get("ledger") or {}) or 0.0, f"the {reference} run"
    row = {"runs": round(float(cap), 4), "calls": 0.0, "tokens": 0, "usd": None if price is None else 0.0,
           "seconds": round(pace * cap, 1), "tokens_from": "not modelled", "seconds_from": timed_as}
    caveat = "" if own else (f"; {method}'s own work besides system runs (an LM optimizer's calls, training) "
                             f"is timed as the {reference} run's, as no earlier {method} run of {pipeline} measured it")
    return row, (f"{what}: {cap:g} executed runs, what the {reference} run spent optimizing, timed at the pace of "
                 f"{timed_as}; the LM calls and tokens of those runs are not modelled" + caveat)


def optimization_pace(ledger: dict) -> float | None:
    """Wall seconds per executed optimization run (the `optimize` phase over the runs before the final
    validation and test); None where nothing was executed yet."""
    runs = optimization_runs(ledger)
    seconds = ((ledger.get("by_phase") or {}).get("optimize") or {}).get("seconds")
    return float(seconds) / runs if runs and seconds else None


def earlier_pace(pipeline: str, method: str, root: Path, exclude: Path | None = None) -> tuple[float, Path] | None:
    """The newest measured pace of `method` on `pipeline` under outputs/ or multirun/: a finished run's
    results.json, or a stopped run's last checkpoint (accounts.json), so a long run that was killed
    times its own continuation."""
    found = []
    for pattern in ("outputs/*/*/config.yaml", "multirun/*/*/*/config.yaml"):
        for config_file in root.glob(pattern):
            folder = config_file.parent
            if exclude is not None and folder.resolve() == exclude.resolve():
                continue
            try:
                config = OmegaConf.to_container(OmegaConf.load(config_file))
                if (option_name(config, "pipeline"), option_name(config, "method")) != (pipeline, method):
                    continue
                ledger = _measured_ledger(folder)
            except (OSError, ValueError, KeyError, TypeError, OmegaConfBaseException):
                continue  # a damaged or half-written folder measures nothing
            if ledger is not None and (pace := optimization_pace(ledger)) is not None:
                found.append((folder.stat().st_mtime, pace, folder))
    if not found:
        return None
    _, pace, folder = max(found, key=lambda f: f[0])
    return pace, folder


def _measured_ledger(folder: Path) -> dict | None:
    """A run folder's ledger as results.json stores it: the finished run's, else its last checkpoint's
    (None for a checkpoint written before the ledger recorded its number of components)."""
    if (folder / "results.json").is_file():
        return json.loads((folder / "results.json").read_text()).get("ledger")
    if not (folder / ACCOUNTS_FILE).is_file():
        return None
    state = json.loads((folder / ACCOUNTS_FILE).read_text())["ledger"]
    if not state.get("num_components"):
        return None
    ledger = RunLedger(int(state["num_components"]))
    ledger.restore(state)
    return ledger.to_dict()


def render(plan: dict, title: str) -> str:
    """The plan as a fixed-width table plus the lines that say where its numbers come from."""
    usd = "unpriced" if plan["price"] is None else None
    lines = [title, f"{'phase':<18} {'runs':>9} {'LM calls':>9} {'tokens':>11} {'dollars':>10} {'wall':>9}  from"]
    for phase, r in [*plan["phases"].items(), ("total", plan["total"])]:
        dollars = usd or f"${r['usd']:.4f}"
        src = "" if phase == "total" else f"tokens {r['tokens_from']}, time {r['seconds_from']}"
        lines.append(f"{phase:<18} {r['runs']:>9.2f} {r['calls']:>9.1f} {r['tokens']:>11,.0f} {dollars:>10} "
                     f"{_duration(r['seconds']):>9}  {src}")
    lines.append(f"model {plan['model']}: " + (
        "no price known (set lm.price.input_per_mtok and lm.price.output_per_mtok)" if plan["price"] is None
        else plan["price"]["source"]))
    lines.append(f"measured from {plan['measured_from']}" if plan["measured_from"] else
                 "no earlier run of this pipeline under outputs/ or multirun/: tokens and time are estimates "
                 + ", ".join(f"{k}={v}" for k, v in plan["estimates"].items()))
    if "pairs" in plan:
        share = (f" ({100 * plan['pair_share']:.1f}% of candidate pairs, the share with a preference in the earlier run)"
                 if "pair_share" in plan else " (every candidate pair a preference: no earlier run measured the share)")
        lines.append(f"expected preference pairs {plan['pairs']:.0f}{share}" + (
            f", accepted updates {plan['accepted_updates']:.2f}" if "accepted_updates" in plan else ""))
    elif "accepted_updates" in plan:  # lrf=oracle: no pairs
        lines.append(f"accepted updates {plan['accepted_updates']:.2f}")
    if "adaptation_bound" in plan:
        lines.append(plan["adaptation_bound"])
    if "collection_runs_ratio" in plan:
        lines.append(f"collection timed per input, not per run: it makes {1 / plan['collection_runs_ratio']:.2f}x the "
                     "earlier run's runs per input, which the embedded model generates in one batch per input")
    if "not_planned" in plan:
        lines.append(plan["not_planned"])
    lines += [f"assumes {a}" for a in plan["assumptions"]]
    return "\n".join(lines)


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else (f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h")
