"""Every config value's type and range, in one place: `check_config(cfg)` refuses a bad one in one line.

Hydra accepts whatever an override spells (`lm.max_retries=-1`, `lrf.train.epochs=ten`, `+pipeline.foo=1`),
and without this the value surfaces late: an assertion, a traceback, or a server retried six times for
`lm.timeout=abc`. One validation layer, called by `flows/validate.check_values` (so `optimas plan`, `run`,
`collect`, `train-lrf`, `eval`, `headroom`, the Python API and every job of a sweep pass here) before a
folder is made, a model is loaded or anything is spent. A plain table rather than Hydra structured
configs: those would need every conf/ YAML to name its schema in its defaults list, cannot express ranges
or `int | str`, and report a mismatch in a multi-line error.

Adding a config key = one line in its group's table below: LM, LRF, BUDGET, TRACKING[name],
METHODS[method _target_] (LOOP holds what Algorithm 1's methods share), PIPELINES[build _target_] (which
must also be a parameter of that build(): a pipeline gets only the keys its build() names), or TOP.
"""
from __future__ import annotations

import difflib
import importlib
import inspect
import types
import typing
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any

from optimas_cli.config_kinds import (
    AnyValue,
    CheckedBy,
    Flag,
    Integer,
    ListOf,
    MapOf,
    Node,
    Number,
    OneOf,
    Spec,
    Text,
    shown,
)
from optimas_cli.errors import UserError

# -- the tables: one line per key -------------------------------------------------------------------
DEVICE = Text(r"auto|cpu|mps|cuda(:\d+)?", "auto, cpu, cuda or cuda:N")
DTYPE = OneOf("auto", "bfloat16", "float32", "float16")  # optimas_cli/devices.py DTYPES, and auto
SOURCES = OneOf("auto", "lm", "pool", "mixed")  # optim/prompt.py SOURCES: any method's instruction candidates
PROPOSERS = OneOf("auto", "lm", "pool", "mixed", "gepa")  # optim/prompt.py PROPOSERS: Algorithm 1's prompt search
SCHEDULER = CheckedBy("optim/scheduler.py ComponentScheduler")  # flows/validate.py asks it
GATES = OneOf("strict", "paired")  # optim/gate.py RULES
CHOICE_SCALES = OneOf("relative", "absolute")  # optim/settings.py CHOICE_SCALES
FRACTION = Number(above=0, at_most=1)
RATE = Number(above=0)  # learning rates and sampling temperatures that must move something
LORA = Node({"r": Integer(1), "alpha": Integer(1)})  # what optim/node_policies.py reads of method.lora
# numpy's seed range (np.random.seed, transformers' set_seed): a larger seed passed every check and failed mid-run
SEED = Integer(0, 2**32 - 1)
PROGRAM = Text(r"([\w.]+|[\w./-]+\.py):[\w.]+", "module:attribute or path/to/file.py:attribute",
               null=True)  # pipeline=dspy's program (top-level `program`)
BACKBONE = Text(r"\S.*", "a Hugging Face model id or a local model folder")  # '' failed at the first model load

# The run's keys outside the groups (that others interpolate, or that the flows read); every other top-level
# key is conf/config.yaml's or a group, and `run_label` is what `optimas eval` adds (`+run_label=eval`)
TOP = {"seed": SEED, "proposer": SOURCES, "paired_noise": OneOf("shared", "independent"),  # system/context.py
       "run_label": Text(), "program": PROGRAM}

LM = Node({
    "model": Text(),
    "temperature": Number(at_least=0),  # the provider's own range: flows/validate.py
    "max_tokens": Integer(1),
    "concurrency": Integer(1),
    "max_retries": Integer(0),
    "retry_base_seconds": Number(at_least=0),
    "retry_max_seconds": Number(at_least=0),
    "api_base": Text(null=True),
    "api_key_env": Text(null=True),
    "cache": Flag(),
    "cache_dir": Text(null=True),
    "timeout": Number(above=0),
    "mock_response": Text(null=True),
    "litellm_kwargs": MapOf(Text(), null=True),
    "local": Node({
        "dtype": DTYPE, "device": DEVICE, "max_batch_size": Integer(1), "max_batch_tokens": Integer(1),
        "max_live_tokens": Integer(1),
        "gather_seconds": Number(at_least=0),
    }),
    "price": CheckedBy("lm/pricing.py CallPrice"),  # both rates or neither
})

