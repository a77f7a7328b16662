"""Training memory: freed large blocks leave the process during training; the LRF recomputes activations
by default and scores exactly as when it holds them."""
from __future__ import annotations

import os
import platform

import pytest
import torch
from omegaconf import OmegaConf
from test_lrf_tiny_backbone import build_tiny_bert
from test_lrf_train import FAST, keyword_pairs

from optimas_cli.lrf.model import LocalRewardModel
from optimas_cli.lrf.train import train_stage1
from optimas_cli.memory import large_allocations_unmapped_on_free

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
glibc_only = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's allocator")


def _rss_bytes() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _returned_on_free() -> int:
    """Bytes of RSS given back when 64 blocks of 2 MB, each followed by a block that stays, are freed."""
    blocks, kept = [], []
    for _ in range(64):
        blocks.append(torch.ones(1 << 19))  # 2 MB, written, so resident
        kept.append(torch.ones(1 << 19))  # between freed blocks: free() cannot trim them off the heap's top
    before = _rss_bytes()
    del blocks
    return before - _rss_bytes()


@glibc_only
def test_large_blocks_freed_during_training_leave_the_process():
    # A process that has freed a large tensor: glibc's threshold has risen, so 2 MB blocks come from its heap
    # and stay in the process when freed (what held a GRPO step's freed hidden states).
    torch.ones(6 << 20).sum()  # 24 MB, allocated and freed
    assert _returned_on_free() < 32 << 20
    with large_allocations_unmapped_on_free():
        assert _returned_on_free() > 96 << 20


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
