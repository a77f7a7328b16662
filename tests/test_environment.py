"""Process-wide settings (optimas_cli/environment.py): what a fresh process gets from prepare_process()."""
from __future__ import annotations

import subprocess
import sys

# transformers' own deprecated names, called as peft and trl call them on a (tiny, random) model
CHECKPOINTING_BY_OLD_NAMES = """
from transformers import LlamaConfig, LlamaForCausalLM
model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                     num_attention_heads=2, num_key_value_heads=1))
model.is_gradient_checkpointing
model.gradient_checkpointing_enable()
model.gradient_checkpointing_disable()
import warnings
warnings.warn("another deprecation", FutureWarning)
"""


def stderr_of(prepare: bool) -> str:
    head = "from optimas_cli.environment import prepare_process; prepare_process()\n" if prepare else ""
    done = subprocess.run([sys.executable, "-c", head + CHECKPOINTING_BY_OLD_NAMES], capture_output=True, text=True,
                          timeout=120, check=True)
    return done.stderr


def test_the_checkpointing_renames_of_transformers_are_silenced_and_nothing_else():
    assert "is_gradient_checkpointing" in stderr_of(prepare=False)  # transformers still warns without it
    quiet = stderr_of(prepare=True)
    assert "gradient_checkpointing" not in quiet
    assert "another deprecation" in quiet
