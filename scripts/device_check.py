"""Device check: the local LM provider, the LRF and GRPO on CUDA in bfloat16, with the tests' tiny models.

One short run of the project's own code paths on random 2-layer models built in seconds (no download):

  lm.*    the embedded provider: litellm -> LMClient -> LocalProvider -> LocalModel (or LocalModel alone
          when litellm is not installed) on tests/tiny_model.py's chat model. Device and dtype 'auto'
          must resolve to cuda + bfloat16 on a GPU (cpu + float32 without one); batched greedy
          generation; seeded sampling that is the same whatever the batch; whether greedy outputs are
          batch-invariant (reported, never failed: bfloat16 with padding may legitimately differ); a
          LoRA adapter request; diverse beam search; agreement with the float32 CPU model (reported).
  lrf.*   LocalRewardModel + train_stage1 on tests/test_lrf_tiny_backbone.py's BERT, with learnable
          keyword pairs (tests/test_lrf_train.py): dtype/device resolution, loss falls, train-pair
          accuracy rises, scores finite; that default-lr steps move the backbone's weights; and the
          agreement of the saved model reloaded on the CPU in float32 (reported).
  grpo.*  optimas_cli.optim.weights.propose (trl GRPOTrainer, bf16 None -> bf16 on a GPU) for a few steps,
          then continuing that adapter, then serving it through the local provider; seconds per step.
  policies.*  SysDPO's and REINFORCE's NodePolicies (one LoRA per trainable node on one peft model): weights on
          the device, log-probs close to the float32 CPU model's and returned on the CPU, and one
          reinforce_step that moves every node's LoRA.

Each check prints one line, PASS / FAIL / WARN / INFO / SKIP, with its numbers; the exit status is 1 when
any check FAILs. Without CUDA every check runs on the CPU (the first line says so). A check whose library
is not installed (litellm, peft, trl, datasets) is SKIPped with the reason.

    python scripts/device_check.py [--out summary.json] [--only lm,lrf,grpo,policies]
"""
from __future__ import annotations

import argparse
import contextlib
import importlib.metadata
import importlib.util
import json
import math
import os
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for _path in (str(ROOT / "tests"), str(ROOT)):  # the project's sources and the tests' model builders
    if _path not in sys.path:
        sys.path.insert(0, _path)
for _key, _value in {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
                     "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TOKENIZERS_PARALLELISM": "false",
                     "HF_HUB_DISABLE_PROGRESS_BARS": "1"}.items():
    os.environ.setdefault(_key, _value)
WORK = Path(tempfile.mkdtemp(prefix="optimas-device-check-"))
os.environ.setdefault("OPTIMAS_CACHE_DIR", str(WORK / "cache"))  # never the user's ~/.cache/optimas

from optimas_cli.environment import prepare_process  # noqa: E402

prepare_process()

import torch  # noqa: E402

QUESTIONS = ["What is the capital of France?", "Name a colour.", "Why?",
             "Answer briefly: how many legs does a dog have, and why do cats purr so much?",
             "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.", "Yes or no?"]
MAX_TOKENS = 12
RESULTS: list[dict] = []


class Skip(Exception):
    pass


def need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"not installed: {', '.join(missing)}")


def report(name: str, status: str, line: str, **numbers) -> dict:
    entry = {"name": name, "status": status, "summary": line, **numbers}
    RESULTS.append(entry)
    print(f"{status:<4} {name}: {line}", flush=True)
    return entry


@contextlib.contextmanager
def step(name: str):
    """A part of a check that reports its own line; an exception in it is one FAIL (or SKIP) line for it,
    and the parts after it still run."""
    try:
        yield
    except Skip as why:
        report(name, "SKIP", str(why))
    except Exception as error:  # a crash of the checked code is the finding
        traceback.print_exc()
        report(name, "FAIL", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:400])


def run_check(name: str, fn) -> None:
    started = time.perf_counter()
    with step(name):
        fn()
    print(f"     ({name}: {time.perf_counter() - started:.1f} s)", flush=True)


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def expected_device() -> tuple[str, torch.dtype]:
    return ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)


