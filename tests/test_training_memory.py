"""Training memory: training blocks run with a low mmap threshold and trim after; the LRF recomputes activations
by default and scores exactly as when it holds them."""
from __future__ import annotations

import os
import platform

import pytest
from omegaconf import OmegaConf
from test_lrf_tiny_backbone import build_tiny_bert
from test_lrf_train import FAST, keyword_pairs

from optimas_cli import memory
from optimas_cli.lrf.model import LocalRewardModel
from optimas_cli.lrf.train import train_stage1

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")


class RecordingLibc:
    def __init__(self):
        self.calls = []

    def mallopt(self, option, value):
        self.calls.append(("mallopt", option, value))

    def malloc_trim(self, pad):
        self.calls.append(("malloc_trim", pad))


def test_training_blocks_run_with_a_low_mmap_threshold_then_trim(monkeypatch):
    # What the RSS gives back depends on the allocator's state in the process (the effect is measured by
    # scripts/mem_probe.py grpo: 6.4 -> 2.1 GB for one Amazon step); here, that the block sets and restores it.
    libc = RecordingLibc()
    monkeypatch.setattr(memory, "_glibc", lambda: libc)
    with memory.large_allocations_unmapped_on_free():
        assert libc.calls == [("mallopt", memory.M_MMAP_THRESHOLD, 1 << 20)]
    assert libc.calls[1:] == [("mallopt", memory.M_MMAP_THRESHOLD, memory.GLIBC_DYNAMIC_MMAP_MAX), ("malloc_trim", 0)]


@glibc_only
def test_the_real_glibc_is_found():
    assert memory._glibc() is not None


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


def test_lrf_trained_with_recomputed_activations_scores_exactly_as_with_held_ones(bert):
    pairs = keyword_pairs(32, seed=2)
    scores = []
    for checkpointing in (False, True):
        model = LocalRewardModel(bert, {"gen": "writes the answer"}, device="cpu", max_length=48,
                                 gradient_checkpointing=checkpointing)
        assert model.backbone.config.hidden_dropout_prob > 0  # recomputation must replay the dropout masks
        train_stage1(model, pairs, {**FAST, "epochs": 2})
        scores.append(model.score("gen", [p.context for p in pairs[:5]], [p.chosen for p in pairs[:5]]))
    assert scores[0] == scores[1]


def test_the_default_lrf_recomputes_activations():
    cfg = OmegaConf.load(os.path.join(ROOT, "conf", "lrf", "minilm.yaml"))
    assert cfg.gradient_checkpointing is True
