"""Common random numbers (`paired_noise=shared`, system/context.py): two configurations compared on one
example draw the same randomness in every component, keyed by (run seed, example, component, sample
index) instead of the request; test scoring never shares it. Checked at each layer that carries the key:
the seed, the call cache, the batch rows, the system, the embedded model, a real OpenAI-compatible
server, the simulator, and the labels it makes."""
from __future__ import annotations

import json
import shutil

import pytest

from optimas_cli.lm.cache import call_key
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.sampling import sample_seed
from optimas_cli.lm.types import LMRequest
from optimas_cli.system import Component, CompoundSystem, ConfigKind, RunContext, RunLedger
from optimas_cli.system.context import UNPAIRED_EVENT
from optimas_pipelines.synthetic.label_quality import collect_labels
from tests.transformers_server import transformers_serve


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def test_a_shared_key_replaces_the_request_in_the_seed():
    a, b = chat("Which city is larger?"), chat("Which river is longer?")
    assert sample_seed(3, a, 1, 0, "answer|ex1") == sample_seed(3, b, 1, 0, "answer|ex1")
    assert sample_seed(3, a, 1, 0, "answer|ex1") != sample_seed(3, a, 1, 0, "answer|ex2")
    assert sample_seed(3, a, 1, 0, "answer|ex1") != sample_seed(3, a, 2, 0, "answer|ex1")  # each repeat its own
    assert sample_seed(3, a, 1, 0) != sample_seed(3, b, 1, 0)  # independent: the request keys the noise


def test_the_noise_key_enters_the_cache_key_only_when_sampled():
    greedy = [call_key("m", chat("q"), 0.0, 8, noise_key=k) for k in (None, "c|1", "c|2")]
    assert len(set(greedy)) == 1  # greedy rows are the same whatever the noise (and keep their old keys)
    sampled = [call_key("m", chat("q"), 0.7, 8, seed=0, noise_key=k) for k in (None, "c|1", "c|2")]
    assert len(set(sampled)) == 3


def test_noise_keys_follow_the_batch_rows_and_count_what_they_cannot_match():
    ctx = RunContext(ledger=RunLedger(1), phase="validation", paired_noise=True, noise_rows=("e1", "e2", "e3"))
    assert ctx.noise_keys("reader", 3) == ["reader|e1", "reader|e2", "reader|e3"]
    assert ctx.noise_keys("reader", 2, rows=[2, 0]) == ["reader|e3", "reader|e1"]
    assert ctx.noise_keys("reader", 5) == [None] * 5  # 5 requests for 3 inputs: no row to key them by
    assert ctx.ledger.events["validation"]["reader"][UNPAIRED_EVENT] == 5
    assert RunContext(ledger=RunLedger(1)).noise_keys("reader", 2) == [None, None]


class Recorder(Component):
    """Writes its input back, and remembers the noise rows each batch came with."""

    def __init__(self, seen: list):
        super().__init__("echo", "echoes", inputs=("q",), outputs=("a",), kind=ConfigKind.NONE)
        self.seen = seen

    def forward(self, inputs, value, ctx):
        self.seen.append(ctx.noise_rows)
        return [{"a": x["q"]} for x in inputs]


@pytest.mark.parametrize("phase, paired, shared", [("validation", True, True), ("lrf_collection", True, True),
                                                    ("test", True, False), ("test_initial", True, False),
                                                    ("validation", False, False)])
def test_components_see_their_examples_names_outside_test_scoring(phase, paired, shared):
    seen: list = []
    system = CompoundSystem([Recorder(seen)], inputs=("q",), outputs=("a",))
    examples = [{"id": 1, "q": "x"}, {"id": 2, "q": "x"}, {"id": 1, "q": "x"}]
    system.run(examples, system.default_config(), RunContext(ledger=RunLedger(1), phase=phase, paired_noise=paired))
    if not shared:
        assert seen == [None]
    else:
        [rows] = seen  # one name per example: equal examples share it, different ones do not
        assert rows[0] == rows[2] != rows[1]


def test_the_embedded_model_samples_two_requests_with_one_key_from_one_stream(tiny_model, tmp_path, seeds_by_prompt):
    lm = LMClient(model=tiny_model, max_tokens=6, cache=False, cache_dir=str(tmp_path))
    prompts = ["Is the sky blue?", "Is the sea blue?"]
    lm.complete([LMRequest(messages=chat(p), temperature=1.0, seed=0, noise_key="solver|ex7") for p in prompts])
    shared = [seeds_by_prompt.pop(p) for p in list(seeds_by_prompt)]
    assert len(shared) == 2 and shared[0] == shared[1]
    lm.complete([LMRequest(messages=chat(p), temperature=1.0, seed=0) for p in prompts])
    independent = list(seeds_by_prompt.values())
    assert len(independent) == 2 and independent[0] != independent[1]


def test_a_real_server_is_sent_the_shared_key_as_its_seed(tiny_model_dir, tmp_path):
    """`transformers serve` of a sampling folder seeds torch per request: under one key a sample repeats
    exactly whatever the request (the seed reached it), and another key gives another sample."""
    folder = tmp_path / "sampling"
    shutil.copytree(tiny_model_dir, folder)
    config = folder / "generation_config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), "do_sample": True}))
    with transformers_serve(folder) as api_base:
        def sample(key: str) -> str:
            lm = LMClient(model=f"hosted_vllm/{folder}", api_base=api_base, max_tokens=12, concurrency=1,
                          cache=False, cache_dir=str(tmp_path))
            return lm.complete([LMRequest(messages=chat("Name a colour."), temperature=1.0, seed=0,
                                          noise_key=key)])[0].texts[0]

        first = sample("solver|ex1")
        assert sample("solver|ex1") == first
        assert {sample(f"solver|ex{i}") for i in range(2, 5)} != {first}


def test_shared_noise_makes_stage_1_labels_follow_the_exact_order():
    """The simulator's Stage 1 at 1x the runs: with independent downstream noise a label often contradicts
    the exact expected order of its candidates; with shared noise almost never."""
    settings = {"components": 6, "interaction": "on", "metric": "mean"}

    def agreement(noise: str) -> float:
        rows, _ = collect_labels({**settings, "paired_noise": noise}, instance=1, inputs=40)
        ordered = sum(r["pairs"] - r["exact_ties"] for r in rows.values())
        return sum(r["agree"] for r in rows.values()) / ordered

    shared, independent = agreement("shared"), agreement("independent")
    assert shared >= 0.95
    assert independent < shared - 0.1


def test_a_report_table_says_which_runs_had_paired_noise():
    from optimas_cli.report.render import paired_noise_note

    assert paired_noise_note([{"paired_noise": "shared"}] * 3) == "Paired noise: shared in every run."
    mixed = paired_noise_note([{"paired_noise": "shared"}, {"paired_noise": "shared"}, {}])
    assert mixed == "Paired noise: shared in 2 runs, independent in 1 run."  # a run from before the setting
    assert paired_noise_note([]) == ""
