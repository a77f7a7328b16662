"""The AutoGen adapter against a real OpenAI-compatible server (`transformers serve` on two tiny models, behind
a proxy that records each request): the agent runs through the component inside a system, each input on a
fresh copy of it, and the configuration optimas sets, its system message or its model, is what it sends."""
from __future__ import annotations

import importlib
import sys

import pytest

pytest.importorskip("autogen_agentchat")  # the 'autogen' extra; dev installs it

from autogen_agentchat.agents import AssistantAgent  # noqa: E402
from autogen_ext.models.openai import OpenAIChatCompletionClient  # noqa: E402

from optimas_cli.adapters.autogen import AutoGenComponent  # noqa: E402
from optimas_cli.errors import LMCallFailed, UserError  # noqa: E402
from optimas_cli.system import ConfigKind, RunContext, RunLedger  # noqa: E402
from tests.agent_checks import QUESTIONS, closed_api_base, run  # noqa: E402

MODEL_INFO = {"vision": False, "function_calling": False, "json_output": False, "family": "unknown",
              "structured_output": False}


def answerer(model: str, api_base: str, **options) -> AutoGenComponent:
    client = OpenAIChatCompletionClient(model=model, base_url=api_base, api_key="unused", model_info=MODEL_INFO,
                                        max_tokens=4, max_retries=0)
    agent = AssistantAgent(name="qa", model_client=client, system_message="Answer in one word.",
                           description="answers a question")
    return AutoGenComponent(agent, "answerer", inputs={"question": "Question"}, output="answer", **options)



def test_the_instruction_optimas_sets_is_the_system_message_the_agent_sends(served_two_tiny_models):
    proxy, model, _ = served_two_tiny_models
    component = answerer(model, proxy.api_base)
    assert (component.kind, component.default, component.description) == (
        ConfigKind.PROMPT, "Answer in one word.", "answers a question")
    for instruction in ("Answer in one word.", "Reply with yes or no only.", "Answer in one word."):
        answers, exchanges, ledger = run(component, instruction, proxy)
        # one system and one user message each: no input sees another's conversation, even on the third pass
        sent = [(request["messages"], request["model"], request["max_tokens"]) for request, _ in exchanges]
        assert sorted(sent, key=str) == sorted((([{"role": "system", "content": instruction},
                                                 {"role": "user", "content": f"Question: {x['question']}",
                                                  "name": "user"}], model, 4) for x in QUESTIONS), key=str)
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
        assert all("temperature" not in request for request, _ in exchanges)  # the client's own setting
    _, exchanges, _ = run(component, other, proxy, temperature=0.7)  # optimas sampling candidates
    assert [request["temperature"] for request, _ in exchanges] == [0.7, 0.7]


def test_a_server_that_is_gone_stops_the_run_in_one_line(served_two_tiny_models):
    _, model, _ = served_two_tiny_models
    closed = closed_api_base()
    component = answerer(model, closed)
    with pytest.raises(LMCallFailed) as failed:
        component.execute(QUESTIONS[:1], component.default, RunContext(ledger=RunLedger(1)))
    assert str(failed.value) == ("component 'answerer': the AutoGen agent's model call failed "
                                 "(APIConnectionError: Connection error.) — check the server and model the agent "
                                 "is configured with")


def test_an_agent_autogen_cannot_copy_is_refused_in_one_line():
    client = OpenAIChatCompletionClient(model="m", base_url="http://127.0.0.1:1/v1", api_key="unused",
                                        model_info={**MODEL_INFO, "function_calling": True})
    namespace: dict = {}
    exec("def add(a: int, b: int) -> int:\n    return a + b", namespace)  # no source file to read it back from
    agent = AssistantAgent(name="qa", model_client=client, tools=[namespace["add"]])
    with pytest.raises(UserError, match="AutoGen cannot dump agent 'qa' to a component config"):
        AutoGenComponent(agent, "answerer", inputs={"question": "Question"}, output="answer")


def test_without_the_extra_the_adapter_is_refused_naming_it(monkeypatch):
    for module in [m for m in sys.modules if m.startswith("autogen_agentchat.")]:
        monkeypatch.delitem(sys.modules, module)
    monkeypatch.setitem(sys.modules, "autogen_agentchat", None)  # as if not installed
    monkeypatch.delitem(sys.modules, "optimas_cli.adapters.autogen")
    with pytest.raises(UserError) as refused:
        importlib.import_module("optimas_cli.adapters.autogen")
    assert str(refused.value) == ("the AutoGen adapter needs autogen-agentchat, autogen-ext[openai], which the "
                                  "optional 'autogen' extra installs — pip install 'optimas[autogen]' (in a "
                                  "checkout: pip install -e '.[autogen]')")
