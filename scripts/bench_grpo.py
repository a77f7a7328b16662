"""Can GRPO at a given size raise a LoRA node's own r_k on held-out inputs, and what does a step cost?

On the Amazon session analyzer (SmolLM2-135M + a fresh LoRA adapter), with the default MiniLM reward
model's head for that component as r_k (seeded and untrained here: a fixed reward function of the
text, which is all GRPO needs to show whether it can move the outputs at this size; in a run the head
is Stage 1's). The last quarter of the inputs is held out of training; r_k before and after is
measured there, with the paired 95% CI, and each step's seconds are printed.

    python scripts/bench_grpo.py [--inputs 16] [--steps 8] [--prompts 2] [--generations 4] [--max-tokens 64]
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile

from hydra import compose, initialize_config_dir


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inputs", type=int, default=16)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--generations", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--learning-rate", type=float, default=1e-4)
    args = parser.parse_args()

    from optimas_cli.conf import CONF_DIR
    from optimas_cli.flows.setup import LazyLM, build_pipeline
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.optim import weights
    from optimas_cli.system import RunContext, RunLedger

    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["pipeline=amazon"])
    pipeline = build_pipeline(cfg)
    analyzer = pipeline.system.components["session_analyzer"]
    inputs = [{"sequence": x["sequence"]} for x in pipeline.splits.train[: args.inputs]]
    lrf = LocalRewardModel(components={"session_analyzer": analyzer.description})
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=LazyLM(cfg.lm), phase="local_optimization", seed=0)
    with tempfile.TemporaryDirectory(prefix="optimas-grpo-") as work:
        settings = {"work_dir": work, "steps": args.steps, "prompts_per_step": args.prompts,
                    "num_generations": args.generations, "max_completion_length": args.max_tokens,
                    "learning_rate": args.learning_rate, "held_out_fraction": 0.25}
        proposal = weights.propose(analyzer, None, inputs, lrf, ctx, settings)
    d = proposal.details
    print(json.dumps({"settings": {k: v for k, v in settings.items() if k != "work_dir"}, "inputs": len(inputs),
                      "held_out": d.get("held_out"), "train_seconds": d["train_seconds"],
                      "seconds_per_step": d["seconds_per_step"], "train_rewards": d["train_rewards"],
                      "search_r_k_before": proposal.baseline_score, "search_r_k_after": proposal.local_score},
                     indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
