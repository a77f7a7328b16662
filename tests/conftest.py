"""Shared fixtures: a tiny random chat model served through the real local provider."""
from __future__ import annotations

import os

import pytest

# Offline everywhere: no hub downloads, and litellm must read its bundled cost map.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
from optimas_cli.environment import prepare_process  # noqa: E402

prepare_process()  # what the `optimas` command sets up before torch, litellm and textgrad load

# The files that take most CPU (per-test rusage of a full run, 2026-12-07), longest first. They start first: `-n auto
# --dist loadfile` hands files to workers in collection order, and a long file handed out last ran alone at the end
# (the plan grid, 2 of the suite's 16 minutes).
LONG_FILES = ("test_plan_grid.py", "test_faults_under_load.py", "test_lm_server_runs.py", "test_served_sampling.py",
              "test_methods_sysdpo_reinforce.py", "test_bigcodebench_judge.py", "test_loop_adaptation.py",
              "test_budget_resume.py", "test_plan.py", "test_lrf_train.py", "test_config_schema.py",
              "test_own_pipeline.py", "test_tracking.py", "test_sweeps.py", "test_device_check.py")


def pytest_collection_modifyitems(items):
    rank = {name: i for i, name in enumerate(LONG_FILES)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order

TINY_MODEL = "local/tiny-llama"


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A transformers folder holding a 2-layer random Llama with a ChatML tokenizer."""
    from optimas_cli.flows.tiny_models import build_tiny_chat_model

    return build_tiny_chat_model(tmp_path_factory.mktemp("tiny-llama"))


@pytest.fixture(scope="session")
def tiny_model(tiny_model_dir):
    """The litellm model name ("local/tiny-llama") of the tiny model, registered with the local provider."""
    from optimas_cli.lm.local.provider import register_provider
    from optimas_cli.lm.local.registry import register_local_model

    register_provider()
    return register_local_model(TINY_MODEL, tiny_model_dir)


@pytest.fixture(scope="session")
def tiny_adapter_dir(tiny_model_dir, tmp_path_factory):
    """A LoRA adapter folder for the tiny model, with random non-zero weights."""
    from optimas_cli.flows.tiny_models import build_tiny_lora_adapter

    return build_tiny_lora_adapter(tiny_model_dir, tmp_path_factory.mktemp("tiny-adapter"))


@pytest.fixture
def tiny_lm(tiny_model, tmp_path):
    """An LMClient on the tiny model with a fresh call cache in tmp_path."""
    from optimas_cli.lm.client import LMClient

    return LMClient(model=tiny_model, temperature=0.0, max_tokens=8, concurrency=16, cache_dir=str(tmp_path))


@pytest.fixture(scope="session")
def served_tiny_model(tiny_model_dir):
    """A real OpenAI-compatible server: `transformers serve` on 127.0.0.1 (a free port) serving the tiny
    model folder. Yields (api_base, litellm model name); skipped where its extras are not installed."""
    from tests.transformers_server import transformers_serve

    with transformers_serve(tiny_model_dir) as api_base:
        yield api_base, f"hosted_vllm/{tiny_model_dir}"


@pytest.fixture(scope="session")
def served_two_tiny_models(tiny_model_dir, tmp_path_factory):
    """`transformers serve` loading whichever model folder a request names, behind a proxy that records each
    request: yields (proxy, model a, model b), two tiny models' folders as a request names them. The agent
    adapters' tests point the agents at proxy.api_base."""
    from optimas_cli.flows.tiny_models import build_tiny_chat_model
    from tests.recording_proxy import RecordingProxy
    from tests.transformers_server import transformers_serve

    other = build_tiny_chat_model(tmp_path_factory.mktemp("tiny-llama-b"), seed=1)
    with transformers_serve(None) as api_base, RecordingProxy(api_base) as proxy:
        yield proxy, str(tiny_model_dir), str(other)


@pytest.fixture
def seeds_by_prompt(monkeypatch):
    """Every rendered prompt the local model sampled, with the seeds it sampled it with."""
    import threading
    from collections import defaultdict

    from optimas_cli.lm.local.model import LocalModel

    seen: dict[str, set[int]] = defaultdict(set)
    lock = threading.Lock()
    original = LocalModel.serve

    def record(requests):
        with lock:
            for request in requests:
                seen[request.prompt].add(request.seed)
        return requests

    def recording(self, requests, adapter, deliver, join=None):
        joining = (lambda rows, reach: record(join(rows, reach))) if join is not None else None
        return original(self, record(requests), adapter, deliver, joining)

    monkeypatch.setattr(LocalModel, "serve", recording)
    return seen
