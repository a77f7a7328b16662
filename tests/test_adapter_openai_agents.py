"""The OpenAI Agents SDK adapter against a real OpenAI-compatible server (`transformers serve` on two tiny
models, behind a proxy that records each request): the agent runs through the component inside a system, and
the configuration optimas sets, its instructions or its model, is what the agent sends."""
from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("agents")  # the 'openai-agents' extra; dev installs it

from agents import Agent, ModelSettings, OpenAIProvider, RunConfig  # noqa: E402
from openai import AsyncOpenAI  # noqa: E402

from optimas_cli.adapters.openai_agents import OpenAIAgentComponent  # noqa: E402
from optimas_cli.errors import LMCallFailed, UserError  # noqa: E402
from optimas_cli.system import ConfigKind, RunContext, RunLedger  # noqa: E402
from tests.agent_checks import QUESTIONS, closed_api_base, run  # noqa: E402


def run_config(api_base: str) -> RunConfig:
    client = AsyncOpenAI(base_url=api_base, api_key="unused", max_retries=0)
    return RunConfig(model_provider=OpenAIProvider(openai_client=client, use_responses=False), tracing_disabled=True)


def answerer(model: str, api_base: str, **options) -> OpenAIAgentComponent:
    agent = Agent(name="qa", instructions="Answer in one word.", model=model, model_settings=ModelSettings(max_tokens=4))
    return OpenAIAgentComponent(agent, "answerer", inputs={"question": "Question"}, output="answer",
                                run_config=run_config(api_base), **options)



def test_the_instruction_optimas_sets_is_the_system_message_the_agent_sends(served_two_tiny_models):
    proxy, model, _ = served_two_tiny_models
    component = answerer(model, proxy.api_base)
    assert (component.kind, component.default) == (ConfigKind.PROMPT, "Answer in one word.")
    for instruction in ("Answer in one word.", "Reply with yes or no only."):
        answers, exchanges, ledger = run(component, instruction, proxy)
        sent = [(request["messages"], request["model"], request["max_tokens"]) for request, _ in exchanges]
        assert sorted(sent, key=str) == sorted((([{"role": "system", "content": instruction},
                                                 {"role": "user", "content": f"Question: {x['question']}"}], model, 4)
                                                for x in QUESTIONS), key=str)
        # each answer is the server's reply to that question's request
        replies = {request["messages"][1]["content"]: reply["choices"][0]["message"]["content"]
                   for request, reply in exchanges}
        assert answers == {q: replies[f"Question: {q}"] for q in answers}
        events = ledger.events["run"]["answerer"]
        assert events["agent_requests"] == 2
        assert events["agent_input_tokens"] == sum(reply["usage"]["prompt_tokens"] for _, reply in exchanges)
        assert events["agent_output_tokens"] == sum(reply["usage"]["completion_tokens"] for _, reply in exchanges)


def test_given_models_the_model_is_the_configuration_and_the_server_answers_with_it(served_two_tiny_models):
    proxy, model, other = served_two_tiny_models
    component = answerer(model, proxy.api_base, models=(other,))
    assert (component.kind, component.choices, component.default) == (ConfigKind.CHOICE, (model, other), model)
    for chosen in (other, model):
        _, exchanges, _ = run(component, chosen, proxy)
        assert [(request["model"], reply["model"]) for request, reply in exchanges] == [(chosen, chosen)] * 2
        assert {request["messages"][0]["content"] for request, _ in exchanges} == {"Answer in one word."}
        assert all("temperature" not in request for request, _ in exchanges)  # the agent's own setting
    _, exchanges, _ = run(component, other, proxy, temperature=0.7)  # optimas sampling candidates
    assert [request["temperature"] for request, _ in exchanges] == [0.7, 0.7]


def test_a_server_that_is_gone_stops_the_run_in_one_line(served_two_tiny_models):
    _, model, _ = served_two_tiny_models
    closed = closed_api_base()
    component = answerer(model, closed)
    with pytest.raises(LMCallFailed) as failed:
        component.execute(QUESTIONS[:1], component.default, RunContext(ledger=RunLedger(1)))
    assert str(failed.value) == ("component 'answerer': the OpenAI Agents SDK agent's model call failed "
                                 "(APIConnectionError: Connection error.) — check the server and model the agent "
                                 "is configured with")


def test_what_cannot_be_optimized_is_refused_in_one_line():
    dynamic = Agent(name="qa", instructions=lambda ctx, agent: "computed", model="m")
    with pytest.raises(UserError, match="computes its instructions"):
        OpenAIAgentComponent(dynamic, "answerer", inputs={"question": "Question"}, output="answer")
    with pytest.raises(UserError, match="run_config.model overrides"):
        OpenAIAgentComponent(Agent(name="qa", instructions="x", model="m"), "answerer", {"question": "Question"},
                             "answer", run_config=RunConfig(model="m"), models=("n",))


def test_without_the_extra_the_adapter_is_refused_naming_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "agents", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "optimas_cli.adapters.openai_agents")
    with pytest.raises(UserError) as refused:
        importlib.import_module("optimas_cli.adapters.openai_agents")
    assert str(refused.value) == ("the OpenAI Agents SDK adapter needs openai-agents, which the optional "
                                  "'openai-agents' extra installs — pip install 'optimas[openai-agents]' (in a "
                                  "checkout: pip install -e '.[openai-agents]')")
