"""Which model each LM component calls, as a run prints it and results.json records it (`models`)."""
from __future__ import annotations

from types import SimpleNamespace

from optimas_cli.flows.models import component_models, local_precision, models_line
from optimas_pipelines.amazon.system import build_system as amazon_system
from optimas_pipelines.pubmedqa.system import build_system as pubmedqa_system

SERVED = "hosted_vllm/served"


def pipeline(system):
    return SimpleNamespace(system=system)


def test_lora_nodes_say_they_run_the_local_base_model_and_the_rest_call_the_runs_lm():
    system = amazon_system("local/smollm2-135m-instruct", None, 8, 8, 8)
    models = component_models(pipeline(system), SERVED)
    assert models["session_analyzer"].startswith("local/smollm2-135m-instruct (local base model")
    assert models["candidate_profiler"].startswith("local/smollm2-135m-instruct (local base model")
    assert models["next_item_decider"] == f"{SERVED} (the run's lm)"
    named = component_models(pipeline(amazon_system("local/smollm2-135m-instruct", "openai/gpt-4o", 8, 8, 8)), SERVED)
    assert named["next_item_decider"] == "openai/gpt-4o (named in the config)"


def test_model_selected_components_list_their_candidates_and_the_proposer_its_model():
    system = pubmedqa_system([SERVED, "openai/gpt-4o"], {}, 8, 8)
    method = SimpleNamespace(optimizer_lm=None)
    models = component_models(pipeline(system), SERVED, method)
    assert models == {
        "context_analyst": f"one of {SERVED}, openai/gpt-4o (chosen per input by context_model_selector)",
        "problem_solver": f"one of {SERVED}, openai/gpt-4o (chosen per input by solver_model_selector)",
        "prompt proposer": f"{SERVED} (the run's lm)",
    }
    assert models_line(models).startswith(f"models: context_analyst → one of {SERVED}")
    single = component_models(pipeline(pubmedqa_system([SERVED], {}, 8, 8)), SERVED)
    assert single["context_analyst"] == f"{SERVED} (the run's lm)"


def test_the_precision_of_the_embedded_model_is_named_with_its_setting():
    assert local_precision({"dtype": "auto", "device": "cpu"}) == "float32 (lm.local.dtype=auto)"
    assert local_precision({"dtype": "bfloat16", "device": "cpu"}) == "bfloat16 (lm.local.dtype=bfloat16)"
