"""How different SysDPO's k intermediate candidates are: diverse beam search vs temperature sampling.

For the first N Amazon training inputs, the session analyzer's k candidates are drawn both ways
through the LM layer (the requests SysDPO's rollouts send) and compared: the share of inputs whose
k candidates are all distinct, and the mean word-set Jaccard similarity of candidate pairs (1 =
same words: the near-duplicates the seed says Monte Carlo sampling draws).

    python scripts/dbs_diversity.py [--inputs 8] [--k 2] [--penalty 20] [--temperature 1.0] [--max-tokens 64]
                                    [--sampling dbs,temperature]
"""
from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

import argparse  # noqa: E402
import itertools  # noqa: E402
import time  # noqa: E402

from optimas_cli.lm.client import LMClient  # noqa: E402
from optimas_cli.lm.types import LMRequest  # noqa: E402
from optimas_pipelines.amazon import prompts  # noqa: E402
from optimas_pipelines.amazon.data import load_splits  # noqa: E402


def jaccard(a: str, b: str) -> float:
    x, y = set(a.lower().split()), set(b.lower().split())
    return len(x & y) / len(x | y) if x | y else 1.0


def measure(lm: LMClient, messages: list, k: int, max_tokens: int, **sampling) -> dict:
    start = time.perf_counter()
    replies = lm.complete([LMRequest(messages=m, n=k, max_tokens=max_tokens, seed=0, **sampling) for m in messages])
    pairs = [jaccard(a, b) for r in replies for a, b in itertools.combinations(r.texts, 2)]
    return {"distinct": sum(len(set(r.texts)) == k for r in replies) / len(replies),
            "jaccard": sum(pairs) / len(pairs), "seconds": time.perf_counter() - start}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="local/smollm2-135m-instruct")
    parser.add_argument("--inputs", type=int, default=8)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--penalty", type=float, default=20.0)
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--max-tokens", type=int, default=64)
    parser.add_argument("--sampling", default="dbs,temperature", help="which of dbs,temperature to measure")
    args = parser.parse_args()
    lm = LMClient(model=args.model, cache=False)
    messages = [prompts.analyzer_messages(x["sequence"]) for x in load_splits(None).train[: args.inputs]]
    options = {"dbs": {"diversity_penalty": args.penalty}, "temperature": {"temperature": args.temperature}}
    for label in args.sampling.split(","):
        sampling = options[label]
        m = measure(lm, messages, args.k, args.max_tokens, **sampling)
        print(f"{label:<12} k={args.k} inputs={len(messages)} all-distinct {m['distinct']:.2f} "
              f"mean pair Jaccard {m['jaccard']:.3f} ({m['seconds']:.0f} s)")


if __name__ == "__main__":
    main()
