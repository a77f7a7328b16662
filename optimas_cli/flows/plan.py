"""`optimas plan`: what a run will spend, per phase, before it spends anything (no LM is called).

Every method declares what it will execute (Method.estimate, counted with methods/cost.py, which says what each
estimate assumes); the plan adds the final validation and the test as the method evaluates them, and turns the
counts into equivalent system runs, LM calls, tokens, dollars and seconds. A method that can change nothing of
the pipeline is refused here (Method.fit), as `optimas run` refuses it, before any folder exists.

Tokens per call, and seconds per run of each phase, come from the most recent earlier run of the same pipeline
under outputs/ or multirun/ when there is one (flows/earlier_runs.py). Else tokens are the stated estimates
below (a completion at its max_tokens: an upper bound) and seconds the calibration below: per generated LM call
(the calls the LM-call cache serves cost nothing: a greedy test's repeats, the final validation of a configuration
the method validated, the search sample's first run after Stage 1), per LRF training step and per completion a
LoRA adapter is trained on. Dollars use litellm's offline cost map (or `lm.price`), tokens counted as if nothing
were cached.
"""
from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from optimas_cli.errors import UserError
from optimas_cli.flows.earlier_runs import earlier_pace, measured_pairs, previous_run
from optimas_cli.flows.matched import matched_reference, reference_run
from optimas_cli.flows.resume import LRF_ONLY_TASKS
from optimas_cli.flows.setup import budget_splits, build_budget, build_method, build_pipeline
from optimas_cli.lm.local.registry import is_local
from optimas_cli.lrf.collect import expected_collection
from optimas_cli.lrf.judge import JUDGE_COMPONENT
from optimas_cli.lrf.oracle import refuse_oracle
from optimas_cli.methods.base import Method
from optimas_cli.methods.cost import (
    COLLECTION_PHASES,
    LRF_PAIRS,
    LRF_STEP,
    WEIGHTS_SAMPLE,
    Conditions,
    Estimate,
    PhaseCount,
    full_runs,
    stage1,
)
from optimas_cli.system import Pipeline, Splits
from optimas_cli.system.budget import EVALUATION_PHASES, optimization_pace, optimization_runs

# Stated token estimates, used where no earlier run of the pipeline measured the real value.
ESTIMATE = {
    "prompt_tokens": 400,  # per component call; the completion is estimated at its max_tokens (an upper bound)
    "judge_prompt_tokens": 1300, "judge_completion_tokens": 16,  # k=8 scored examples + the pair
    "optimizer_prompt_tokens": 600,  # an OPRO meta-prompt: instructions so far + three scored examples
    "seconds_per_api_call": 2.0,  # one API round trip; calls overlap up to lm.concurrency
    "seconds_per_lrf_step": 1.5,  # one MiniLM step of 16 pairs on a CPU (Stage 2's steps)
}
# Seconds where no earlier run measured them, calibrated on the committed ledgers of 479aff9 (2 idle CPU cores,
# the embedded SmolLM2-135M): `make run` (docs/results/speed/README.md, its phases' seconds; its calls and cache
# hits are those of every later run of that revision) and Amazon budget=cpu
# (docs/results/speed/runs/amazon-optimas-s0-479aff9/results.json). tests/test_plan_calibration.py recomputes
# the Amazon figures from that ledger.
CALIBRATION = {
    # A generated component call costs call_seconds + call_seconds_per_max_token x its component's max_tokens: the
    # line through the two runs' collection + validation + test (+ test_initial) seconds per generated call, make
    # run 257.7 s / 348 calls (0.741 s, generated calls' mean max_tokens 58.3) and Amazon 1,505.1 s / 1,665 (0.904 s,
    # mean max_tokens 111.6; by_component's calls less cache hits).
    "call_seconds": 0.56,
    "call_seconds_per_max_token": 0.0031,
    "seconds_per_judge_call": 3.5,  # the LLM judge's calls (~2,700-token prompts): Amazon 28.2 s / 8
    "seconds_per_tool_call": 10.4,  # an optimizer's own LM call (a meta-prompt, ~100 generated tokens): Amazon 31.1 s / 3
    # Stage 1's LRF training, fixed + per pair: Amazon 112.9 s for 61 pairs, make run ~46 s for 4 (its ledger's 359 s
    # less the phases the README quotes)
    "lrf_training_seconds": 41.3,
    "lrf_training_seconds_per_pair": 1.17,
    "seconds_per_weights_sample": 7.0,  # a completion GRPO trains on: Amazon's 2 proposals 672 s / (2 x 6 x 2 x 4)
    "pair_share": 0.165,  # candidate pairs with a preference: Amazon 61 of 369 (its collect_stats.json)
}


