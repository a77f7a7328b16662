"""LocalRewardModel on tiny real backbones: batched scoring, one head per component, save/load."""
from __future__ import annotations

import pytest
import torch
from test_lrf_tiny_backbone import build_tiny_bert

from optimas_cli.errors import UserError
from optimas_cli.lrf.buffer import ReplayBuffer
from optimas_cli.lrf.model import LocalRewardModel
from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.lrf.train import TrainConfig, adapt_stage2

COMPONENTS = {
    "gen": {"description": "writes the answer", "inputs": ["question"], "outputs": ["answer"]},
    "router": "picks a passage",
}
INPUTS = [{"question": "capital of france"}, {"question": "who wrote hamlet"}, {"question": "one two three"}]
OUTPUTS = [{"answer": "paris"}, {"answer": "shakespeare wrote hamlet in english"}, {"answer": "four"}]


@pytest.fixture(scope="module")
def bert(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("bert"))


@pytest.fixture(scope="module")
def llama(tmp_path_factory):
    return build_tiny_bert(tmp_path_factory.mktemp("llama"), causal=True)


def nudge(model):
    """A few Stage 2 steps, so the saved weights differ from the freshly built ones."""
    pairs = [PreferencePair("gen", x, {"answer": "correct"}, y, 1.0, 0.0) for x, y in zip(INPUTS, OUTPUTS, strict=True)]
    adapt_stage2(model, pairs, ReplayBuffer(10, 0.0), TrainConfig(lr=1e-2, head_lr=1e-2, stage2_steps=3, stage2_batch_size=3))


def test_scores_are_batched_in_input_order_and_each_component_has_its_own_head(bert):
    model = LocalRewardModel(bert, COMPONENTS, device="cpu", score_batch_size=2)
    together = model.score("gen", INPUTS, OUTPUTS)
    alone = [model.score("gen", [x], [y])[0] for x, y in zip(INPUTS, OUTPUTS, strict=True)]
    assert together == pytest.approx(alone, abs=1e-5)
    assert model.score("router", INPUTS, OUTPUTS) != pytest.approx(together, abs=1e-5)
    assert not model.training
    with pytest.raises(KeyError, match="no head for component 'ghost'"):
        model.score("ghost", INPUTS, OUTPUTS)
    model.add_component("ghost", "a late component")
    assert len(model.score("ghost", INPUTS, OUTPUTS)) == 3


@pytest.mark.parametrize("settings", [
    {"train_backbone": "full"}, {"train_backbone": "heads"}, {"train_backbone": "top:1"},
    {"lora": {"r": 4, "alpha": 8, "dropout": 0.0}},
], ids=["full", "heads", "top1", "lora"])
def test_save_then_load_gives_identical_scores(bert, tmp_path, settings):
    model = LocalRewardModel(bert, COMPONENTS, device="cpu", **settings)
    fresh = model.score("gen", INPUTS, OUTPUTS)
    nudge(model)
    trained = model.score("gen", INPUTS, OUTPUTS)
    assert trained != pytest.approx(fresh, abs=1e-6)  # training changed something worth saving
    model.save(tmp_path / "lrf")
    loaded = LocalRewardModel.load(tmp_path / "lrf", device="cpu")
    assert loaded.score("gen", INPUTS, OUTPUTS) == trained
    assert loaded.score("router", INPUTS, OUTPUTS) == model.score("router", INPUTS, OUTPUTS)
    assert loaded.train_backbone == model.train_backbone
    trainable = {n for n, p in loaded.named_parameters() if p.requires_grad}
    assert trainable == {n for n, p in model.named_parameters() if p.requires_grad}


def test_only_the_chosen_backbone_weights_train(bert):
    def backbone_trainable(**kw):
        model = LocalRewardModel(bert, COMPONENTS, device="cpu", **kw)
        return sum(p.numel() for p in model.backbone_parameters()), sum(p.numel() for p in model.backbone.parameters())

    full, total = backbone_trainable(train_backbone="full")
    heads, _ = backbone_trainable(train_backbone="heads")
    top, _ = backbone_trainable(train_backbone="top:1")
    lora, _ = backbone_trainable(lora={"r": 4})
    assert full == total and heads == 0 and 0 < top < full and 0 < lora < top


def test_causal_backbone_pools_the_last_real_token_and_saves_its_lora_adapter(llama, tmp_path):
    model = LocalRewardModel(llama, COMPONENTS, device="cpu", lora={"r": 4, "alpha": 8, "dropout": 0.0})
    assert model.pooling == "last"
    nudge(model)
    model.save(tmp_path / "lrf")
    assert (tmp_path / "lrf" / "adapter" / "adapter_config.json").exists()
    loaded = LocalRewardModel.load(tmp_path / "lrf", device="cpu")
    assert loaded.score("gen", INPUTS, OUTPUTS) == model.score("gen", INPUTS, OUTPUTS)
    # right padding must not change a sequence's reward: score alone == score in a padded batch
    alone = [loaded.score("gen", [x], [y])[0] for x, y in zip(INPUTS, OUTPUTS, strict=True)]
    assert loaded.score("gen", INPUTS, OUTPUTS) == pytest.approx(alone, abs=1e-5)


def test_from_config_and_bad_folders(bert, tmp_path):
    cfg = {"backbone": bert, "max_length": 48, "train_backbone": "heads", "lr": 1.0, "collect": {}, "device": "cpu"}
    model = LocalRewardModel.from_config(cfg, COMPONENTS)
    assert model.max_length == 48 and model.backbone_parameters() == []
    with pytest.raises(UserError, match="no saved local reward model"):
        LocalRewardModel.load(tmp_path)
    with pytest.raises(UserError, match="cannot load the LRF backbone"):
        LocalRewardModel(str(tmp_path / "nowhere" / "model"), COMPONENTS, device="cpu")
    with pytest.raises(UserError, match="train_backbone"):
        LocalRewardModel(bert, COMPONENTS, device="cpu", train_backbone="some")
    assert torch.get_default_dtype() == torch.float32