LRF = Node({
    "name": Text(),
    "backbone": BACKBONE,
    "train_backbone": Text(r"full|heads|lora|top:\d+", "full | heads | lora | top:N"),
    "lora": Node({"r": Integer(1), "alpha": Integer(1), "dropout": Number(0, 1), "target_modules": ListOf(Text())},
                 null=True),
    "pooling": OneOf("auto", "mean", "last", "cls"),
    "max_length": Integer(1),
    "dtype": DTYPE,
    "device": DEVICE,
    "seed": SEED,
    "score_batch_size": Integer(1),
    "gradient_checkpointing": Flag(),
    "score_traces": Flag(),
    "min_steps": Integer(0),
    "min_test_pairs": Integer(0),
    "train_fraction": FRACTION,
    "collect": Node({
        "num_candidates": Integer(1),
        "mc_repeats": Integer(1),
        "downstream_temperature": Number(at_least=0, null=True),
        "epsilon": Number(at_least=0),
        "temperature": Number(at_least=0),
        "diverse": Flag(),
        "choices": OneOf("sample", "enumerate"),  # lrf/collect.py CHOICE_MODES
        "labels": OneOf("mc", "exact"),  # lrf/stage.py collect_options
        "cap_share": replace(FRACTION, null=True),  # lrf/sizing.py: Stage 1's share of budget.max_runs
    }),
    "train": Node({  # lrf/train.py TrainConfig
        "lr": RATE,
        "head_lr": RATE,
        "weight_decay": Number(at_least=0),
        "epochs": Integer(1),
        "batch_size": Integer(1),
        "patience": Integer(1),
        "dev_fraction": Number(0, 1),
        "test_fraction": Number(0, 1),
        "gap_weighting": OneOf("none", "gap"),
        "grad_clip": Number(above=0),
        "seed": SEED,
        "stage2_steps": Integer(0),
        "stage2_batch_size": Integer(1),
        "stage2_lr": Number(above=0, null=True),
    }),
    "buffer": Node({"capacity_per_component": Integer(1), "mix_ratio": Number(0, 1)}),
    "value_scorer": Node({"dim": Integer(1), "steps": Integer(0), "lr": RATE,  # lrf/value_scorer.py
                          "weight_decay": Number(at_least=0), "seed": SEED}),
    "judge": Node({"enabled": Flag(), "k": Integer(0), "max_chars": Integer(1)}),
})

GRPO_SIZES = {  # the budget's weights block and the optimizer's (conf/optimizer/default.yaml reads the first)
    "steps": Integer(1),
    "prompts_per_step": Integer(1),
    "num_generations": Integer(2),  # GRPO's group baseline needs two generations to compare
    "max_completion_length": Integer(1, null=True),
}

SIZES, CAPS = CheckedBy("system/budget.py Budget"), CheckedBy("system/caps.py BudgetCaps")
BUDGET = Node({
    **{key: SIZES for key in ("name", "train_size", "val_size", "test_size", "search_size", "num_candidates",
                              "num_steps", "fresh_size", "iterations", "max_runs_from")},
    **{key: CAPS for key in ("max_usd", "max_runs", "max_wall")},
    "weights": Node(GRPO_SIZES, null=True),
    "max_live_tokens": Integer(1, null=True),  # conf/lm/local.yaml reads it (null: the embedded provider's default)
})

