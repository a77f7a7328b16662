"""Weights optimizer: RL fine-tuning of a local causal LM component's LoRA adapter, r_k as reward.

Algorithm: GRPO (trl.GRPOTrainer) with a Python reward function. The paper runs PPO with r_k as
the critic; trl 1.13+ no longer ships a PPOTrainer. GRPO keeps what matters here — a learned
reward model scoring sampled completions, a clipped policy-gradient update — and drops PPO's
value network: the baseline is the mean reward of a group of completions of the same prompt.
That removes a second model to train and hold in memory, which is what makes a few RL steps
affordable on a CPU. (RLOO, the leave-one-out variant, would serve equally; GRPO is the trl
trainer that supports continuing an existing PEFT adapter.) The paper's trust region is
approximated the same way as for prompts: a few small steps per Algorithm 1 iteration.

The reward of a completion is r_k(x, parse_output(completion)) for the search input x it was
generated from — the same LRF head the loop trained for this component.

Contract of a weights-kind component (beyond `forward`, which must send exactly these messages
to the LM with `adapter=value`):
    build_messages(input_dict, value) -> list[dict]   the chat messages of one input
    parse_output(text) -> dict                        the declared output fields read from one
                                                      completion; must not raise on junk text
    base_model_path() -> str                          the transformers folder the adapter applies
                                                      to, or a local model name of the LM layer
                                                      ("local/smollm2-135m-instruct"); or pass
                                                      base_model_path= to propose()
    max_tokens: int                                   (attribute, optional) the completion budget
                                                      it is deployed with; GRPO generates as many
                                                      tokens, so r_k scores whole completions, not
                                                      prefixes of what is evaluated (without it: the
                                                      run LM's max_tokens, which its calls then get)

Settings: optim/settings.py WeightsSettings (work_dir is required: adapters are saved in fresh
folders under it). `max_completion_length` overrides the deployed budget (a CPU cap); the log then
says how many completions it cut. GRPO samples at its own `temperature`: a greedy deployment has no
exploration to learn from. (Weights components send no stop strings: LocalModelComponent.forward.)
"""
from __future__ import annotations

import contextlib
import gc
import json
import logging
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from optimas_cli.errors import UserError
from optimas_cli.memory import large_allocations_unmapped_on_free
from optimas_cli.optim.proposal import Proposal, make_rng, score_value
from optimas_cli.optim.settings import WeightsSettings, typed
from optimas_cli.system.component import Component
from optimas_cli.system.context import RunContext
from optimas_cli.system.local_reward import LocalReward

log = logging.getLogger(__name__)
CONTRACT = ("build_messages", "parse_output")


def resolve_base_model(name_or_path: str) -> str:
    """A transformers folder for the base model: a folder as given, else the LM layer's folder behind
    a local model name ("local/smollm2-135m-instruct", converted once; or a registered folder)."""
    path = Path(str(name_or_path)).expanduser()
    if (path / "config.json").is_file():
        return str(path)
    from optimas_cli.lm import local_model_folder

    return str(local_model_folder(str(name_or_path)))


def _require_contract(component: Component, base_model_path: str | None) -> str:
    missing = [m for m in CONTRACT if not callable(getattr(component, m, None))]
    if base_model_path is None and not callable(getattr(component, "base_model_path", None)):
        missing.append("base_model_path")
    if missing:
        raise UserError(
            f"weights-kind component {component.name!r} lacks {', '.join(missing)}",
            "implement build_messages(input_dict, value), parse_output(text) and base_model_path() on it "
            "(see optimas_cli/optim/weights.py)",
        )
    return resolve_base_model(base_model_path or component.base_model_path())


def completion_budget(component: Component, ctx: RunContext, cfg: WeightsSettings) -> int:
    """Tokens GRPO generates per completion: the setting when given, else what the component is deployed with."""
    if cfg.max_completion_length is not None:
        deployed = getattr(component, "max_tokens", None)
        if deployed is not None and cfg.max_completion_length < deployed:
            log.warning("GRPO generates %d tokens for %s, deployed with %d: r_k scores prefixes of its outputs",
                        cfg.max_completion_length, component.name, deployed)
        return int(cfg.max_completion_length)
    deployed = getattr(component, "max_tokens", None) or getattr(ctx.lm, "max_tokens", None)
    if deployed is None:
        raise UserError(f"weights-kind component {component.name!r} declares no max_tokens and the run has no LM",
                        "give it a max_tokens attribute, or set optimizer.weights.max_completion_length")
    return int(deployed)


