"""Which transformers folder serves `local/<name>`: a shipped model (converted once from its GGUF) or a
folder registered by name (a fine-tuned model, the tests' tiny model)."""
from __future__ import annotations

import os
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.lm.local.convert import SHIPPED_MODELS, converted_model_dir

PROVIDER = "local"  # litellm model names look like "local/smollm2-135m-instruct"
_registered: dict[str, Path] = {}


def model_name(model: str) -> str:
    """'local/smollm2-135m-instruct' -> 'smollm2-135m-instruct' (bare names pass through)."""
    prefix = f"{PROVIDER}/"
    return model[len(prefix) :] if model.startswith(prefix) else model


def is_local(model: str) -> bool:
    return model.startswith(f"{PROVIDER}/")


def register_local_model(name: str, folder: str | os.PathLike) -> str:
    """Serve a transformers folder as `local/<name>`; returns that litellm model name."""
    path = Path(folder).expanduser().resolve()
    if not (path / "config.json").is_file():
        raise UserError(f"{str(path)!r} is not a transformers model folder (no config.json)",
                        "pass a folder written by save_pretrained")
    _registered[model_name(name)] = path
    return f"{PROVIDER}/{model_name(name)}"


def local_model_folder(model: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The transformers folder behind a local model name (converting a shipped GGUF on first use).

    The RL optimizer trains LoRA adapters on this folder.
    """
    name = model_name(model)
    if name in _registered:
        return _registered[name]
    if name in SHIPPED_MODELS:
        return converted_model_dir(name, cache_dir)
    path = Path(name).expanduser()
    if path.is_absolute() and (path / "config.json").is_file():  # "local//abs/path/to/model": no registration
        return path.resolve()
    raise UserError(
        f"unknown local model {model!r}",
        f"use local/<one of {sorted(SHIPPED_MODELS | _registered)}>, local/<absolute path of a transformers "
        "folder>, or register a folder with optimas_cli.lm.register_local_model(name, folder)",
    )
