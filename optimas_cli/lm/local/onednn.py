"""The embedded model's float32 linear layers through oneDNN instead of MKL, when it runs on a CPU.

torch sends a float32 `F.linear` to MKL, which takes its AVX2 kernels on AMD CPUs. oneDNN picks its kernels from
the CPU's instruction sets. On this project's 2-core AMD EPYC (AVX-512), a [1024, 576] x [576, 1536] product ran
at 423 GFLOP/s through oneDNN against 195 through MKL, and a decode step's [8, 576] one at 178 against 95
(docs/results/speed). The results differ from MKL's in the last bits, so greedy replies can differ.

A row's result does not depend on the other rows of the product (2 to 2,048 rows gave the same bits), except that
oneDNN computes a single row another way; products are padded to at least 8 rows (`padded_rows`), so a row's linear
products never depend on which rows share its batch (MKL's differ below 8 rows). Only inference goes this way: a
product that needs gradients keeps F.linear.
"""
from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F


def available() -> bool:
    return torch.backends.mkldnn.is_available() and hasattr(torch.ops.mkldnn, "_linear_pointwise")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """F.linear(x, weight, bias) by oneDNN; autograd's products and non-float32 ones stay with F.linear."""
    if x.dtype != torch.float32 or x.device.type != "cpu" or (
            torch.is_grad_enabled() and (x.requires_grad or weight.requires_grad)):
        return F.linear(x, weight, bias)
    rows = x.reshape(-1, x.shape[-1])
    n = rows.size(0)
    padded = padded_rows(n)
    if padded > n:
        rows = torch.cat([rows, rows.new_zeros(padded - n, rows.size(1))])
    out = torch.ops.mkldnn._linear_pointwise(rows.contiguous(), weight, bias, "none", [], "")
    return out[:n].reshape(*x.shape[:-1], out.shape[-1])


def padded_rows(n: int) -> int:
    """The rows a product of `n` rows is computed with: a multiple of 8 up to 64 rows (decode steps), of 64 above
    (prefills). oneDNN builds and caches a kernel per shape (~2.6 ms each here); with every prompt length its own
    shape, 2,500 lengths x 7 layer shapes took 12.0 s and grew the process to 4.6 GB, padded 9.4 s and 0.8 GB
    (scratch measurement). A row's bits do not depend on the rows beside it, so padding changes no result."""
    step = 8 if n <= 64 else 64
    return -(-n // step) * step


def use_onednn_linears(model: nn.Module) -> int:
    """Route every float32 nn.Linear of `model` (on a CPU) through oneDNN; returns how many were routed."""
    if not available():
        return 0
    routed = 0
    for module in model.modules():
        if type(module) is nn.Linear and module.weight.device.type == "cpu" and module.weight.dtype == torch.float32:
            module.forward = lambda x, m=module: onednn_linear(x, m.weight, m.bias)
            routed += 1
    return routed
