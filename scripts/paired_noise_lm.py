"""Shared vs independent downstream noise on a real pipeline with the embedded LM (PubMedQA, SmolLM2).

For the context analyst's Stage 1 candidates (samples at the collection temperature), the problem solver
downstream samples at the paper's downstream temperature 0.6, and each candidate's reward is the answer's
accuracy. Per input and per repeat, two candidates' downstream runs either draw independent noise (keyed
by their requests, as before) or the same (keyed by example, component and repeat: paired_noise=shared).
Measured:
- identical outputs: the share of (candidate pair, repeat) whose solver answers, and whose rewards, are the
  same; shared noise should make them the same wherever the two requests' token distributions allow;
- label agreement at 1x the runs (lrf.collect.mc_repeats = 2 repeats), shared vs independent, with the
  order of a 16-repeat reference (independent repeats of their own; pairs it ties are left out).

    python scripts/paired_noise_lm.py --out docs/results/label-quality/embedded-lm.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from itertools import combinations
from pathlib import Path

from hydra import compose, initialize_config_dir

COMPONENT = "context_analyst"
CANDIDATE_TEMPERATURE, DOWNSTREAM_TEMPERATURE = 0.9, 0.6  # conf/lrf/minilm.yaml; the paper's downstream 0.6
LABEL_REPEATS, REFERENCE_REPEATS = 2, 16
REFERENCE_FIRST = 1000  # the reference's sample indices: apart from the labels'
EPSILON = 0.01  # conf/lrf/minilm.yaml collect.epsilon


def wilson(agree: int, n: int, z: float = 1.96) -> list[float]:
    p = agree / n
    centre, half = (p + z * z / (2 * n)) / (1 + z * z / n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5 / (1 + z * z / n)
    return [round(centre - half, 3), round(centre + half, 3)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=30)
    parser.add_argument("--analyst-max-tokens", type=int, default=48)
    parser.add_argument("--solver-max-tokens", type=int, default=24)
    parser.add_argument("--out", type=Path, default=Path("docs/results/label-quality/embedded-lm.json"))
    args = parser.parse_args()

    from optimas_cli.conf import CONF_DIR
    from optimas_cli.flows.setup import LazyLM, build_pipeline
    from optimas_cli.system import RunContext, RunLedger

    overrides = ["pipeline=pubmedqa", f"pipeline.analyst_max_tokens={args.analyst_max_tokens}",
                 f"pipeline.solver_max_tokens={args.solver_max_tokens}"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=overrides)
    pipeline = build_pipeline(cfg)
    system, config = pipeline.system, pipeline.system.default_config()
    examples = list(pipeline.splits.train[: args.inputs])
    ctx = RunContext(ledger=RunLedger(len(system)), lm=LazyLM(cfg.lm), phase="lrf_collection", seed=0)
    started = time.perf_counter()

    trajs = system.run_until(COMPONENT, examples, config, ctx)
    comp = system.components[COMPONENT]
    inputs = [{f: t.state.get(f) for f in comp.inputs} for t in trajs]
    candidates = [comp.execute(inputs, config[COMPONENT], ctx.replace(temperature=CANDIDATE_TEMPERATURE, sample_index=i))
                  for i in range(3)]  # candidates[j][a]: candidate j of input a

    def downstream(repeat: int, shared: bool) -> list[list[tuple[str, float]]]:
        """Per candidate j, per input a: (the solver's answer, its reward) of one downstream run."""
        runs = system.run_after(COMPONENT, [t for _ in candidates for t in trajs], [o for outs in candidates for o in outs],
                                config, ctx.replace(temperature=DOWNSTREAM_TEMPERATURE, sample_index=repeat,
                                                    paired_noise=shared))
        rewards = pipeline.metric.many([t.example for t in runs], [t.final(system.outputs) for t in runs])
        texts = [json.dumps(t.steps["problem_solver"]["outputs"], sort_keys=True) for t in runs]
        flat = list(zip(texts, rewards, strict=True))
        return [flat[j * len(trajs): (j + 1) * len(trajs)] for j in range(len(candidates))]

    label_runs = {noise: [downstream(r, noise == "shared") for r in range(LABEL_REPEATS)]
                  for noise in ("independent", "shared")}
    reference = [downstream(REFERENCE_FIRST + r, False) for r in range(REFERENCE_REPEATS)]

    def mean_reward(runs, j: int, a: int) -> float:
        return statistics.fmean(run[j][a][1] for run in runs)

    report: dict = {"settings": {"pipeline": "pubmedqa", "lm": cfg.lm.model, "component": COMPONENT,
                                 "inputs": len(examples), "candidates": len(candidates),
                                 "candidate_temperature": CANDIDATE_TEMPERATURE,
                                 "downstream_temperature": DOWNSTREAM_TEMPERATURE, "label_repeats": LABEL_REPEATS,
                                 "reference_repeats": REFERENCE_REPEATS, "epsilon": EPSILON, "overrides": overrides},
                    "command": "python scripts/paired_noise_lm.py " + " ".join(sys.argv[1:])}
    for noise, runs in label_runs.items():
        same_text = same_answer = slots = agree = ordered = labelled = 0
        for a in range(len(examples)):
            for p, q in combinations(range(len(candidates)), 2):
                if candidates[p][a] == candidates[q][a]:
                    continue  # identical candidates form no pair
                for run in runs:
                    slots += 1
                    same_text += run[p][a][0] == run[q][a][0]
                    same_answer += run[p][a][1] == run[q][a][1]
                gap = mean_reward(runs, p, a) - mean_reward(runs, q, a)
                truth = mean_reward(reference, p, a) - mean_reward(reference, q, a)
                if abs(gap) <= EPSILON:
                    continue
                labelled += 1
                if truth != 0:
                    ordered += 1
                    agree += (gap > 0) == (truth > 0)
        report[noise] = {"downstream_slots": slots, "identical_solver_answer": round(same_text / slots, 3),
                         "identical_reward": round(same_answer / slots, 3), "labelled_pairs": labelled,
                         "pairs_the_reference_orders": ordered,
                         "agreement_with_reference": round(agree / ordered, 3) if ordered else None,
                         "agreement_95ci": wilson(agree, ordered) if ordered else None}
    report["seconds"] = round(time.perf_counter() - started, 1)
    report["ledger"] = ctx.ledger.to_dict()["by_phase"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "ledger"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
