"""What the agent-adapter tests share: a one-component system run against the recording proxy, and the address
of a server that is gone."""
from __future__ import annotations

import socket

from optimas_cli.system import CompoundSystem, RunContext, RunLedger

QUESTIONS = [{"question": "What is 2+2?"}, {"question": "What is the capital of France?"}]


def run(component, value, proxy, **ctx_settings):
    """The one-component system on QUESTIONS with `value`: ({question: answer}, the exchanges, ledger)."""
    system = CompoundSystem([component], inputs=["question"], outputs=["answer"])
    ctx = RunContext(ledger=RunLedger(1), **ctx_settings)
    proxy.clear()
    trajectories = system.run(QUESTIONS, system.default_config().replace("answerer", value), ctx)
    return {t.example["question"]: t.final(["answer"])["answer"] for t in trajectories}, proxy.exchanges[:], ctx.ledger


def closed_api_base() -> str:
    """An API base on a local port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{probe.getsockname()[1]}/v1"