def lrf_task(cfg: DictConfig) -> str | None:
    """`collect` or `train-lrf` when the config runs Stage 1 alone, else None."""
    task = OmegaConf.select(cfg, "task", default=None)
    return str(task) if task in LRF_ONLY_TASKS else None


def lm_temperature(cfg: DictConfig) -> float:
    return float(OmegaConf.select(cfg, "lm.temperature", default=0.0) or 0.0)


def count_phases(cfg: DictConfig, pipeline: Pipeline, splits: Splits, method: Method | None,
                 pair_share: float = 1.0) -> Estimate:
    """What `optimas run` (or `collect` / `train-lrf`, `method` None) with this config will execute, per phase:
    the method's own estimate (a matched-cost run's optimization is matched_phase's), then its evaluations."""
    task = lrf_task(cfg)
    if task:  # `optimas collect` / `optimas train-lrf`: Stage 1 only, no method, no test
        lrf = OmegaConf.to_container(cfg.lrf, resolve=True)
        refuse_oracle(task, lrf)
        est = Estimate(validated_final=False)
        est.facts.update(stage1(pipeline.system, len(splits.train), lrf, lm_temperature(cfg), est.phases, pair_share,
                                train=task == "train-lrf", max_runs=build_budget(cfg).max_runs))
        return est
    est = Estimate() if matched_reference(cfg) else method.estimate(pipeline, splits,
                                                                    Conditions(lm_temperature(cfg), pair_share))
    add_evaluations(cfg, pipeline, splits, method, est)
    return est


def add_evaluations(cfg: DictConfig, pipeline: Pipeline, splits: Splits, method: Method, est: Estimate) -> None:
    """The final validation, the test's repeats and the initial configuration on the same test examples
    (flows/run.before_and_after), marking the calls the LM-call cache serves: with a greedy LM a repeat is the
    first one again; the final validation repeats the method's own validation of that configuration; the
    initial configuration repeats the test's calls upstream of what the method changed, and of what it may
    change, the share its expected accepted updates change."""
    system, repeats, greedy = pipeline.system, int(cfg.repeats), lm_temperature(cfg) == 0.0
    method.evaluation(pipeline, len(splits.val), final := PhaseCount())
    if est.validated_final:
        final.cached.update(final.calls)
    est.phases["final_validation"].add(final)
    method.evaluation(pipeline, len(splits.test), once := PhaseCount())
    est.phases["test"].add(once)
    if repeats > 1:
        if greedy:
            once.cached.update(once.calls)
        est.phases["test"].add(once, repeats - 1)
    if not method.optimizes and type(method).evaluate is Method.evaluate:
        return  # nothing changed: the test's scores are the initial configuration's
    targets = method.targets(pipeline)
    reach = {c for t in targets for c in (t, *system.downstream(t))}
    changed = min(1.0, est.facts["accepted_updates"] / len(targets)) if "accepted_updates" in est.facts else 1.0
    initial = PhaseCount()
    full_runs(system, len(splits.test) * repeats, initial)
    for name, calls in initial.calls.items():
        fresh = len(splits.test) * (changed if targets and name in reach else 1.0 if not targets else 0.0)
        initial.cached[name] = calls - fresh if greedy else calls * (1 - fresh / len(splits.test))
    est.phases["test_initial"].add(initial)


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


