"""Where torch work runs and in which precision: the one reading of the `device` and `dtype` settings of the
local LM, the LRF backbone, the embedders and the trainers."""
from __future__ import annotations

import torch

from optimas_cli.errors import UserError

DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32, "float16": torch.float16}


def pick_device(device: str | None, setting: str = "device") -> str:
    """'auto' (or None) is cuda when torch sees a GPU, else cpu; a cuda device torch cannot see is a UserError
    here rather than a crash deep inside the first model load."""
    if device in (None, "auto"):
        return "cuda" if torch.cuda.is_available() else "cpu"
    device = str(device)
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise UserError(f"{setting}={device!r} asked for, but torch sees no CUDA GPU", f"set {setting}=cpu (or auto)")
    return device


def pick_dtype(dtype: str | None, device: str, setting: str = "dtype") -> torch.dtype:
    """'auto' (or None) is bfloat16 on a GPU that supports it, float32 otherwise.

    Measured on this project's 2-core AVX2 CPU (no AVX512-BF16): SmolLM2-135M bf16 forward passes were 2.4x
    slower than float32 for a batch of 8 single-token decode steps and 5.3x slower for a 64-token prefill,
    because the CPU has no bf16 matmul units and torch converts on the fly. On a 2-core AMD EPYC with AVX512-BF16
    bf16 was ~3x faster (24 Amazon prompts prefilled at 1,311 against 430 tokens/s), but a row's greedy reply then
    depends on the rows it is batched with (scripts/bench_decode.py --dtype bfloat16: 7 of 16 the same when rows
    join mid-decode; 16 of 16 in float32), and which rows share a batch depends on timing, so a CPU run in bf16
    would not reproduce: bf16 on a CPU is for a user who asks for it by name. (Those float32 figures are MKL's, which
    takes AVX2 kernels on AMD; the embedded model's float32 linears now go through oneDNN, ~1.7x faster prefill with
    a row's products independent of the rows beside it: lm/local/onednn.py.)
    """
    if dtype in (None, "auto"):
        cuda = device.startswith("cuda") and torch.cuda.is_available()
        return torch.bfloat16 if cuda and torch.cuda.is_bf16_supported() else torch.float32
    if dtype not in DTYPES:
        raise UserError(f"unknown {setting} {dtype!r}", f"use auto or one of {sorted(DTYPES)}")
    return DTYPES[dtype]


def dtype_name(dtype: str | None, device: str | None, setting: str) -> str:
    """What a `<setting>.dtype` / `<setting>.device` pair resolves to, by name ('float32')."""
    return str(pick_dtype(dtype, pick_device(device, f"{setting}.device"), f"{setting}.dtype")).removeprefix("torch.")
