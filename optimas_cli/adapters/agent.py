"""What the agent adapters share: a component that runs another framework's agent once per input, whose
configuration is the agent's instruction (ConfigKind.PROMPT) or, given `models`, the model it calls
(ConfigKind.CHOICE). The frameworks differ only in `run_agent`."""
from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import openai

from optimas_cli.adapters.event_loop import run_coroutine
from optimas_cli.errors import LMCallFailed, UserError
from optimas_cli.system.component import Component, ConfigKind
from optimas_cli.system.parsing import PARSE_FAILURES, Unparsed

# What the agents' own LM calls cost, counted per component and phase in results.json's ledger events: the
# run's LM ledger counts only the calls that go through the run's LM (`lm=...`), and these do not.
AGENT_EVENTS = ("agent_requests", "agent_input_tokens", "agent_output_tokens")


def missing_extra(extra: str, framework: str, libraries: str) -> UserError:
    """A framework's libraries failed to import: one line naming the extra that installs them."""
    return UserError(f"the {framework} adapter needs {libraries}, which the optional '{extra}' extra installs",
                     f"pip install 'optimas[{extra}]' (in a checkout: pip install -e '.[{extra}]')")


@dataclass(frozen=True)
class AgentReply:
    """One agent run: its final text and what its LM calls used."""

    text: str
    requests: int
    input_tokens: int
    output_tokens: int


class AgentComponent(Component):
    """`inputs` maps each input field to its label in the task the agent gets ('Label: value' lines);
    `parse(text, inputs)` -> output (raising `Unparsed(fallback)` counts a parse failure), the text itself
    when not given. With `models`, the model is optimized among them and the agent's own model (first)."""

    # The agent calls its model through its framework's own client, not the run's LM: `optimas plan` and the
    # run's model listing leave it out, and its calls are counted in AGENT_EVENTS instead.
    calls_lm: ClassVar[bool] = False
    framework: ClassVar[str] = ""

    def __init__(self, name: str, description: str, inputs: dict[str, str], output: str, instruction: str,
                 model: str | None, models: Sequence[str] = (), parse: Callable[[str, dict], Any] | None = None,
                 alternatives: tuple[str, ...] = (), concurrency: int = 8):
        if models:
            if not model:
                raise UserError(f"component {name!r}: `models` needs the {self.framework} agent to name its model",
                                "give the agent its model as a name (a string)")
            choices = (model, *(m for m in models if m != model))
            super().__init__(name, description, inputs=tuple(inputs), outputs=(output,), kind=ConfigKind.CHOICE,
                             default=model, choices=choices)
        else:
            super().__init__(name, description, inputs=tuple(inputs), outputs=(output,), kind=ConfigKind.PROMPT,
                             default=instruction, alternatives=alternatives)
        self.labels, self.output, self.parse = dict(inputs), output, parse
        self.instruction, self.model, self.concurrency = instruction, model, concurrency

    async def run_agent(self, task: str, instruction: str, model: str | None, temperature: float | None) -> AgentReply:
        """One run of the agent on `task` with this instruction and model (`temperature`: None keeps the
        agent's own setting)."""
        raise NotImplementedError

    def is_stochastic(self, temperature: float) -> bool:
        return temperature > 0  # an LM call whatever is optimized of it, instruction or model

    def task(self, inputs: dict) -> str:
        return "\n".join(f"{label}: {str(inputs.get(field) or '').strip()}" for field, label in self.labels.items())

    def forward(self, inputs: list[dict], value: Any, ctx) -> list[dict]:
        instruction, model = (self.instruction, value) if self.kind is ConfigKind.CHOICE else (value, self.model)
        replies = run_coroutine(self._run_all([self.task(x) for x in inputs], instruction, model, ctx.temperature))
        outputs = []
        for reply, x in zip(replies, inputs, strict=True):
            for event, n in zip(AGENT_EVENTS, (reply.requests, reply.input_tokens, reply.output_tokens), strict=True):
                ctx.count(self.name, event, n)
            try:
                outputs.append({self.output: self.parse(reply.text, x) if self.parse else reply.text})
            except Unparsed as unparsed:
                ctx.count(self.name, PARSE_FAILURES)
                outputs.append({self.output: unparsed.fallback})
        return outputs

    async def _run_all(self, tasks: list[str], instruction: str, model: str | None,
                       temperature: float | None) -> list[AgentReply]:
        slots = asyncio.Semaphore(self.concurrency)

        async def one(task: str) -> AgentReply:
            async with slots:
                try:
                    return await self.run_agent(task, instruction, model, temperature)
                except openai.APIError as exc:  # both frameworks call their model through the openai client
                    first = (str(exc).strip().splitlines() or [""])[0]
                    raise LMCallFailed(f"component {self.name!r}: the {self.framework} agent's model call failed "
                                       f"({type(exc).__name__}: {first})",
                                       "check the server and model the agent is configured with") from exc

        return list(await asyncio.gather(*(one(t) for t in tasks)))