def _completion_text(completion: Any) -> str:
    """trl hands conversational completions as [{"role": "assistant", "content": ...}]."""
    if isinstance(completion, list):
        return "".join(m.get("content", "") for m in completion if isinstance(m, dict))
    return str(completion)


def train_adapter(
    component: Component,
    parent_adapter: str | None,
    search_inputs: Sequence[dict],
    lrf: LocalReward,
    base_model_path: str,
    out_dir: Path,
    cfg: WeightsSettings,
    seed: int,
    max_completion_length: int,
) -> dict:
    """A few GRPO steps on the search inputs' prompts, generating up to `max_completion_length` tokens;
    saves the adapter in `out_dir`. Returns a log."""
    import torch
    from datasets import Dataset
    from peft import LoraConfig, PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback
    from trl import GRPOConfig

    from optimas_cli.lm.local.decode import with_growing_cache
    from optimas_cli.lm.local.onednn import use_onednn_linears
    from optimas_cli.optim.shared_prompt import SharedPromptGRPOTrainer

    num_generations = cfg.num_generations
    batch = cfg.prompts_per_step * num_generations
    on_gpu = torch.cuda.is_available()
    bf16 = cfg.bf16 if cfg.bf16 is not None else on_gpu and torch.cuda.is_bf16_supported()

    tokenizer = AutoTokenizer.from_pretrained(base_model_path, padding_side="left")
    model = AutoModelForCausalLM.from_pretrained(base_model_path, dtype=torch.float32)
    use_onednn_linears(model)  # sampling the completions; the loss's products need gradients and keep F.linear
    peft_config = None
    if parent_adapter:
        model = PeftModel.from_pretrained(model, parent_adapter, is_trainable=True)
    else:
        peft_config = LoraConfig(
            r=cfg.lora_r,
            lora_alpha=cfg.lora_alpha,
            lora_dropout=cfg.lora_dropout,
            target_modules="all-linear",
            task_type="CAUSAL_LM",
        )

    rows = [{"prompt": component.build_messages(x, parent_adapter), "search_index": i} for i, x in enumerate(search_inputs)]

    def local_reward(prompts, completions, search_index, **_):
        inputs = [search_inputs[i] for i in search_index]
        outputs = [component.parse_output(_completion_text(c)) for c in completions]
        return [float(s) for s in lrf.score(component.name, inputs, outputs)]

    scratch = out_dir / "trainer"
    args = GRPOConfig(
        output_dir=str(scratch),
        max_steps=cfg.steps,
        per_device_train_batch_size=batch,
        gradient_accumulation_steps=1,
        num_generations=num_generations,
        max_completion_length=max_completion_length,
        learning_rate=cfg.learning_rate,
        beta=cfg.beta,
        temperature=cfg.temperature,
        use_vllm=False,
        bf16=bf16,
        use_cpu=not on_gpu,
        # Recompute each layer's activations in the backward pass instead of holding them: one GRPO step on
        # Amazon's profiler prompts (8 completions of ~1,000 tokens) held 17 GB without it, 8.7 GB with it,
        # and trained the same adapter (scripts/mem_probe.py grpo).
        activation_checkpointing=True,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=seed,
        data_seed=seed,
    )
    trainer = SharedPromptGRPOTrainer(
        model=model,
        reward_funcs=local_reward,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        peft_config=peft_config,
    )
    # With tqdm off, transformers prints every step's log dict to stdout over our progress bars; the
    # same numbers stay in trainer.state.log_history, which is what we keep.
    trainer.remove_callback(PrinterCallback)
    trainer.model.generate = with_growing_cache(trainer.model.generate, trainer.model)
    started = time.perf_counter()
    with small_logprob_tiles(), large_allocations_unmapped_on_free():
        trainer.train()
    seconds = time.perf_counter() - started
    # Only the trained adapter: with beta > 0 trl adds a frozen "ref" copy beside it.
    trainer.model.save_pretrained(str(out_dir), selected_adapters=["default"])
    steps = [e for e in trainer.state.log_history if "reward" in e]
    del trainer, model
    gc.collect()
    shutil.rmtree(scratch, ignore_errors=True)
    # Each step samples `batch` completions (trl: steps_per_generation 1, num_iterations 1): component runs.
    return {"train_rewards": [e["reward"] for e in steps], "train_seconds": round(seconds, 3), "steps": args.max_steps,
            "generations": args.max_steps * batch, "seed": seed, "max_completion_length": max_completion_length,
            # per step: the longest completion (tokens) and the share that hit the budget before ending
            "completion_max_tokens": [e.get("completions/max_length") for e in steps],
            "completion_cut_share": [e.get("completions/clipped_ratio") for e in steps]}