def cuda_sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


_TINY: dict[str, Path] = {}


def tiny_chat_model() -> Path:
    if "model" not in _TINY:
        from tiny_model import build_tiny_chat_model

        _TINY["model"] = build_tiny_chat_model(WORK / "tiny-llama")
    return _TINY["model"]


def tiny_adapter() -> Path:
    if "adapter" not in _TINY:
        from tiny_model import build_tiny_lora_adapter

        _TINY["adapter"] = build_tiny_lora_adapter(tiny_chat_model(), WORK / "tiny-adapter")
    return _TINY["adapter"]


# ---- the local LM provider -----------------------------------------------------------------------
class ViaClient:
    """Requests through LMClient -> litellm.completion -> the local provider's dynamic batcher."""

    route = "litellm -> LMClient -> LocalProvider"

    def __init__(self, folder: Path):
        from optimas_cli.lm.client import LMClient
        from optimas_cli.lm.local.provider import LOCAL_PROVIDER
        from optimas_cli.lm.local.registry import model_name, register_local_model

        self.name = register_local_model("device-check-tiny", folder)
        self.client = LMClient(model=self.name, temperature=0.0, max_tokens=MAX_TOKENS, cache=False,
                               cache_dir=str(WORK / "cache"))
        self.local_model = LOCAL_PROVIDER.model(model_name(self.name))
        self.batcher = LOCAL_PROVIDER.batcher(model_name(self.name))

    def complete(self, questions, temperature=0.0, seed=None, sample_index=0, adapter=None, n=1,
                 diversity_penalty=None) -> list[list[str]]:
        from optimas_cli.lm.types import LMRequest

        requests = [LMRequest(chat(q), temperature=temperature, seed=seed, sample_index=sample_index,
                              adapter=adapter, n=n, diversity_penalty=diversity_penalty) for q in questions]
        return [r.texts for r in self.client.complete(requests, component="device_check")]

    def batch_sizes(self) -> list[int]:
        return list(self.batcher.batch_sizes)


class ViaModel:
    """Without litellm: the provider's model class itself (what its batch worker calls)."""

    route = "LocalModel (litellm not installed)"

    def __init__(self, folder: Path):
        from optimas_cli.lm.local.model import LocalModel

        self.local_model = LocalModel("device-check-tiny", folder)
        self.sizes: list[int] = []

    def complete(self, questions, temperature=0.0, seed=None, sample_index=0, adapter=None, n=1,
                 diversity_penalty=None) -> list[list[str]]:
        from optimas_cli.lm.local.model import Decoding
        from optimas_cli.lm.sampling import sample_seed

        m = self.local_model
        prompts = [m.render(chat(q)) for q in questions]
        if diversity_penalty is not None:
            decoding = Decoding(0.0, MAX_TOKENS, beam_groups=n, diversity_penalty=diversity_penalty)
            self.sizes.append(len(prompts))
            return [[g.text for g in row] for row in m.diverse_generate(prompts, decoding, adapter)]
        rows = [(p, sample_seed(seed, chat(q), sample_index, k)) for p, q in zip(prompts, questions, strict=True)
                for k in range(n)]
        self.sizes.append(len(rows))
        out = m.generate([p for p, _ in rows], Decoding(temperature, MAX_TOKENS), [s for _, s in rows], adapter)
        return [[g.text for g in out[i * n:(i + 1) * n]] for i in range(len(questions))]

    def batch_sizes(self) -> list[int]:
        return list(self.sizes)