OPTIMIZER = Node({  # conf/optimizer/default.yaml, optim/settings.py
    "prompt": Node({"proposer": PROPOSERS}),
    "choice": Node({"scale": CHOICE_SCALES, "temperature": Number(above=0, null=True),
                    "route": OneOf("post", "pre"),  # optim/settings.py CHOICE_ROUTES
                    "seed": replace(SEED, null=True)}),
    "weights": Node({
        **GRPO_SIZES,
        "work_dir": Text(null=True),
        "learning_rate": RATE,
        "beta": Number(at_least=0),
        "temperature": RATE,
        "lora_r": Integer(1),
        "lora_alpha": Integer(1),
        "lora_dropout": Number(0, 1),
        "bf16": Flag(null=True),
        "score_on_search": Flag(),
        "held_out_fraction": Number(0, 1),
        "seed": replace(SEED, null=True),
    }),
    "race": Node({"shortlist": Integer(0), "reduction_factor": Integer(2),  # optim/race.py, settings.py RaceSettings
                  "min_examples": Integer(1, null=True)}),
})

METHOD = {"_target_": Text(), "name": Text(), "seed": SEED}
LOOP = {  # what every method running Algorithm 1's loop takes
    **METHOD,
    "optimizer": OPTIMIZER,
    "optimizer_lm": Text(null=True),
    "scheduler": SCHEDULER,
    "gate": GATES,
    "gate_alpha": Number(above=0, at_most=0.5),
}
METHODS = {
    "optimas_cli.methods.optimas.Optimas": Node({
        **LOOP, "lrf": CheckedBy("the lrf group"), "skip_unpaired": Flag(),
        "adaptation": OneOf("lazy", "paper", "none"),  # optim/loop.py ADAPTATION_MODES
        "stage2_pool": OneOf("train", "beyond_train"),  # methods/optimas.py STAGE2_POOLS
    }),
    "optimas_cli.methods.global_reward.GlobalReward": Node({**LOOP, "rollouts": Integer(1)}),
    "optimas_cli.methods.global_reward.RandomReward": Node(LOOP),
    "optimas_cli.methods.hbc.HBC": Node({
        **LOOP, "samples": Integer(1), "temperature": Number(at_least=0), "top_fraction": FRACTION,
        "backbone": replace(BACKBONE, null=True), "device": DEVICE, "dtype": DTYPE, "max_length": Integer(1),
    }),
    "optimas_cli.methods.coordinate_ascent.CoordinateAscent": Node({**METHOD, "sweeps": Integer(1, null=True)}),
    "optimas_cli.methods.dspy_mipro.DSPyMIPRO": Node({
        **METHOD, "num_candidates": Integer(1, null=True), "num_trials": Integer(1, null=True),
        "proposer": SOURCES, "minibatch": Flag(), "minibatch_size": Integer(1), "init_temperature": Number(at_least=0),
        "max_tokens": Integer(1), "view_data_batch_size": Integer(1), "program_aware": Flag(), "data_aware": Flag(),
        "tip_aware": Flag(), "fewshot_aware": Flag(), "few_shot": Flag(), "max_bootstrapped_demos": Integer(0),
        "max_labeled_demos": Integer(0),
    }),
    "optimas_cli.methods.gepa.GEPA": Node({
        **METHOD, "max_metric_calls": Integer(1, null=True), "reflection_minibatch_size": Integer(1),
        "candidate_selection": OneOf("pareto", "current_best", "epsilon_greedy", "top_k_pareto"),  # gepa.optimize's
        "module_selector": OneOf("round_robin", "all"), "max_tokens": Integer(1), "temperature": Number(at_least=0),
    }),
    "optimas_cli.methods.llmselector.LLMSelector": Node({
        "_target_": Text(), "name": Text(), "components": ListOf(Text(), null=True),
        "rounds": Integer(1, null=True), "sample_size": Integer(1, null=True),
    }),
    "optimas_cli.methods.reinforce.Reinforce": Node({
        **METHOD, "rollouts": Integer(1), "temperature": Number(at_least=0), "learning_rate": RATE, "lora": LORA,
    }),
    "optimas_cli.methods.sysdpo.SysDPO": Node({
        **METHOD,
        "variant": OneOf("sampling", "direct"),  # methods/sysdpo.py VARIANTS
        "sampling": OneOf("dbs", "temperature"),  # optim/rollouts.py SAMPLING
        "k": Integer(2), "diversity_penalty": Number(at_least=0), "temperature": Number(at_least=0),
        "beta": Number(above=0), "steps": Integer(1), "batch_size": Integer(1), "learning_rate": RATE, "lora": LORA,
    }),
    "optimas_cli.methods.single_llm.SingleLLM": Node({"_target_": Text(), "name": Text()}),
    "optimas_cli.methods.textgrad.TextGrad": Node({
        **METHOD, "steps": Integer(1, null=True), "batch_size": Integer(1), "max_tokens": Integer(1),
        "temperature": Number(at_least=0), "constraints": ListOf(Text()),
    }),
    "optimas_cli.methods.tpe.TPE": Node({
        **METHOD, "trials": Integer(1, null=True), "minibatch_size": Integer(1), "reduction_factor": Integer(2),
        "startup_trials": Integer(0),
    }),
    "optimas_cli.methods.unoptimized.Unoptimized": Node({"_target_": Text(), "name": Text()}),
}

