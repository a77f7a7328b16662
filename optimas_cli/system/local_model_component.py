"""A component that is a local causal LM whose configuration is a LoRA adapter folder (ConfigKind.WEIGHTS).

Subclasses say what the model reads (`build_messages`) and what its reply means (`parse_output`); the
weights optimizers (GRPO in optim/weights.py, SysDPO, REINFORCE) train new adapters through the same
two methods and `base_model_path`, and set the component to the adapter folder they produced.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import ClassVar

from optimas_cli.system.component import Component
from optimas_cli.system.context import RunContext

DEFAULT_BASE_MODEL = "local/smollm2-135m-instruct"


@dataclass(eq=False)
class LocalModelComponent(Component):
    """A local causal LM whose configuration is a LoRA adapter folder (None = the base model)."""

    calls_lm: ClassVar[bool] = True

    base_model: str = DEFAULT_BASE_MODEL
    max_tokens: int = 128

    def base_model_path(self) -> str:
        return self.base_model

    def build_messages(self, input_dict: dict, value) -> list[dict]:
        """The chat the model answers for one input (the same whichever adapter `value` names)."""
        raise NotImplementedError

    def parse_output(self, text: str) -> dict:
        """The component's output fields from one completion."""
        raise NotImplementedError

    def forward(self, inputs: list[dict], value, ctx: RunContext) -> list[dict]:
        messages = [self.build_messages(x, value) for x in inputs]
        adapter = None if value is None else os.fspath(value)
        texts = ctx.complete(self.name, messages, model=self.base_model, adapter=adapter, max_tokens=self.max_tokens)
        return [self.parse_output(text) for text in texts]
