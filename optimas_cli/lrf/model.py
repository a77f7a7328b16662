"""LocalRewardModel: r_k(x_k, y_k) = h_k(phi(text(x_k, y_k))), one shared backbone, one linear head per component.

`score(component, inputs, outputs)` is the entry point for per-instance routing and the local
optimizers; `rewards(...)` is the differentiable version the trainer uses. A choice component also gets
a value scorer (lrf/value_scorer.py): `score_values(component, inputs, values)` ranks its values for an
input before any of them runs, from phi of the input text alone.

With a frozen backbone (train_backbone=heads) phi(text) never changes: the backbone stays in eval
mode (no dropout) and each distinct text is embedded once, cached by text for the model's life, so
Stage 1's epochs, the loop's scoring and Stage 2 train and score the heads on stored vectors. A model folder holds
config.json, heads.safetensors, value_heads.safetensors (when choice components have value scorers) and
either `adapter/` (LoRA) or backbone.safetensors (the trained backbone weights; absent when only the heads train).
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from optimas_cli.devices import pick_device, pick_dtype
from optimas_cli.errors import UserError
from optimas_cli.lrf import backbone as bb
from optimas_cli.lrf.text import ComponentInfo, TextRenderer, component_info
from optimas_cli.lrf.value_scorer import ValueHead
from optimas_cli.system.run_folder import replaced

CONFIG_FILE, HEADS_FILE, BACKBONE_FILE, ADAPTER_DIR = "config.json", "heads.safetensors", "backbone.safetensors", "adapter"
VALUE_HEADS_FILE = "value_heads.safetensors"
FORMAT_VERSION = 1


def _plain(value: Any) -> Any:
    """Hydra/OmegaConf containers to plain dicts and lists (they are written into config.json)."""
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, str):
        return [_plain(v) for v in value]
    return value


class LocalRewardModel(nn.Module):
    def __init__(
        self,
        backbone: str | None = None,
        components: Mapping[str, Any] | None = None,
        lora: Mapping | None = None,
        pooling: str = "auto",
        max_length: int = 256,
        device: str | None = "auto",
        train_backbone: str = "full",
        dtype: str | None = "auto",
        seed: int = 0,
        score_batch_size: int = 32,
        gradient_checkpointing: bool = False,
        cache_embeddings: bool = True,
    ):
        super().__init__()
        self.device_name = pick_device(device, "lrf.device")
        self.backbone_name = backbone or "default"
        # Backbone weights that train stay float32 even when the computation is in half precision ('auto' is
        # bfloat16 on a GPU): a bfloat16 weight keeps 8 significant bits, so an AdamW step of lr 5e-5 is below
        # half the spacing of 75% of MiniLM's weights and rounds away; they would never move. The forward
        # pass then runs in the half dtype under autocast. Frozen backbones (heads, LoRA) keep the half dtype.
        self.compute_dtype = pick_dtype(dtype, self.device_name, "lrf.dtype")
        self.autocast = self.compute_dtype != torch.float32 and not lora and train_backbone != "heads"
        model, self.tokenizer, self.is_causal, self.backbone_path = bb.load_backbone(
            backbone, "float32" if self.autocast else dtype, self.device_name)
        self.pooling = ("last" if self.is_causal else "mean") if pooling == "auto" else pooling
        self.lora = _plain(lora) if lora else None
        self.train_backbone = "lora" if self.lora else train_backbone
        if gradient_checkpointing and hasattr(model, "activation_checkpointing_enable"):
            # non-reentrant: gradients reach LoRA weights even though the (frozen) embeddings need none.
            # (gradient_checkpointing_enable is its deprecated alias: a FutureWarning on every run's stderr.)
            model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
            if getattr(model.config, "use_cache", False):  # a KV cache is useless to a scorer, and transformers
                model.config.use_cache = False  # warns on stderr that checkpointing turns it off
        if self.lora:
            for p in model.parameters():
                p.requires_grad_(False)
            model = bb.apply_lora(model, self.lora)
        else:
            bb.set_trainable(model, self.train_backbone)
        self.backbone = model
        self.max_length = int(max_length)
        self.renderer = TextRenderer(self.tokenizer, self.max_length)
        self.seed, self.score_batch_size = int(seed), int(score_batch_size)
        self.dtype_name = dtype or "auto"
        self.gradient_checkpointing = bool(gradient_checkpointing)
        self.hidden_size = int(self.backbone.config.hidden_size)
        # text -> phi(text), used only while the backbone is frozen (heads train): see the module docstring
        self.cache_embeddings = bool(cache_embeddings)
        self.embedding_cache: dict[str, torch.Tensor] = {}
        self.infos: dict[str, ComponentInfo] = {}
        self.head_index: dict[str, int] = {}
        self.heads = nn.ModuleList()
        for name, spec in (components or {}).items():
            self.add_component(name, spec)
        self.value_heads = nn.ModuleList()  # the choice components' value scorers (add_value_head)
        self.value_head_index: dict[str, int] = {}
        self.eval()  # scoring is the common use; the trainer switches to train mode itself

    @classmethod
    def from_config(cls, cfg: Mapping, components: Mapping[str, Any]) -> LocalRewardModel:
        """Build from the `lrf` config group (conf/lrf/*.yaml); keys that are not model settings are ignored."""
        keys = ("backbone", "lora", "pooling", "max_length", "device", "train_backbone", "dtype", "seed",
                "score_batch_size", "gradient_checkpointing")
        return cls(components=components, **{k: cfg[k] for k in keys if k in cfg and cfg[k] is not None})

    @property
    def frozen_backbone(self) -> bool:
        return self.train_backbone == "heads"

    def train(self, mode: bool = True) -> LocalRewardModel:
        """Heads train; a frozen backbone stays in eval mode, so phi(text) is one vector (cacheable)."""
        super().train(mode)
        if self.frozen_backbone:
            self.backbone.eval()
        return self

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        self.embedding_cache.clear()  # the backbone's weights may have changed
        return super().load_state_dict(state_dict, strict=strict, assign=assign)

    # -- components -----------------------------------------------------------------------------
    def add_component(self, name: str, spec: Any = "") -> None:
        """Give a component its head h_k (seeded, so two models built alike start alike)."""
        if name in self.head_index:
            raise ValueError(f"component {name!r} already has a head")
        self.infos[name] = component_info(name, spec)
        head = nn.Linear(self.hidden_size, 1)
        gen = torch.Generator().manual_seed(self.seed * 1000 + len(self.heads))
        with torch.no_grad():
            head.weight.copy_(torch.randn(head.weight.shape, generator=gen) * 0.02)
            head.bias.zero_()
        # The pairwise loss depends on r(y+) - r(y-) only: the bias's gradient is zero up to rounding,
        # which Adam would scale into full-size steps of noise. It stays 0 (it ranks nothing).
        head.bias.requires_grad_(False)
        self.head_index[name] = len(self.heads)
        self.heads.append(head.to(self.device_name))

    def _index(self, name: str) -> int:
        try:
            return self.head_index[name]
        except KeyError:
            raise KeyError(f"the local reward model has no head for component {name!r} (has {list(self.head_index)})") from None

    # -- text and forward -----------------------------------------------------------------------
    def texts(self, component: str, inputs: Sequence[Mapping], outputs: Sequence[Mapping]) -> list[str]:
        info = self.infos[component] if component in self.infos else ComponentInfo(component)
        if len(inputs) != len(outputs):
            raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
        return [self.renderer.render(info, x, y) for x, y in zip(inputs, outputs, strict=True)]

    def embed(self, texts: Sequence[str]) -> torch.Tensor:
        """phi(text) per text, shape (len(texts), hidden); from the cache when the backbone is frozen."""
        if not (self.cache_embeddings and self.frozen_backbone):  # a LoRA or trained backbone changes phi
            return self._encode(texts)
        cache = self.embedding_cache
        missing = list(dict.fromkeys(t for t in texts if t not in cache))
        if missing:
            with torch.no_grad():
                cache.update(zip(missing, self._encode(missing), strict=True))
        return torch.stack([cache[t] for t in texts])

    def _encode(self, texts: Sequence[str]) -> torch.Tensor:
        enc = self.tokenizer(list(texts), padding=True, truncation=True, max_length=self.max_length, return_tensors="pt")
        enc = {k: v.to(self.device_name) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.autocast(torch.device(self.device_name).type, dtype=self.compute_dtype, enabled=self.autocast):
            hidden = self.backbone(**enc).last_hidden_state
        return bb.pool(hidden, enc["attention_mask"], self.pooling).float()

    def rewards(self, components: Sequence[str], texts: Sequence[str]) -> torch.Tensor:
        """Differentiable r_k for each (component, text), shape (len(texts),)."""
        emb = self.embed(texts)
        idx = [self._index(c) for c in components]
        weight = torch.stack([self.heads[i].weight[0] for i in idx])
        bias = torch.stack([self.heads[i].bias[0] for i in idx])
        return (emb * weight).sum(-1) + bias

    @torch.no_grad()
    def score_texts(self, component: str, texts: Sequence[str]) -> list[float]:
        self._index(component)
        was_training = self.training
        self.eval()
        try:
            order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad less
            out = [0.0] * len(texts)
            for start in range(0, len(order), self.score_batch_size):
                chunk = order[start : start + self.score_batch_size]
                values = self.rewards([component] * len(chunk), [texts[i] for i in chunk]).tolist()
                for i, v in zip(chunk, values, strict=True):
                    out[i] = float(v)
            return out
        finally:
            self.train(was_training)

    def score(self, component_name: str, inputs: list[dict], outputs: list[dict]) -> list[float]:
        """r_k(x, y) for each (input, output) pair of one component; batched, no gradients."""
        return self.score_texts(component_name, self.texts(component_name, inputs, outputs))

    # -- the value scorer: s_k(x, v) before anything runs (lrf/value_scorer.py) --------------------------
    def add_value_head(self, name: str, keys: Sequence[str], dim: int) -> ValueHead:
        """Give choice component `name` a value scorer over the values whose value_key are `keys` (untrained:
        every value scores alike)."""
        if name in self.value_head_index:
            raise ValueError(f"component {name!r} already has a value scorer")
        head = ValueHead(self.hidden_size, keys, dim, self.seed)
        self.value_head_index[name] = len(self.value_heads)
        self.value_heads.append(head.to(self.device_name))
        return head

    def value_head(self, name: str) -> ValueHead:
        try:
            return self.value_heads[self.value_head_index[name]]
        except KeyError:
            raise KeyError(f"the local reward model has no value scorer for component {name!r}") from None

    def scores_values(self, name: str) -> bool:
        return name in self.value_head_index

    def input_texts(self, component: str, inputs: Sequence[Mapping]) -> list[str]:
        """The text phi reads for an input alone: the component's header and input fields, no output."""
        info = self.infos[component] if component in self.infos else ComponentInfo(component)
        alone = dataclasses.replace(info, outputs=())
        return [self.renderer.render(alone, x, {}) for x in inputs]

    @torch.no_grad()
    def embed_inputs(self, component: str, inputs: Sequence[Mapping]) -> torch.Tensor:
        was_training = self.training
        self.eval()
        try:
            texts = self.input_texts(component, inputs)
            return torch.cat([self.embed(texts[i:i + self.score_batch_size])
                              for i in range(0, len(texts), self.score_batch_size)]) if texts else torch.zeros(0, self.hidden_size)
        finally:
            self.train(was_training)

    @torch.no_grad()
    def score_values(self, component: str, inputs: Sequence[Mapping], values: Sequence[Any]) -> list[list[float]]:
        """s_k(x, v) per input (rows) and value (columns); nothing of the component runs."""
        head = self.value_head(component)
        columns = head.columns(values)
        if not inputs:
            return []
        scores = head(self.embed_inputs(component, inputs).to(head.embedding.device))
        return scores[:, columns].cpu().tolist()

    # -- parameters -----------------------------------------------------------------------------
    def head_parameters(self) -> list[nn.Parameter]:
        return list(self.heads.parameters())

    def backbone_parameters(self) -> list[nn.Parameter]:
        return [p for p in self.backbone.parameters() if p.requires_grad]

    def settings(self) -> dict:
        return {
            "format_version": FORMAT_VERSION,
            "backbone": self.backbone_name,
            "backbone_path": self.backbone_path,
            "lora": self.lora,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "train_backbone": self.train_backbone,
            "dtype": self.dtype_name,
            "seed": self.seed,
            "score_batch_size": self.score_batch_size,
            "gradient_checkpointing": self.gradient_checkpointing,
            "components": {n: info.to_dict() for n, info in self.infos.items()},
            "head_order": sorted(self.head_index, key=self.head_index.get),
            "value_heads": [{"component": n, "values": self.value_heads[i].keys,
                             "dim": int(self.value_heads[i].embedding.shape[1])}
                            for n, i in sorted(self.value_head_index.items(), key=lambda kv: kv[1])],
        }

    # -- persistence ----------------------------------------------------------------------------
    def save(self, folder: str | Path) -> Path:
        """Write config, heads and the trained backbone weights (or the LoRA adapter) into `folder`, each file
        whole or not at all: a run's lrf/ is saved again after each adaptation, and a kill or a full disk during
        that must leave one its resume can load."""
        from safetensors.torch import save_file

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        heads = {}
        for name, i in self.head_index.items():
            heads[f"{name}.weight"] = self.heads[i].weight.detach().cpu().contiguous()
            heads[f"{name}.bias"] = self.heads[i].bias.detach().cpu().contiguous()
        with replaced(folder / HEADS_FILE) as tmp:
            save_file(heads, str(tmp))
        if self.value_heads:
            values = {f"{i}/{k}": t.detach().cpu().contiguous() for i, head in enumerate(self.value_heads)
                      for k, t in head.state_dict().items()}
            with replaced(folder / VALUE_HEADS_FILE) as tmp:
                save_file(values, str(tmp))
        if self.lora:
            self.backbone.save_pretrained(str(folder / ADAPTER_DIR))
        else:
            trained = {n: p.detach().cpu().contiguous() for n, p in self.backbone.named_parameters() if p.requires_grad}
            if trained:
                with replaced(folder / BACKBONE_FILE) as tmp:
                    save_file(trained, str(tmp))
        with replaced(folder / CONFIG_FILE) as tmp:  # written last: a folder with config.json is complete
            tmp.write_text(json.dumps(self.settings(), indent=2))
        return folder

    @classmethod
    def load(cls, folder: str | Path, device: str | None = None) -> LocalRewardModel:
        from safetensors.torch import load_file

        folder = Path(folder)
        if not (folder / CONFIG_FILE).exists():
            raise UserError(f"{folder} holds no saved local reward model ({CONFIG_FILE} missing)",
                            "point to a folder written by LocalRewardModel.save / `optimas train-lrf`")
        cfg = json.loads((folder / CONFIG_FILE).read_text())
        lora = cfg.get("lora")
        model = cls(
            backbone=cfg["backbone"],
            components={n: cfg["components"][n] for n in cfg["head_order"]},
            lora=None,  # the saved adapter is attached below instead of a fresh one
            pooling=cfg["pooling"],
            max_length=cfg["max_length"],
            device=device or "auto",
            train_backbone="heads" if lora else cfg["train_backbone"],
            dtype=cfg.get("dtype", "auto"),
            seed=cfg.get("seed", 0),
            score_batch_size=cfg.get("score_batch_size", 32),
            gradient_checkpointing=cfg.get("gradient_checkpointing", False),
        )
        if lora:
            from peft import PeftModel

            model.backbone = PeftModel.from_pretrained(model.backbone, str(folder / ADAPTER_DIR), is_trainable=True)
            model.lora, model.train_backbone = dict(lora), "lora"
        elif (folder / BACKBONE_FILE).exists():
            trained = load_file(str(folder / BACKBONE_FILE))
            missing = set(trained) - {n for n, _ in model.backbone.named_parameters()}
            if missing:
                raise UserError(f"{folder / BACKBONE_FILE} has weights the backbone lacks: {sorted(missing)[:3]}",
                                "load it with the backbone it was trained on")
            model.backbone.load_state_dict(trained, strict=False)
        heads = load_file(str(folder / HEADS_FILE))
        with torch.no_grad():
            for name, i in model.head_index.items():
                model.heads[i].weight.copy_(heads[f"{name}.weight"])
                model.heads[i].bias.copy_(heads[f"{name}.bias"])
        saved = load_file(str(folder / VALUE_HEADS_FILE)) if cfg.get("value_heads") else {}
        for i, spec in enumerate(cfg.get("value_heads") or []):
            head = model.add_value_head(spec["component"], spec["values"], int(spec["dim"]))
            head.load_state_dict({k.split("/", 1)[1]: t for k, t in saved.items() if k.split("/", 1)[0] == str(i)})
        return model.to(model.device_name).eval()