SPLIT_SIZES = {"train_size": Integer(1), "val_size": Integer(1), "test_size": Integer(1, null=True)}
PIPELINES = {  # each build()'s own parameters (a pipeline takes no key its build() does not name)
    "optimas_pipelines.amazon.build": {
        "base_model": Text(), "decider_model": Text(null=True), "analyzer_max_tokens": Integer(1),
        "profiler_max_tokens": Integer(1), "decider_max_tokens": Integer(1), "single_llm_max_tokens": Integer(1),
        "stratified_subsets": Flag(),
    },
    "optimas_pipelines.bigcodebench.build": {
        "code_max_tokens": Integer(1), "tests_max_tokens": Integer(1), "single_llm_max_tokens": Integer(1),
        "test_timeout": Number(above=0), "executor_timeout": Number(above=0), "memory_mb": Integer(1),
        "workers": Integer(1, null=True),
    },
    "optimas_pipelines.collab_chain.build": {
        "base_model": Text(), "reader_max_tokens": Integer(1), "answerer_max_tokens": Integer(1),
        "single_llm_max_tokens": Integer(1),
    },
    "optimas_pipelines.hotpotqa.build": {
        **SPLIT_SIZES, "k": Integer(1), "retriever": OneOf("bm25", "colbert"),  # hotpotqa/system.py RETRIEVERS
        "colbert_url": Text(null=True), "seed": SEED, "context_tokens": Integer(1, null=True),
    },
    "optimas_pipelines.pubmedqa.build": {
        "lm_model": Text(), "candidate_models": ListOf(Text()), "local_candidate_models": ListOf(Text()),
        "model_priors": MapOf(Number()), "analyst_max_tokens": Integer(1), "solver_max_tokens": Integer(1),
        "single_llm_max_tokens": Integer(1),
    },
    "optimas_pipelines.stark_prime.build": {
        "kb_dir": Text(null=True), "candidates_file": Text(null=True), "emb_dir": Text(null=True),
        "skb_root": Text(null=True), "cache_dir": Text(null=True), "train_size": Integer(1, null=True),
        "val_size": Integer(1, null=True), "test_size": Integer(1, null=True), "seed": SEED,
        "info_chars": Integer(1), "scorer_max_tokens": Integer(1),
    },
    "optimas_pipelines.synthetic.system.build": {
        **SPLIT_SIZES, "test_size": Integer(1),
        "components": Integer(2, 50),
        "shape": OneOf("chain", "tree", "diamond"),  # synthetic/spec.py SHAPES
        "kinds": OneOf("prompt", "choice", "route", "mix"),
        "options": Integer(2, 128), "input_types": Integer(1),
        "noise": Number(0, 1), "coupling": Number(0, 1),
        "interaction": OneOf("none", "on"),  # synthetic/spec.py INTERACTIONS
        "metric": OneOf("mean", "sink"),  # synthetic/spec.py METRICS
        "marks": Integer(1), "instance": SEED,
    },
    "optimas_pipelines.dspy_program.build": {  # the program's own module names its data and metric
        "program": PROGRAM, "trainset": Text(),
        "devset": Text(), "testset": Text(), "metric": Text(), "max_tokens": Integer(1),
    },
    "optimas_pipelines.toys.hint.build": {},
    "optimas_pipelines.toys.model_selector.build": {},
    "optimas_pipelines.toys.retriever.build": {},
}

