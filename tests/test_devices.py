"""One reading of `device` / `dtype` for the local LM, the LRF, the embedders and the trainers."""
from __future__ import annotations

import pytest
import torch

from optimas_cli.devices import pick_device, pick_dtype
from optimas_cli.errors import UserError

no_gpu = pytest.mark.skipif(torch.cuda.is_available(), reason="checks the machine without a GPU")


@no_gpu
def test_auto_is_the_cpu_in_float32_without_a_gpu():
    assert pick_device("auto") == pick_device(None) == "cpu"
    assert pick_dtype("auto", "cpu") == pick_dtype(None, "cpu") == torch.float32
    assert pick_dtype("bfloat16", "cpu") == torch.bfloat16  # asked for by name, it is what the user gets


@no_gpu
def test_a_gpu_asked_for_on_a_machine_without_one_is_one_line_naming_the_setting():
    with pytest.raises(UserError, match=r"lrf\.device='cuda:0' asked for, but torch sees no CUDA GPU"):
        pick_device("cuda:0", "lrf.device")  # before: the LRF passed it on and torch crashed in the first load


def test_an_unknown_dtype_names_the_setting_and_the_choices():
    with pytest.raises(UserError, match=r"unknown lm\.dtype 'fp8'") as error:
        pick_dtype("fp8", "cpu", "lm.dtype")
    assert "bfloat16" in error.value.fix