def check_lm() -> None:
    need("transformers")
    folder = tiny_chat_model()
    lm = ViaClient(folder) if importlib.util.find_spec("litellm") else ViaModel(folder)
    m = lm.local_model
    device, dtype = expected_device()
    weights = next(m.model.parameters())
    ok = str(m.device) == device and weights.device.type == device and weights.dtype == dtype
    report("lm.load", "PASS" if ok else "FAIL",
           f"route {lm.route}; auto resolved to device {m.device}, weights on {weights.device} in {weights.dtype} "
           f"(expected {device} + {dtype})", device=str(weights.device), dtype=str(weights.dtype), route=lm.route)
    state = {"invariant": None, "alone": None}

    with step("lm.greedy_batch"):  # batched greedy generation, twice (must be deterministic), each question alone
        before = len(lm.batch_sizes())
        cuda_sync()
        started = time.perf_counter()
        batch = [texts[0] for texts in lm.complete(QUESTIONS)]
        cuda_sync()
        seconds = time.perf_counter() - started
        sizes = lm.batch_sizes()[before:]
        again = [texts[0] for texts in lm.complete(QUESTIONS)]
        alone = [lm.complete([q])[0][0] for q in QUESTIONS]
        empty = sum(1 for t in batch if not t)
        ok = sizes == [len(QUESTIONS)] and again == batch and empty < len(batch)
        report("lm.greedy_batch", "PASS" if ok else "FAIL",
               f"{len(QUESTIONS)} prompts ran as batches {sizes} in {seconds:.2f} s; repeat identical: "
               f"{again == batch}; empty texts: {empty}", batch_sizes=sizes, seconds=round(seconds, 3), texts=batch)
        same = sum(a == b for a, b in zip(alone, batch, strict=True))
        state.update(invariant=same == len(QUESTIONS), alone=alone)
        report("lm.greedy_batch_invariance", "PASS" if state["invariant"] else "WARN",
               f"{same}/{len(QUESTIONS)} greedy texts equal alone and in the padded batch"
               + ("" if state["invariant"] else f" ({dtype} with left padding: reported, not failed)"),
               equal=same, of=len(QUESTIONS), alone=alone)

    with step("lm.sampling"):  # a sample depends on (seed, sample_index, messages), not on its batch
        hot = dict(temperature=1.0, seed=7, sample_index=3)
        solo = lm.complete(["hi"], **hot)[0][0]
        solo_again = lm.complete(["hi"], **hot)[0][0]
        in_batch = lm.complete(["hi", *QUESTIONS], **hot)[0][0]
        indices = {lm.complete(["hi"], temperature=1.0, seed=7, sample_index=i)[0][0] for i in range(4)}
        n3 = lm.complete(["tell me"], temperature=0.8, seed=1, n=3)[0]
        repeat_ok, batch_ok = solo == solo_again, solo == in_batch
        distinct_ok = len(indices) > 1 and len(set(n3)) > 1
        if repeat_ok and batch_ok and distinct_ok:
            status = "PASS"
        elif repeat_ok and distinct_ok and state["invariant"] is False:
            status = "WARN"  # the greedy path already varies with the batch in this dtype: the same cause
        else:
            status = "FAIL"
        report("lm.sampling", status,
               f"same request twice identical: {repeat_ok}; alone == in a batch of {1 + len(QUESTIONS)}: {batch_ok}; "
               f"{len(indices)}/4 distinct over sample_index, {len(set(n3))}/3 distinct for n=3",
               repeat=repeat_ok, batch_invariant=batch_ok, distinct_over_indices=len(indices))

    with step("lm.lora"):  # an adapter request changes the outputs, only for its requests; loaded once
        need("peft")
        adapter = str(tiny_adapter())
        base = [t[0] for t in lm.complete(QUESTIONS)]
        adapted = [t[0] for t in lm.complete(QUESTIONS, adapter=adapter)]
        restored = [t[0] for t in lm.complete(QUESTIONS)]
        adapted_again = [t[0] for t in lm.complete(QUESTIONS, adapter=adapter)]
        lora = [p for n, p in m._peft.named_parameters() if "lora_" in n]
        lora_devices, lora_dtypes = sorted({p.device.type for p in lora}), sorted({str(p.dtype) for p in lora})
        changed = sum(a != b for a, b in zip(adapted, base, strict=True))
        ok = changed > 0 and restored == base and adapted_again == adapted and lora_devices == [device]
        report("lm.lora", "PASS" if ok else "FAIL",
               f"adapter changed {changed}/{len(QUESTIONS)} texts; base restored: {restored == base}; adapter "
               f"repeat identical: {adapted_again == adapted}; LoRA weights on {lora_devices} in {lora_dtypes}",
               changed=changed, lora_dtypes=lora_dtypes)

    with step("lm.diverse_beam"):  # the SysDPO / sampling=dbs path: n candidates per prompt from one search
        rows = lm.complete(QUESTIONS[:2], n=3, diversity_penalty=1.0)
        ok = [len(r) for r in rows] == [3, 3]
        report("lm.diverse_beam", "PASS" if ok else "FAIL",
               f"candidates per prompt {[len(r) for r in rows]}, distinct {[len(set(r)) for r in rows]}")

    with step("lm.vs_float32_cpu"):  # the same greedy requests on the float32 CPU model: reported only
        if (device, dtype) == ("cpu", torch.float32):
            report("lm.vs_float32_cpu", "INFO", "already the float32 CPU model")
            return
        if state["alone"] is None:
            raise Skip("no greedy outputs to compare (lm.greedy_batch failed)")
        from optimas_cli.lm.local.model import Decoding, LocalModel

        reference = LocalModel("device-check-cpu", folder, dtype="float32", device="cpu")
        cpu = [reference.generate([reference.render(chat(q))], Decoding(0.0, MAX_TOKENS), [0])[0].text
               for q in QUESTIONS]
        same = sum(a == b for a, b in zip(cpu, state["alone"], strict=True))
        report("lm.vs_float32_cpu", "INFO", f"{same}/{len(QUESTIONS)} greedy texts ({dtype} on {device}, alone) "
               "equal to the float32 CPU model's", equal=same, of=len(QUESTIONS), cpu=cpu)