# MLflow 3 refuses its file store (file:./mlruns, a bare folder) at the first call, after the whole run:
# a database file or a server is refused nothing, so the URI needs a scheme other than file:.
MLFLOW_URI = Text(pattern=r"(?!file:)([A-Za-z][A-Za-z0-9+.-]*:.+|databricks(-uc)?)",
                  meaning="a database or server URI: sqlite:///mlflow.db (a local file), postgresql://..., "
                          "http://host:5000; MLflow's file store (file:./mlruns) is in maintenance mode "
                          "(`mlflow migrate-filestore` moves an existing ./mlruns into sqlite)")
TRACKING = {
    "none": Node({"name": Text()}),
    "mlflow": Node({"name": Text(), "uri": MLFLOW_URI, "experiment": Text(), "artifact_location": Text(null=True)}),
    "wandb": Node({"name": Text(), "project": Text(), "entity": Text(null=True),
                   "mode": OneOf("online", "offline", "disabled"), "dir": Text()}),
}

COMPUTE = Node({"price_per_hour": CheckedBy("flows/setup.py run_costs")})

FIXED = {"lm": LM, "lrf": LRF, "budget": BUDGET, "compute": COMPUTE}  # nodes that take the same keys in every config
PER_OPTION = {"method": METHODS, "pipeline": PIPELINES, "tracking": TRACKING}  # by _target_ (tracking: name)


# -- checking ----------------------------------------------------------------------------------------
def check_config(cfg: Mapping) -> None:
    """Raise a one-line UserError for the first value or key of the config the tables refuse."""
    known = top_keys()
    for key in cfg:
        if key not in known:
            raise unknown_key(key, sorted(known), "the config (conf/config.yaml)")
    for key, spec in TOP.items():
        if key in cfg:
            spec.check(key, _resolved(cfg, key))
    for group, node in FIXED.items():
        if cfg.get(group) is not None:
            check_node(group, node, _resolved(cfg, group))
    if cfg.get("tracking") is not None:
        tracking = _resolved(cfg, "tracking")
        name = tracking.get("name", "none")
        OneOf(*TRACKING).check("tracking.name", name)
        check_node("tracking", TRACKING[name], tracking)
    if cfg.get("method") is not None:
        method = _resolved(cfg, "method")
        if method.get("_target_") in METHODS:  # another target fails where Hydra imports it
            check_node("method", METHODS[method["_target_"]], method)
    if cfg.get("pipeline") is not None:
        pipeline = _resolved(cfg, "pipeline")
        check_pipeline(pipeline)
        if cfg.get("program") is not None and "program" not in pipeline:  # only pipeline=dspy's YAML reads it
            raise UserError(f"program={cfg['program']} is read by pipeline=dspy only", "add pipeline=dspy, or drop program=")


def check_node(key: str, node: Node, value: Any, owner: str | None = None) -> None:
    """`value` against `node`, recursively; `owner` names who takes the node's keys in an unknown key's error."""
    if value is None and node.null:
        return
    if not isinstance(value, Mapping):
        raise UserError(f"{key}={shown(value)} is not a group of settings", f"set its keys, e.g. {key}.{next(iter(node))}=...")
    for name, item in value.items():
        full = f"{key}.{name}"
        if name not in node:
            raise unknown_key(full, node, owner)
        spec = node[name]
        if isinstance(spec, Node):
            check_node(full, spec, item)
        else:
            spec.check(full, item)


def check_pipeline(pipeline: Mapping) -> None:
    """The pipeline's keys are its build()'s parameters, typed by PIPELINES (the bundled pipelines) or else
    by the build()'s own annotations (a user's pipeline: `max_tokens: int`)."""
    target = pipeline.get("_target_")
    if not isinstance(target, str):
        raise UserError("pipeline._target_ is not set", "name the pipeline's build function, e.g. _target_: my_pipeline.build")
    declared = build_parameters(target)
    node = Node({"_target_": Text(), **{k: PIPELINES.get(target, {}).get(k, spec) for k, spec in declared.items()}})
    check_node("pipeline", node, pipeline, owner=f"{target}()")


