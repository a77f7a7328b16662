"""The embedded model's decode loop (optimas_cli/lm/local/decode.py) against transformers' generate, on real prompts.

1. Same batches, three ways: 16 Amazon training sessions as session-analyzer prompts (greedy, then 3 samples of
   each at temperature 1) and as single-call next-item prompts (greedy, 32 tokens), through generate, through the
   decode loop batch by batch, and through one continuous batch that starts with two prompts and lets two more
   join after every step. Prints how many texts are the same as generate's, and each way's seconds.
2. What one decode step costs for 1, 4, 12 and 32 rows of 700-token prompts (weights vs rows).

    python scripts/bench_decode.py [--sessions 16] [--skip-steps] [--dtype auto]
"""
from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
from optimas_cli.environment import prepare_process  # noqa: E402

prepare_process()

import argparse  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
from transformers import DynamicCache  # noqa: E402

from optimas_cli.lm.local.model import Decoding, LocalModel, Request, completion_length  # noqa: E402
from optimas_cli.lm.local.registry import local_model_folder  # noqa: E402
from optimas_pipelines.amazon import prompts  # noqa: E402
from optimas_pipelines.amazon.data import load_splits  # noqa: E402

MODEL = "smollm2-135m-instruct"


def with_generate(local: LocalModel, batch: list[str], decoding: Decoding, seeds: list[int]) -> list[str]:
    encoded = local.tokenize(batch, decoding.max_tokens)
    width = encoded["input_ids"].shape[1]
    with torch.inference_mode():
        out = local.model.generate(**encoded, **local.generation_kwargs(decoding, seeds, width))
    pad = local.tokenizer.pad_token_id
    return [local.tokenizer.decode(row[: completion_length(row, local.eos_ids, pad)[0]], skip_special_tokens=True)
            for row in out[:, width:].tolist()]


def same_texts(local: LocalModel, sessions: list[dict]) -> None:
    settings = [  # (label, temperature, max new tokens, prompts per batch, samples per prompt, messages)
        ("analyzer, greedy", 0.0, 128, 8, 1, lambda s: prompts.analyzer_messages(s["sequence"])),
        ("analyzer, 3 samples at T=1", 1.0, 128, 3, 3, lambda s: prompts.analyzer_messages(s["sequence"])),
        ("next item, greedy", 0.0, 32, 8, 1, prompts.single_llm_messages),
    ]
    for label, temperature, max_tokens, per_batch, samples, messages in settings:
        seconds, expected, got = {"generate": 0.0, "decode loop": 0.0, "continuous": 0.0}, [], []
        decoding, requests = Decoding(temperature, max_tokens), []
        for start in range(0, len(sessions), per_batch):
            batch = [local.render(messages(s)) for s in sessions[start:start + per_batch] for _ in range(samples)]
            seeds = list(range(100 + start * samples, 100 + start * samples + len(batch)))
            requests += [Request(p, decoding, seed) for p, seed in zip(batch, seeds, strict=True)]
            began = time.perf_counter()
            expected += with_generate(local, batch, decoding, seeds)
            seconds["generate"] += time.perf_counter() - began
            began = time.perf_counter()
            got += [g.text for g in local.generate(batch, decoding, seeds)]
            seconds["decode loop"] += time.perf_counter() - began
        waiting, joined = requests[2:], {}
        began = time.perf_counter()
        local.serve(requests[:2], None, joined.__setitem__, 
                    lambda rows, reach, waiting=waiting: [waiting.pop(0) for _ in waiting[:2]])
        seconds["continuous"] = time.perf_counter() - began
        for way, texts in (("decode loop", got), ("continuous", [joined[i].text for i in range(len(requests))])):
            same = sum(a.strip() == b.strip() for a, b in zip(expected, texts, strict=True))
            print(f"{label}, {way}: {same} of {len(expected)} texts the same as generate's", flush=True)
        print(f"{label}: " + ", ".join(f"{way} {s:.1f} s" for way, s in seconds.items()), flush=True)


@torch.inference_mode()
def step_costs(local: LocalModel, length: int = 700, steps: int = 8) -> None:
    model = local.model
    for rows in (1, 4, 12, 32):
        ids = torch.randint(100, 40_000, (rows, length))
        cache = DynamicCache(config=model.config)
        model(input_ids=ids, cache=cache, use_cache=True, logits_to_keep=1)
        token = ids[:, -1:]
        began = time.perf_counter()
        for step in range(steps):
            model(input_ids=token, cache=cache, use_cache=True, logits_to_keep=1,
                  position_ids=torch.full((rows, 1), length + step))
        seconds = (time.perf_counter() - began) / steps
        print(f"decode step, {rows:2d} rows of {length} tokens: {seconds * 1000:6.1f} ms ({rows / seconds:6.1f} tok/s)",
              flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--skip-steps", action="store_true")
    parser.add_argument("--dtype", default="auto", help="lm.local.dtype: auto | float32 | bfloat16")
    args = parser.parse_args()
    local = LocalModel(MODEL, local_model_folder(MODEL, None), dtype=args.dtype)
    print(f"{MODEL} in {next(local.model.parameters()).dtype}")
    same_texts(local, load_splits(os.environ.get("OPTIMAS_DATA_DIR")).train[: args.sessions])
    if not args.skip_steps:
        step_costs(local)


if __name__ == "__main__":
    main()
