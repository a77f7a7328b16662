"""An AutoGen AgentChat `AssistantAgent` as a component: its `system_message` is the prompt optimas changes,
or, given `models`, the model its model client calls is. Needs the extra: pip install 'optimas[autogen]'.

An AssistantAgent keeps each run's messages for the next, so every input runs on a fresh copy, loaded from the
agent's component config (AutoGen's own `dump_component`): tools are rebuilt from their source code, as AutoGen
does for any config it loads.

    from optimas_cli.adapters.autogen import AutoGenComponent
    AutoGenComponent(agent, "answerer", inputs={"question": "Question"}, output="answer")
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from optimas_cli.adapters.agent import AgentComponent, AgentReply, missing_extra
from optimas_cli.errors import UserError

try:
    # autogen_ext's OpenAI client is what the agent's model client config names: load_component imports it
    from autogen_agentchat.agents import AssistantAgent
    from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: F401
except ImportError:
    raise missing_extra("autogen", "AutoGen", "autogen-agentchat, autogen-ext[openai]") from None


class AutoGenComponent(AgentComponent):
    framework = "AutoGen"

    def __init__(self, agent: AssistantAgent, name: str, inputs: dict[str, str], output: str, *,
                 models: Sequence[str] = (), description: str | None = None,
                 parse: Callable[[str, dict], Any] | None = None, alternatives: tuple[str, ...] = (),
                 concurrency: int = 8):
        if not isinstance(agent, AssistantAgent):
            raise UserError(f"component {name!r}: {type(agent).__name__} is not an AssistantAgent",
                            "wrap an autogen_agentchat.agents.AssistantAgent")
        try:
            self.config = agent.dump_component()
        except Exception as exc:  # e.g. a tool whose source code cannot be read (defined in a notebook cell)
            raise UserError(f"component {name!r}: AutoGen cannot dump agent {agent.name!r} to a component config "
                            f"({type(exc).__name__}: {exc})",
                            "define its tools in a module file, as AutoGen's component configs need") from None
        super().__init__(name, description or agent.description, inputs, output,
                         instruction=self.config.config.get("system_message") or "",
                         model=self.config.config["model_client"]["config"].get("model"), models=models,
                         parse=parse, alternatives=alternatives, concurrency=concurrency)

    async def run_agent(self, task: str, instruction: str, model: str | None, temperature: float | None) -> AgentReply:
        config = self.config.model_copy(deep=True)
        config.config["system_message"] = instruction
        client = config.config["model_client"]["config"]
        if model is not None:
            client["model"] = model
        if temperature is not None:
            client["temperature"] = temperature
        result = await AssistantAgent.load_component(config).run(task=task)
        usages = [m.models_usage for m in result.messages if m.models_usage is not None]
        return AgentReply(result.messages[-1].to_text(), len(usages), sum(u.prompt_tokens for u in usages),
                          sum(u.completion_tokens for u in usages))
