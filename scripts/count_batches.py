"""How many generate batches the LM client forms for Amazon's prompts at budget=cpu scale, in request order and
in the client's order (shortest prompt first): the batcher pads a batch to its longest prompt and caps
rows x (longest prompt + max_tokens), so the order decides how many batches, each a full run of decode steps.

Generation is replaced by a stub (the prompts are real, tokenized by the embedded model's tokenizer, and go
through the real client, provider and batcher), so this counts in seconds what a run would execute:

    python scripts/count_batches.py [--max-batch-tokens 8192]
"""
from __future__ import annotations

import argparse
import time

from optimas_cli.lm.client import LMClient
from optimas_cli.lm.local import model as local_model
from optimas_cli.lm.types import LMRequest
from optimas_pipelines.amazon import prompts
from optimas_pipelines.amazon.data import load_splits

BATCHES: list[tuple[int, int, int]] = []  # (rows, padded width, prompt tokens) of each generate call


def stub_generate(self, texts, decoding, seeds, adapter=None):
    encoded = self.tokenize(texts, decoding.max_tokens)
    lengths = encoded["attention_mask"].sum(dim=1).tolist()
    BATCHES.append((len(texts), int(encoded["input_ids"].shape[1]), int(sum(lengths))))
    time.sleep(0.2)  # a batch takes time: the next requests queue up as they do in a run
    return [local_model.Generation("x", int(n), 1, "stop") for n in lengths]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--max-batch-tokens", type=int, default=8192, help="lm.local.max_batch_tokens (conf/lm/local.yaml)")
    args = parser.parse_args()
    local_model.LocalModel.generate = stub_generate
    splits = load_splits(None)
    workloads = [
        ("session_analyzer, train 50", splits.train[:50], lambda e: prompts.analyzer_messages(e["sequence"]), 128),
        ("session_analyzer, validation 60", splits.val[:60], lambda e: prompts.analyzer_messages(e["sequence"]), 128),
        ("session_analyzer, test", splits.test[:200], lambda e: prompts.analyzer_messages(e["sequence"]), 128),
        ("single LLM, test", splits.test[:200], prompts.single_llm_messages, 32),
    ]
    print(f"{'prompts':<34} {'order':<9} {'rows':>5} {'batches':>8} {'padded prefill':>15} {'prompt tokens':>14}")
    for order in ("request", "client"):
        client = LMClient(cache=False, concurrency=32, local={"max_batch_tokens": args.max_batch_tokens})
        if order == "request":  # the order before the client sorted by prompt tokens
            client._prompt_tokens = lambda call: 0
        for name, examples, messages, max_tokens in workloads:
            BATCHES.clear()
            client.complete([LMRequest(messages=messages(e), max_tokens=max_tokens) for e in examples])
            print(f"{name:<34} {order:<9} {sum(b[0] for b in BATCHES):>5} {len(BATCHES):>8} "
                  f"{sum(b[0] * b[1] for b in BATCHES):>15} {sum(b[2] for b in BATCHES):>14}")


if __name__ == "__main__":
    main()