# Tokens per tile of trl's chunked log-prob kernel. trl's 4,096 tokens x 32,768 vocabulary columns make
# tiles of 512 MB in float32, and its CPU path keeps several such temporaries alive at once: 4 GB on top
# of the backward of one Amazon step. Each token's log-prob is computed on its own row of a tile: tiles
# of a multiple of 64 rows gave bitwise the same log-probs, entropies and gradients (tests/test_grpo_memory.py;
# tiles of a few rows take another matrix-multiply path and differ in the last bits).
LOGPROB_TILE_TOKENS = 512


@contextlib.contextmanager
def small_logprob_tiles(tokens: int = LOGPROB_TILE_TOKENS):
    """trl's chunked log-prob kernel on tiles of at most `tokens` rows while the block runs (trl reads
    the module constant at each call; a trl without it is left alone)."""
    try:
        from trl.kernels import chunked_logprob
    except ImportError:
        yield
        return
    before = getattr(chunked_logprob, "TOKEN_CHUNK_SIZE", None)
    if before is None:
        yield
        return
    chunked_logprob.TOKEN_CHUNK_SIZE = min(before, tokens)
    try:
        yield
    finally:
        chunked_logprob.TOKEN_CHUNK_SIZE = before


def split_held_out(inputs: Sequence[dict], fraction: float) -> tuple[list[dict], list[dict]]:
    """(inputs GRPO trains on, the last `fraction` of them held out to score r_k before and after);
    nothing is held out when that would leave no input to train on."""
    n_held = int(len(inputs) * fraction)
    if n_held < 1 or n_held >= len(inputs):
        return list(inputs), []
    return list(inputs[:-n_held]), list(inputs[-n_held:])


def held_out_gain(before: Sequence[float], after: Sequence[float]) -> dict:
    """Mean r_k of the current and the trained adapter on the held-out inputs, and the paired gain's 95% CI."""
    from optimas_cli.stats import paired_ci

    gain = paired_ci(before, after)
    return {"n": len(before), "r_k_before": float(np.mean(before)), "r_k_after": float(np.mean(after)),
            "gain": gain.estimate, "ci_low": gain.low, "ci_high": gain.high}


def propose(
    component: Component,
    current_value: str | None,
    search_inputs: Sequence[dict],
    lrf: LocalReward,
    ctx: RunContext,
    cfg: WeightsSettings | Mapping | None = None,
    *,
    rng: np.random.Generator | None = None,
    base_model_path: str | None = None,
) -> Proposal:
    cfg = typed(WeightsSettings, cfg, "optimizer.weights")
    base = _require_contract(component, base_model_path)
    if not search_inputs:
        raise ValueError(f"component {component.name!r}: local optimization needs at least one search input")
    work_dir = cfg.work_dir
    if work_dir is None:
        raise UserError(
            f"the weights optimizer of {component.name!r} has no work_dir to save adapters in",
            "set `work_dir` in the weights optimizer's settings (the loop sets it to the run folder)",
        )
    Path(work_dir).mkdir(parents=True, exist_ok=True)
    # A fresh folder per proposal: a rejected adapter must never overwrite the accepted one.
    out_dir = Path(tempfile.mkdtemp(prefix=f"{component.name}-", dir=work_dir))
    seed = int(make_rng(rng, cfg, ctx).integers(1 << 31))
    budget = completion_budget(component, ctx, cfg)
    trained_on, held_out = split_held_out(search_inputs, cfg.held_out_fraction)
    with ctx.ledger.computing("grpo_training"):
        details = train_adapter(component, current_value, trained_on, lrf, base, out_dir, cfg, seed, budget)
    details["seconds_per_step"] = round(details["train_seconds"] / max(1, details["steps"]), 3)
    ctx.ledger.record(component.name, details["generations"], ctx.phase, charged=False)
    details.update({"algorithm": "GRPO", "base_model": base, "parent_adapter": current_value, "adapter": str(out_dir)})
    (out_dir / "optimas_adapter.json").write_text(json.dumps(details, indent=2))

    local_score = baseline_score = None
    if cfg.score_on_search:
        baseline_score, _, before = score_value(component, current_value, search_inputs, lrf, ctx)
        local_score, _, after = score_value(component, str(out_dir), search_inputs, lrf, ctx)
        if held_out:  # r_k on inputs GRPO never saw: whether the adapter learned, not memorized
            n = len(trained_on)
            details["held_out"] = held_out_gain(before[n:], after[n:])
    return Proposal(value=str(out_dir), local_score=local_score, baseline_score=baseline_score, details=details)
