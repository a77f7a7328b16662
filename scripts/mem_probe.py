"""Peak RSS of one operation of an Amazon `budget=cpu` run, at that run's sizes, in a fresh process.

    python scripts/mem_probe.py generate --component analyzer      # one embedded-model batch
    python scripts/mem_probe.py diverse --component profiler       # one diverse-beam batch (LRF collection)
    python scripts/mem_probe.py lrf-train                          # LRF Stage 1 steps at lrf.train.batch_size
    python scripts/mem_probe.py grpo --component analyzer          # one GRPO step (local optimization)

Prompts are the pipeline's own (optimas_pipelines/amazon/prompts.py) on the longest training/test inputs, so a
batch has the padded shape the run meets at worst. Prints one JSON line: the process's peak RSS after
loading (`loaded_gb`), after the operation (`peak_gb`), and what the operation added (`added_gb`).
The embedded model is read from the converted-model cache; nothing is written to the LM call cache.
"""
from __future__ import annotations

import argparse
import json
import resource
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

# The sizes of docs/results/amazon-cpu/runs/amazon-optimas-s0/config.yaml.
MAX_TOKENS = {"analyzer": 128, "profiler": 192, "decider": 32}
MAX_BATCH_TOKENS, MAX_BATCH_SIZE = 8192, 32
CONTEXT = "The user is shopping for outdoor camping gear: tents, lanterns and sleeping bags of known brands. " * 3
FEEDBACK = "\n".join(f"{i}. The user would likely view this: it matches the camping gear they browsed." for i in range(10))


def peak_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: KiB


def messages(component: str, example: dict) -> list[dict]:
    from optimas_pipelines.amazon import prompts

    if component == "analyzer":
        return prompts.analyzer_messages(example["sequence"])
    if component == "profiler":
        return prompts.profiler_messages(CONTEXT, example["choices"])
    return prompts.decider_messages(prompts.DECIDER_INSTRUCTION, CONTEXT, FEEDBACK, example["choices"])


def longest_first(component: str, tokens) -> list[dict]:
    """Amazon inputs of the run's splits, the longest prompts first."""
    from optimas_pipelines.amazon.data import load_splits

    splits = load_splits(stratified=True)
    rows = splits.train[:50] + splits.val[:60] + splits.test[:200]
    return sorted(rows, key=lambda x: -tokens(messages(component, x)))


def batch_that_fits(costs: list[int], max_rows: int) -> int:
    """Rows the provider's batcher puts in one generate call (the run's row and token caps)."""
    widest = rows = 0
    for cost in costs[:max_rows]:
        widest = max(widest, cost)
        if rows and (rows + 1) * widest > MAX_BATCH_TOKENS:
            break
        rows += 1
    return rows


def probe_generate(args, diverse: bool) -> dict:
    from optimas_cli.lm.local.model import Decoding, LocalModel
    from optimas_cli.lm.local.registry import local_model_folder

    model = LocalModel("smollm2-135m-instruct", local_model_folder("local/smollm2-135m-instruct"))
    examples = longest_first(args.component, lambda m: model.prompt_tokens(model.render(m)))
    prompts = [model.render(messages(args.component, x)) for x in examples]
    max_new = MAX_TOKENS[args.component]
    n = args.n if diverse else 1
    rows = args.rows or batch_that_fits([(model.prompt_tokens(p) + max_new) * n for p in prompts], MAX_BATCH_SIZE)
    prompts = prompts[:rows]
    loaded = peak_gb()
    if diverse:
        out = model.diverse_generate(prompts, Decoding(temperature=0.0, max_tokens=max_new, beam_groups=n,
                                                       diversity_penalty=1.0))
        texts = [[g.text for g in row] for row in out]
    else:
        out = model.generate(prompts, Decoding(temperature=args.temperature, max_tokens=max_new),
                             seeds=list(range(rows)))
        texts = [g.text for g in out]
    return {"rows": rows, "n": n, "prompt_tokens": [model.prompt_tokens(p) for p in prompts], "max_new": max_new,
            "loaded_gb": loaded, "texts": texts}