# ---- the local reward model ------------------------------------------------------------------------
def check_lrf() -> None:
    need("transformers")
    from test_lrf_tiny_backbone import build_tiny_bert
    from test_lrf_train import keyword_pairs

    from optimas_cli.devices import pick_device, pick_dtype
    from optimas_cli.lrf.metrics import pairwise_accuracy
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.lrf.train import TrainConfig, train_stage1

    bert = build_tiny_bert(WORK / "tiny-bert")
    device, dtype = expected_device()
    components = {"gen": "writes the answer"}
    model = LocalRewardModel(bert, components, device="auto", dtype="auto", max_length=48)
    weight_dtypes = sorted({str(p.dtype) for p in model.backbone.parameters()})
    picked = pick_dtype("auto", pick_device("auto"))
    ok = (model.device_name == device and picked == dtype and getattr(model, "compute_dtype", picked) == dtype
          and next(model.backbone.parameters()).device.type == device)
    report("lrf.load", "PASS" if ok else "FAIL",
           f"auto resolved to device {model.device_name}, compute dtype {picked}, backbone weights "
           f"{weight_dtypes} on {next(model.backbone.parameters()).device}, autocast "
           f"{getattr(model, 'autocast', 'n/a')} (expected {device} + {dtype})",
           device=model.device_name, compute_dtype=str(picked), weight_dtypes=weight_dtypes)

    state: dict = {}
    with step("lrf.train"):
        train, held = keyword_pairs(64, seed=0), keyword_pairs(24, seed=1)
        acc_before = pairwise_accuracy(model, train)["mean"]
        cuda_sync()
        started = time.perf_counter()
        result = train_stage1(model, train, TrainConfig(lr=3e-3, head_lr=3e-2, batch_size=8, epochs=6, patience=6,
                                                        seed=0), dev=held)
        cuda_sync()
        seconds = time.perf_counter() - started
        losses = [h["train_loss"] for h in result["history"] if "train_loss" in h]
        acc_after = pairwise_accuracy(model, train)["mean"]
        dev_acc = result["dev"]["mean"]
        texts = model.texts("gen", [p.context for p in train], [p.chosen for p in train])
        texts += model.texts("gen", [p.context for p in train], [p.rejected for p in train])
        scores = model.score_texts("gen", texts)
        finite = all(math.isfinite(s) for s in scores)
        state.update(texts=texts, scores=scores)
        ok = losses[-1] < 0.7 * losses[0] and acc_after >= 0.9 and acc_after > acc_before and finite
        report("lrf.train", "PASS" if ok else "FAIL",
               f"{result['steps']} steps in {seconds:.2f} s; train loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
               f"train-pair accuracy {acc_before:.2f} -> {acc_after:.2f}; dev accuracy {dev_acc:.2f}; {len(scores)} "
               f"scores finite: {finite}", steps=result["steps"], seconds=round(seconds, 3),
               losses=[round(x, 4) for x in losses], train_accuracy_before=acc_before,
               train_accuracy_after=acc_after, dev_accuracy=dev_acc)

    with step("lrf.small_steps"):  # the default learning rate: do its AdamW steps move the backbone, or round away?
        fresh = LocalRewardModel(bert, components, device="auto", dtype="auto", max_length=48)
        start = {n: p.detach().clone() for n, p in fresh.backbone.named_parameters()}
        small = train_stage1(fresh, keyword_pairs(32, seed=3), TrainConfig(lr=5e-5, batch_size=8, epochs=1,
                                                                           patience=1, seed=0))
        moved = sum(int((p.detach() != start[n]).sum()) for n, p in fresh.backbone.named_parameters())
        share = moved / sum(p.numel() for p in fresh.backbone.parameters())
        report("lrf.small_steps", "PASS" if share > 0.9 else "FAIL",
               f"{small['steps']} AdamW steps at lr 5e-5 moved {share:.1%} of the backbone's weights (float32 CPU: "
               "~96%; bfloat16 weights: ~40%)", moved_share=round(share, 4))

    with step("lrf.vs_float32_cpu"):  # the trained model saved, reloaded on the CPU in float32, same texts
        if not state:
            raise Skip("no trained model to compare (lrf.train failed)")
        texts, scores = state["texts"], state["scores"]
        reloaded = LocalRewardModel.load(model.save(WORK / "lrf"), device="cpu")
        cpu_scores = reloaded.score_texts("gen", texts)
        n = len(texts) // 2
        diff = max(abs(a - b) for a, b in zip(scores, cpu_scores, strict=True))
        order = sum((scores[i] > scores[n + i]) == (cpu_scores[i] > cpu_scores[n + i]) for i in range(n))
        reloaded_dtypes = sorted({str(p.dtype) for p in reloaded.backbone.parameters()})
        report("lrf.vs_float32_cpu", "INFO",
               f"reloaded on cpu ({reloaded_dtypes}): max |score difference| {diff:.4f} (score range "
               f"{min(scores):.2f}..{max(scores):.2f}); same pair ranking on {order}/{n} train pairs",
               max_abs_diff=diff, same_ranking=order, of=n)


