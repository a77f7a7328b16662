"""Which model each LM component of a run calls: the run's `lm.model` unless the component names its
own (a pipeline config key), runs LoRA adapters on a local base model, or takes the model a selector
chose per question. Printed when a run starts and recorded in results.json (`models`), beside what the
LM layer measured (`ledger.lm.by_model`)."""
from __future__ import annotations

from optimas_cli.system import Pipeline
from optimas_cli.system.local_model_component import LocalModelComponent

LOCAL_BASE = "local base model: LoRA adapters run in this process"


def component_models(pipeline: Pipeline, run_model: str | None, method=None) -> dict[str, str]:
    """{component: the model(s) it calls, in words}, for the components that call an LM."""
    system = pipeline.system
    producer = {field: comp for comp in system.components.values() for field in comp.outputs}
    out: dict[str, str] = {}
    for name, comp in system.components.items():
        if not comp.calls_lm:
            continue
        if isinstance(comp, LocalModelComponent):
            out[name] = f"{comp.base_model} ({LOCAL_BASE})"
            continue
        field = getattr(comp, "model_field", None)  # the model is an input, chosen per question upstream
        if field is not None and field in producer:
            choices = list(producer[field].choices or ())
            out[name] = (_named(choices[0], run_model) if len(choices) == 1 else
                         f"one of {', '.join(choices)} (chosen per input by {producer[field].name})")
            continue
        own = getattr(comp, "model", None)
        out[name] = _named(own if isinstance(own, str) and own else run_model, run_model)
    if hasattr(method, "optimizer_lm"):  # the prompt search's own LM calls
        out["prompt proposer"] = _named(method.optimizer_lm or run_model, run_model)
    return out


def local_precision(local_cfg) -> str:
    """The dtype the embedded provider generates in, and the setting it comes from (results.json `models`)."""
    from optimas_cli.devices import dtype_name

    local_cfg = local_cfg or {}
    setting = local_cfg.get("dtype") or "auto"
    return f"{dtype_name(setting, local_cfg.get('device'), 'lm.local')} (lm.local.dtype={setting})"


def _named(model: str | None, run_model: str | None) -> str:
    return f"{model} (the run's lm)" if model == run_model else f"{model} (named in the config)"


def models_line(models: dict[str, str]) -> str:
    return "models: " + "; ".join(f"{name} → {model}" for name, model in models.items())