def probe_lrf_train(args) -> dict:
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.lrf.pairs import PreferencePair
    from optimas_cli.lrf.train import train_stage1

    examples = longest_first("analyzer", lambda m: len(m[0]["content"]))
    model = LocalRewardModel(components={"session_analyzer": ""}, max_length=256, train_backbone="full",
                             gradient_checkpointing=args.gradient_checkpointing)
    pairs = [PreferencePair("session_analyzer", {"sequence": x["sequence"]}, {"context": CONTEXT + str(i)},
                            {"context": FEEDBACK + str(i)}, 1.0, 0.0) for i, x in enumerate(examples[: args.pairs])]
    loaded = peak_gb()
    result = train_stage1(model, pairs, {"epochs": 1, "batch_size": 16, "dev_fraction": 0.0, "test_fraction": 0.0})
    return {"pairs": len(pairs), "steps": result["steps"], "loaded_gb": loaded,
            "scores": model.score("session_analyzer", [p.context for p in pairs[:4]], [p.chosen for p in pairs[:4]])}


def probe_grpo(args) -> dict:
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.optim.settings import WeightsSettings
    from optimas_cli.optim.weights import resolve_base_model, train_adapter
    from optimas_pipelines.amazon.system import CandidateProfiler, SessionAnalyzer

    cls = SessionAnalyzer if args.component == "analyzer" else CandidateProfiler
    name = "session_analyzer" if args.component == "analyzer" else "candidate_profiler"
    component = cls(name=name, description="", inputs=(), outputs=(), max_tokens=MAX_TOKENS[args.component])
    lrf = LocalRewardModel(components={name: ""}, max_length=256, train_backbone="full")
    base = resolve_base_model("local/smollm2-135m-instruct")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(base)
    examples = longest_first(args.component, lambda m: len(tokenizer.apply_chat_template(m, tokenize=False)))
    inputs = [{"sequence": x["sequence"], "context": CONTEXT, "choices": x["choices"]} for x in examples[:2]]
    cfg = WeightsSettings(work_dir="unused", steps=1, prompts_per_step=2, num_generations=4)
    loaded = peak_gb()
    after_generation = []  # the step samples its completions first, then computes the loss and its gradients
    from transformers.generation.utils import GenerationMixin

    generate = GenerationMixin.generate

    def recorded(self, *a, **k):
        out = generate(self, *a, **k)
        after_generation.append(peak_gb())
        return out

    GenerationMixin.generate = recorded
    with tempfile.TemporaryDirectory() as out:
        log = train_adapter(component, None, inputs, lrf, base, Path(out), cfg, seed=0,
                            max_completion_length=MAX_TOKENS[args.component])
        from safetensors.torch import load_file

        weights = load_file(str(Path(out) / "adapter_model.safetensors"))
        checksum = {k: float(v.double().sum()) for k, v in sorted(weights.items())[:4]}
    return {"rewards": log["train_rewards"], "loaded_gb": loaded, "peak_after_generation_gb": after_generation,
            "adapter_sums": checksum}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op", choices=["generate", "diverse", "lrf-train", "grpo"])
    parser.add_argument("--component", choices=sorted(MAX_TOKENS), default="analyzer")
    parser.add_argument("--rows", type=int, default=0, help="rows per batch (default: what the run's caps allow)")
    parser.add_argument("--n", type=int, default=3, help="diverse beam groups (lrf.collect.num_candidates)")
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument("--pairs", type=int, default=32)
    parser.add_argument("--gradient-checkpointing", action="store_true", help="lrf-train: lrf.gradient_checkpointing=true")
    args = parser.parse_args()
    import torch

    torch.manual_seed(0)
    if args.op in ("generate", "diverse"):
        result = probe_generate(args, args.op == "diverse")
    elif args.op == "lrf-train":
        result = probe_lrf_train(args)
    else:
        result = probe_grpo(args)
    result.update(op=args.op, component=args.component, peak_gb=peak_gb())
    result["added_gb"] = result["peak_gb"] - result["loaded_gb"]
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