# ---- GRPO on a LoRA adapter -----------------------------------------------------------------------
def check_grpo() -> None:
    need("transformers", "peft", "trl", "datasets")
    import trl
    from safetensors.torch import load_file
    from test_optim_weights import SEARCH, LetterReward, Reviewer

    from optimas_cli.optim import weights
    from optimas_cli.system import RunContext, RunLedger

    folder = tiny_chat_model()
    component, reward = Reviewer(str(folder)), LetterReward()
    ctx = RunContext(ledger=RunLedger(1), phase="local_optimization", seed=3)
    settings = {"work_dir": str(WORK / "adapters"), "steps": 3, "prompts_per_step": 2, "num_generations": 4,
                "max_completion_length": 16, "learning_rate": 1e-2, "score_on_search": False}
    seen: dict = {}
    done: dict = {}
    original_init = trl.GRPOTrainer.__init__

    def spy(self, *args, **kwargs):  # records what the trainer resolved; changes nothing
        original_init(self, *args, **kwargs)
        parameter = next(self.model.parameters())
        seen.update(bf16=bool(self.args.bf16), args_device=str(self.args.device), model_device=str(parameter.device))

    with step("grpo.train"):
        trl.GRPOTrainer.__init__ = spy
        try:
            if torch.cuda.is_available():
                torch.cuda.reset_peak_memory_stats()
            first = weights.propose(component, None, SEARCH, reward, ctx, settings)
            peak = torch.cuda.max_memory_allocated() / 2**20 if torch.cuda.is_available() else 0.0
            first_seen = dict(seen)
            second = weights.propose(component, first.value, SEARCH, reward, ctx, {**settings, "steps": 2})
        finally:
            trl.GRPOTrainer.__init__ = original_init
        d, d2 = first.details, second.details
        tensors = load_file(f"{first.value}/adapter_model.safetensors")
        after = load_file(f"{second.value}/adapter_model.safetensors")
        moved_b = any(t.abs().sum() > 0 for k, t in tensors.items() if "lora_B" in k)
        continued = after.keys() == tensors.keys() and any(not torch.equal(tensors[k], after[k]) for k in tensors)
        done["adapter"] = second.value
        device, dtype = expected_device()
        want_bf16 = dtype == torch.bfloat16
        ok = (len(d["train_rewards"]) == settings["steps"] and moved_b and continued
              and first_seen.get("bf16") == want_bf16 and first_seen.get("model_device", "").startswith(device))
        report("grpo.train", "PASS" if ok else "FAIL",
               f"{d['steps']} steps in {d['train_seconds']:.2f} s ({d['seconds_per_step']:.2f} s/step, first step "
               f"included), continuing the adapter {d2['steps']} steps in {d2['train_seconds']:.2f} s "
               f"({d2['seconds_per_step']:.2f} s/step); trainer bf16={first_seen.get('bf16')} device="
               f"{first_seen.get('model_device')} (expected bf16={want_bf16} on {device}); LoRA B moved: {moved_b}; "
               f"continuing changed it: {continued}; peak GPU memory {peak:.0f} MiB; rewards "
               f"{[round(r, 3) for r in d['train_rewards']]}",
               seconds_per_step=d["seconds_per_step"], train_seconds=d["train_seconds"],
               continued_seconds_per_step=d2["seconds_per_step"], trainer=first_seen, peak_gpu_mib=round(peak, 1),
               rewards=d["train_rewards"])

    with step("grpo.serve"):  # the GRPO adapter served by the local provider on the base model in its dtype
        if not done:
            raise Skip("no adapter to serve (grpo.train failed)")
        lm = ViaClient(folder) if importlib.util.find_spec("litellm") else ViaModel(folder)
        texts = [t[0] for t in lm.complete([x["review"] for x in SEARCH], adapter=done["adapter"])]
        report("grpo.serve", "PASS" if len(texts) == len(SEARCH) else "FAIL",
               f"the continued adapter generated {len(texts)} completions through {lm.route}", texts=texts)


