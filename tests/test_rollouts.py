"""Rollouts that branch at every trainable node, on Amazon (two LoRA nodes feeding a prompted decider)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from optimas_cli.optim.rollouts import Branching, sample_rollouts
from optimas_cli.system import RunContext, RunLedger
from optimas_pipelines.amazon import build

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
pytestmark = pytest.mark.skipif(not (DATA / "amazon").exists(), reason="needs the shared data folder")
NODES = ["session_analyzer", "candidate_profiler"]


def test_dbs_rollouts_branch_k_ways_per_node_and_run_the_decider_on_every_branch(tiny_model, tiny_lm):
    pipeline = build(data_dir=DATA, base_model=tiny_model, analyzer_max_tokens=5, profiler_max_tokens=5,
                     decider_max_tokens=3)
    examples = pipeline.splits.train[:2]
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)), lm=tiny_lm, phase="local_optimization")
    rollouts = sample_rollouts(pipeline.system, examples, pipeline.system.default_config(), ctx, NODES,
                               Branching(k=2, sampling="dbs"))
    assert [r.source for r in rollouts] == [0, 0, 0, 0, 1, 1, 1, 1]  # 2 x 2 trajectories per input
    assert set(tiny_lm.usage.phases) == {"local_optimization"}  # the branching calls' tokens too (before: "-")
    assert ctx.ledger.executions["local_optimization"] == {"session_analyzer": 4, "candidate_profiler": 8,
                                                           "next_item_decider": 8}
    for r in rollouts:
        assert set(r.segments) == set(NODES) and "answer" in r.trajectory.state
        messages, text, _ended = r.segments["candidate_profiler"]
        # what was recorded is what the node read and wrote, so training scores exactly this
        assert r.trajectory.steps["candidate_profiler"]["outputs"] == {"feedback": text.strip()}
        assert r.trajectory.steps["candidate_profiler"]["inputs"]["context"] in messages[0]["content"]
    # 5 tokens cut the tiny model's replies (it rarely ends one): scoring must not add an end of turn
    assert any(not r.segments[node][2] for r in rollouts for node in NODES)
    first = rollouts[:4]  # one input: two analyzer candidates, each with two profiler candidates
    assert len({r.segments["session_analyzer"][1] for r in first}) == 2
    assert first[0].segments["session_analyzer"] == first[1].segments["session_analyzer"]
    assert first[0].segments["candidate_profiler"][1] != first[1].segments["candidate_profiler"][1]