def _seconds(phase: str, count: PhaseCount, runs: float, facts: dict, measured: dict | None,
             lm: Mapping, system) -> tuple[float, str]:
    """Wall seconds of a phase: an earlier run's seconds per run of that phase, else the calibration."""
    calls = sum(count.calls.values())
    before = ((measured or {}).get("ledger", {}).get("by_phase") or {}).get(phase)
    if before and before.get("runs", 0) > 0 and runs > 0:
        batched = facts.get("collection_runs_ratio") if phase in COLLECTION_PHASES else None
        return runs * before["seconds"] / before["runs"] * (batched or 1.0), "measured"
    judged = (((measured or {}).get("ledger", {}).get("lm") or {}).get("by_component") or {}).get(JUDGE_COMPONENT) or {}
    if before and before["seconds"] and phase == "lrf_judge" and calls > 0 and judged.get("calls"):
        return calls * before["seconds"] / judged["calls"], "measured"  # seconds per judged pair
    if before and before["seconds"] and phase == "lrf_training" and facts.get("lrf_steps") and facts.get("earlier_pairs"):
        # seconds per collected pair: an epoch's steps grow with the pairs (Amazon: 2.6 s per pair at 61
        # pairs, 2.7 at 405); the earlier run's total said 2.7 min for a run that trained 18
        return facts["pairs"] * before["seconds"] / facts["earlier_pairs"], "measured"
    if before and before["seconds"] and ((phase == "lrf_training" and facts.get("lrf_steps")) or
                                         (phase == "lrf_judge" and calls > 0)):
        return float(before["seconds"]), "measured"  # no runs to scale by: the earlier run's time as it was
    local = is_local(str(lm.get("model", "")))
    api = ESTIMATE["seconds_per_api_call"] / max(1, int(lm.get("concurrency", 1) or 1))
    seconds = (count.work.get(LRF_STEP, 0.0) * ESTIMATE["seconds_per_lrf_step"]
               + count.work.get(WEIGHTS_SAMPLE, 0.0) * CALIBRATION["seconds_per_weights_sample"])
    if LRF_PAIRS in count.work:
        seconds += CALIBRATION["lrf_training_seconds"] + CALIBRATION["lrf_training_seconds_per_pair"] * count.work[LRF_PAIRS]
    for name, n in count.calls.items():
        generated = n - count.cached.get(name, 0.0)
        if not local:
            per_call = api
        elif name == JUDGE_COMPONENT:
            per_call = CALIBRATION["seconds_per_judge_call"]
        elif "." in name:  # an optimizer's own call: dspy.proposer, textgrad.backward, <component>.optimizer, ...
            per_call = CALIBRATION["seconds_per_tool_call"]
        else:
            max_tokens = getattr(system.components.get(name), "max_tokens", None) or lm.get("max_tokens") or 256
            per_call = CALIBRATION["call_seconds"] + CALIBRATION["call_seconds_per_max_token"] * float(max_tokens)
        seconds += generated * per_call
    return seconds, "calibrated" if local else "estimate"


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
    `run_dir`: the run's folder, where a matched-cost run finds its reference (flows/matched.py).
    A method that can change nothing of the pipeline is refused (Method.fit)."""
    system, lm = pipeline.system, OmegaConf.to_container(cfg.lm, resolve=True)
    method = None if lrf_task(cfg) else build_method(cfg, build_budget(cfg))
    if method is not None:
        method.fit(pipeline)
    earlier = previous_run(pipeline.name, str(cfg.method.name), root)
    measured = earlier[1] if earlier else None
    collected = measured_pairs(earlier[0]) if earlier else None
    share = collected[0] / collected[1] if collected else CALIBRATION["pair_share"]
    est = count_phases(cfg, pipeline, splits, method, share)
    facts = est.facts
    if "pairs" in facts:
        facts["pair_share"] = round(share, 4)
        if collected:
            facts["earlier_pairs"] = collected[0]
    if measured and is_local(str(lm.get("model", ""))) and (ratio := _collection_runs_ratio(pipeline, cfg, measured)):
        facts["collection_runs_ratio"] = ratio
    price = price_per_token(lm)
    rows = {phase: row for phase, count in est.phases.items()
            if (row := phase_row(phase, count, system, lm, facts, measured, price)) is not None}
    if matched_reference(cfg) and not lrf_task(cfg):
        row, facts["not_planned"] = matched_phase(cfg, pipeline.name, run_dir, price, root)
        if row is not None:
            rows = {MATCHED_PHASE: row, **rows}
    return {
        **totals(rows, price), "split": split(rows), "max_runs": build_budget(cfg).max_runs, "model": lm.get("model"),
        "price": None if price is None else {"input_per_token": price[0], "output_per_token": price[1],
                                             "source": price[2]},
        "measured_from": str(earlier[0]) if earlier else None,
        "estimates": {} if earlier else {**ESTIMATE, **CALIBRATION},
        "assumptions": est.assumptions,
        **{k: v for k, v in facts.items() if k in ("accepted_updates", "pairs", "pair_share", "earlier_pairs",
                                                   "collection_runs_ratio", "adaptation_bound", "not_planned",
                                                   "stage1_size")},
    }


STAGE1_PHASES = ("lrf_collection", "lrf_training", "lrf_judge")


def split(rows: dict[str, dict]) -> dict[str, float]:
    """The plan's executed runs in three parts: Stage 1 (the LRF's collection, training and judge), the loop
    (everything else before the final validation: what budget.max_runs caps besides Stage 1) and the evaluation
    (the final validation and the test, outside the cap)."""
    parts = {"stage1": 0.0, "loop": 0.0, "evaluation": 0.0}
    for phase, row in rows.items():
        part = "stage1" if phase in STAGE1_PHASES else "evaluation" if phase in EVALUATION_PHASES else "loop"
        parts[part] += row["runs"]
    return {k: round(v, 4) for k, v in parts.items()}


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
    seconds, time_basis = _seconds(timed_as or phase, count, runs, loop, measured, lm, system)
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
    pipeline = build_pipeline(cfg)
    splits = budget_splits(pipeline, build_budget(cfg))
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


def render(plan: dict, title: str) -> str:
    """The plan as a fixed-width table plus the lines that say where its numbers come from."""
    usd = "unpriced" if plan["price"] is None else None
    lines = [title, f"{'phase':<18} {'runs':>9} {'LM calls':>9} {'tokens':>11} {'dollars':>10} {'wall':>9}  from"]
    for phase, r in [*plan["phases"].items(), ("total", plan["total"])]:
        dollars = usd or f"${r['usd']:.4f}"
        src = "" if phase == "total" else f"tokens {r['tokens_from']}, time {r['seconds_from']}"
        lines.append(f"{phase:<18} {r['runs']:>9.2f} {r['calls']:>9.1f} {r['tokens']:>11,.0f} {dollars:>10} "
                     f"{_duration(r['seconds']):>9}  {src}")
    if "split" in plan:  # a method's plan (headroom's has no Stage 1 or loop)
        lines.append(split_line(plan))
    lines.append(f"model {plan['model']}: " + (
        "no price known (set lm.price.input_per_mtok and lm.price.output_per_mtok)" if plan["price"] is None
        else plan["price"]["source"]))
    lines.append(f"measured from {plan['measured_from']}" if plan["measured_from"] else
                 "no earlier run of this pipeline under outputs/ or multirun/: tokens are estimates, time calibrated "
                 "on the committed ledgers (2 CPU cores, the embedded model): "
                 + ", ".join(f"{k}={v}" for k, v in plan["estimates"].items()))
    if "pairs" in plan:
        share = (f" ({100 * plan['pair_share']:.1f}% of candidate pairs, the share with a preference in the "
                 + ("earlier run)" if "earlier_pairs" in plan else "calibration run)"))
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


def split_line(plan: dict) -> str:
    """Stage 1 / loop / evaluation runs, against the run cap where there is one (and Stage 1's share of it)."""
    parts = plan["split"]
    line = (f"runs by part: Stage 1 {parts['stage1']:.2f} · loop {parts['loop']:.2f} · evaluation "
            f"{parts['evaluation']:.2f} (outside the cap)")
    if plan.get("max_runs") is not None:
        line += f"; run cap {float(plan['max_runs']):g}"
    if size := plan.get("stage1_size"):
        line += (f", Stage 1 sized to at most {size['limit']:g} of it: {size['inputs']} inputs x "
                 f"{size['num_candidates']} candidates x {size['mc_repeats']} repeats for {len(size['components'])} "
                 "components")
    return line


def _duration(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 120 else (f"{seconds / 60:.1f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h")