# ---- SysDPO / REINFORCE: every trainable node's LoRA on one peft model ----------------------------------
def check_policies() -> None:
    need("transformers", "peft")
    from optimas_cli.optim.node_policies import NodePolicies, Segment
    from optimas_cli.optim.reinforce import reinforce_step

    folder = tiny_chat_model()
    nodes = {"reader": None, "answerer": None}
    policies = NodePolicies(str(folder), nodes, {"r": 4, "alpha": 8})
    segments = [Segment(policies.render(chat(q)), f"answer {i}", ended=i % 2 == 0) for i, q in enumerate(QUESTIONS)]
    trajectories = [{"reader": a, "answerer": b} for a, b in zip(segments[::2], segments[1::2], strict=True)]
    device, _ = expected_device()

    with step("policies.score"):  # log-probs on the device, returned on the CPU, as the CPU model's
        weights_at = sorted({str(p.device.type) for p in policies.model.parameters()})
        reference = policies.reference_logprobs(segments)
        cpu = NodePolicies(str(folder), nodes, {"r": 4, "alpha": 8}, device="cpu").reference_logprobs(segments)
        diff = float((reference - cpu).abs().max())
        ok = weights_at == [device] and reference.device.type == "cpu" and bool(torch.isfinite(reference).all())
        ok = ok and diff < 0.05 * float(cpu.abs().max()) + 0.5  # bfloat16 autocast on a GPU: close, not equal
        report("policies.score", "PASS" if ok else "FAIL",
               f"weights on {weights_at} (expected {device}), autocast {policies.autocast}; {len(segments)} "
               f"reference log-probs returned on {reference.device.type}; max |difference| to the float32 CPU "
               f"model {diff:.4f} (log-probs {float(cpu.min()):.1f}..{float(cpu.max()):.1f})",
               max_abs_diff=diff, weights_on=weights_at, autocast=policies.autocast)

    with step("policies.reinforce"):  # one REINFORCE step moves every node's LoRA B on the device
        before = {n: p.detach().clone() for n, p in policies.model.named_parameters() if "lora_B" in n}
        optimizer = torch.optim.AdamW(policies.parameters, lr=1e-2)
        started = time.perf_counter()
        reinforce_step(policies, optimizer, trajectories, [1.0, 0.0, 0.5])
        cuda_sync()
        seconds = time.perf_counter() - started
        moved = {n.split(".")[-2] for n, p in policies.model.named_parameters()
                 if "lora_B" in n and not torch.equal(p.detach(), before[n])}
        ok = moved == set(nodes)
        report("policies.reinforce", "PASS" if ok else "FAIL",
               f"one step over {len(trajectories)} trajectories in {seconds:.2f} s; LoRA B moved for {sorted(moved)} "
               f"(expected {sorted(nodes)})", seconds=seconds, moved=sorted(moved))


