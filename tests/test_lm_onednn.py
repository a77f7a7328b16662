"""The embedded model's float32 linears through oneDNN (lm/local/onednn.py): F.linear's values, a row's bits
independent of its batch, and gradients left to F.linear."""
from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.nn import functional as F

from optimas_cli.lm.local.onednn import available, onednn_linear, padded_rows, use_onednn_linears

pytestmark = pytest.mark.skipif(not available(), reason="this torch has no oneDNN linear")


def _weights(n_out=96, n_in=64):
    gen = torch.Generator().manual_seed(0)
    return torch.randn(n_out, n_in, generator=gen), torch.randn(n_out, generator=gen), gen


def test_values_are_f_linears_for_one_row_many_rows_and_a_batch_of_sequences():
    weight, bias, gen = _weights()
    for shape in [(1, 64), (7, 64), (3, 5, 64), (1, 1, 64)]:
        x = torch.randn(*shape, generator=gen)
        out = onednn_linear(x, weight, bias)
        assert out.shape == (*shape[:-1], 96)
        torch.testing.assert_close(out, F.linear(x, weight, bias), rtol=1e-5, atol=1e-5)


def test_a_rows_bits_do_not_depend_on_the_rows_beside_it():
    weight, bias, gen = _weights(1536, 576)
    row = torch.randn(1, 576, generator=gen)
    alone = onednn_linear(row, weight, bias)
    for others in (1, 6, 40):
        batch = torch.cat([torch.randn(others, 576, generator=gen), row])
        assert torch.equal(onednn_linear(batch, weight, bias)[-1:], alone)


def test_products_that_need_gradients_stay_with_f_linear():
    weight, bias, gen = _weights()
    x = torch.randn(4, 64, generator=gen, requires_grad=True)
    onednn_linear(x, weight, bias).sum().backward()
    torch.testing.assert_close(x.grad, weight.sum(0).expand(4, -1))


def test_a_model_is_routed_only_where_it_is_float32_and_gives_the_same_outputs():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4), nn.Linear(4, 4).to(torch.bfloat16))
    x = torch.randn(5, 8)
    before = model[:3](x)
    assert use_onednn_linears(model) == 2
    with torch.no_grad():
        torch.testing.assert_close(model[:3](x), before.detach(), rtol=1e-5, atol=1e-5)
    assert "forward" not in vars(model[3])  # the bfloat16 layer keeps its own forward


def test_products_are_padded_to_few_shapes():
    assert [padded_rows(n) for n in (1, 2, 8, 9, 64, 65, 128, 129)] == [8, 8, 8, 16, 64, 128, 128, 192]
    assert len({padded_rows(n) for n in range(1, 4097)}) == 8 + 63  # oneDNN builds a kernel per shape