def build_parameters(target: str) -> dict[str, Spec]:
    """The keyword parameters `target`'s build() declares (data_dir aside: the run passes it; **kwargs takes
    nothing), each with the kind its annotation names."""
    module, _, name = target.rpartition(".")
    try:
        build = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as exc:
        raise UserError(f"cannot import pipeline._target_ {target!r} ({type(exc).__name__}: {exc})",
                        "run optimas from the folder that holds the module, or add that folder to PYTHONPATH "
                        "(see docs/own_pipeline.md)") from None
    try:
        hints = typing.get_type_hints(build)
    except Exception:  # an annotation naming what its module does not import: leave the values unchecked
        hints = {}
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: _annotated(hints.get(p.name), p.default is None) for p in inspect.signature(build).parameters.values()
            if p.kind in kinds and p.name != "data_dir"}


def _annotated(hint: Any, null: bool) -> Spec:
    """`int`, `float | None`, `str`, `bool` as a kind; anything else is the build()'s own business."""
    union = typing.get_origin(hint) in (typing.Union, types.UnionType)
    options = [a for a in (typing.get_args(hint) if union else (hint,)) if a is not type(None)]
    kind = {int: Integer, float: Number, str: Text, bool: Flag}.get(options[0]) if len(options) == 1 else None
    return kind(null=null or len(options) < len(typing.get_args(hint))) if kind else AnyValue()


def unknown_key(key: str, node: Collection[str], owner: str | None = None) -> UserError:
    """`key` is no setting of its group (`owner` names who takes the group's keys): the closest one it may
    be a typo of, else what the group takes."""
    group, _, name = key.rpartition(".")
    owner = owner or group
    takes = [k for k in node if not k.startswith("_")]
    close = difflib.get_close_matches(name, takes, n=1, cutoff=0.6)
    if close:
        return UserError(f"unknown key {key}", f"did you mean {group + '.' if group else ''}{close[0]}?")
    if not takes:
        return UserError(f"unknown key {key}: {owner} takes no settings", f"drop {key}")
    return UserError(f"unknown key {key}", f"{owner} takes {', '.join(takes)}")


def suggest_key(dotted: str) -> UserError | None:
    """For an override of a key the composed config lacks (`lm.max_token=5`): the error naming the key it
    is a typo of, when some option of its group has one close to it; else None."""
    parts = dotted.lstrip("+~").split(".")
    node: Any
    if len(parts) == 1:  # a top-level key (`repeat=3`)
        node = top_keys()
    elif parts[0] in FIXED:
        node = FIXED[parts[0]]
    else:  # any option's key: a typo is a typo whichever option is chosen
        node = {k: v for option in PER_OPTION.get(parts[0], {}).values() for k, v in option.items()}
    for part in parts[1:-1]:
        node = node.get(part) if isinstance(node, Mapping) else None
    if not isinstance(node, Mapping | set) or parts[-1] in node:
        return None
    error = unknown_key(".".join(parts), node)
    return error if error.fix and error.fix.startswith("did you mean") else None


def top_keys() -> set[str]:
    """What a config holds at its top level: conf/config.yaml's keys, the groups and TOP (`hydra`: the
    node a composition with the Hydra config adds, as the Python API's does)."""
    from omegaconf import OmegaConf

    from optimas_cli.conf import CONF_DIR, GROUPS

    return {*OmegaConf.load(CONF_DIR / "config.yaml"), *GROUPS, *TOP} - {"defaults"}


def _resolved(cfg: Mapping, key: str) -> Any:
    """The node's plain value with its interpolations resolved; one that cannot resolve is one line too."""
    from omegaconf import DictConfig, ListConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    try:
        value = cfg[key]
        return OmegaConf.to_container(value, resolve=True) if isinstance(value, DictConfig | ListConfig) else value
    except OmegaConfBaseException as exc:
        raise UserError(f"cannot resolve {key} ({str(exc).strip().splitlines()[0]})",
                        "fix the ${...} interpolation it names") from None