CHECKS = {"lm": check_lm, "lrf": check_lrf, "grpo": check_grpo, "policies": check_policies}


def environment() -> dict:
    info = {"python": sys.version.split()[0], "torch": torch.__version__, "cuda": torch.cuda.is_available()}
    for dist in ("transformers", "peft", "trl", "datasets", "litellm", "accelerate", "huggingface_hub", "numpy"):
        try:
            info[dist] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            info[dist] = None
    if info["cuda"]:
        info["gpu"] = torch.cuda.get_device_name(0)
        info["bf16_supported"] = torch.cuda.is_bf16_supported()
    return info


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", help="write the JSON summary here (default: only the lines on stdout)")
    parser.add_argument("--only", default=",".join(CHECKS), help="comma-separated groups: lm, lrf, grpo, policies")
    args = parser.parse_args()
    wanted = [c.strip() for c in args.only.split(",") if c.strip()]
    unknown = sorted(set(wanted) - set(CHECKS))
    if unknown:
        parser.error(f"unknown check group(s) {unknown}; use {sorted(CHECKS)}")
    try:
        from transformers.utils import logging as hf_logging

        hf_logging.set_verbosity_error()
        hf_logging.disable_progress_bar()
    except ImportError:
        pass
    torch.manual_seed(0)
    env = environment()
    where = f"CUDA on {env['gpu']}" if env["cuda"] else "NO CUDA: every check runs on the CPU in float32"
    print(f"device check: {where}; " + ", ".join(f"{k} {v}" for k, v in env.items() if k not in ("cuda", "gpu")),
          flush=True)
    started = time.perf_counter()
    for group in wanted:
        run_check(group, CHECKS[group])
    failed = [r["name"] for r in RESULTS if r["status"] == "FAIL"]
    counts = {s: sum(r["status"] == s for r in RESULTS) for s in ("PASS", "FAIL", "WARN", "INFO", "SKIP")}
    seconds = time.perf_counter() - started
    print(f"device check: {', '.join(f'{v} {k}' for k, v in counts.items() if v)} in {seconds:.1f} s"
          + (f"; failed: {', '.join(failed)}" if failed else ""), flush=True)
    if args.out:
        summary = {"environment": env, "checks": RESULTS, "counts": counts, "failed": failed,
                   "seconds": round(seconds, 1)}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(summary, indent=2, default=str))
    shutil.rmtree(WORK, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
