"""`optimas device-check`'s training checks on the tiny models (tiny_models.py) and tasks (tiny_tasks.py):
  lrf.*       LocalRewardModel + train_stage1 on the tiny BERT with learnable keyword pairs: dtype/device
              resolution, loss falls, train-pair accuracy rises, scores finite; that default-lr steps move the
              backbone's weights; the saved model reloaded on the CPU in float32 (reported).
  grpo.*      optimas_cli.optim.weights.propose (trl GRPOTrainer, bf16 None -> bf16 on a GPU) for a few steps,
              then continuing that adapter, then serving it through the local provider; seconds per step.
  policies.*  SysDPO's and REINFORCE's NodePolicies (one LoRA per trainable node on one peft model): weights on
              the device, log-probs close to the float32 CPU model's and returned on the CPU, and one
              reinforce_step that moves every node's LoRA."""
from __future__ import annotations

import math
import time

from optimas_cli.flows.device_check_lm import local_lm
from optimas_cli.flows.device_check_session import (
    QUESTIONS,
    Session,
    Skip,
    chat,
    cuda_sync,
    expected_device,
    need,
)
from optimas_cli.flows.tiny_models import build_tiny_bert
from optimas_cli.flows.tiny_tasks import SEARCH, LetterReward, Reviewer, keyword_pairs


def check_lrf(session: Session) -> None:

    need("transformers")
    from optimas_cli.devices import pick_device, pick_dtype
    from optimas_cli.lrf.metrics import pairwise_accuracy
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.lrf.train import TrainConfig, train_stage1

    bert = build_tiny_bert(session.work / "tiny-bert")
    device, dtype = expected_device()
    components = {"gen": "writes the answer"}
    model = LocalRewardModel(bert, components, device="auto", dtype="auto", max_length=48)
    weight_dtypes = sorted({str(p.dtype) for p in model.backbone.parameters()})
    picked = pick_dtype("auto", pick_device("auto"))
    ok = (model.device_name == device and picked == dtype and getattr(model, "compute_dtype", picked) == dtype
          and next(model.backbone.parameters()).device.type == device)
    session.report("lrf.load", "PASS" if ok else "FAIL",
           f"auto resolved to device {model.device_name}, compute dtype {picked}, backbone weights "
           f"{weight_dtypes} on {next(model.backbone.parameters()).device}, autocast "
           f"{getattr(model, 'autocast', 'n/a')} (expected {device} + {dtype})",
           device=model.device_name, compute_dtype=str(picked), weight_dtypes=weight_dtypes)

    state: dict = {}
    with session.step("lrf.train"):
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
        session.report("lrf.train", "PASS" if ok else "FAIL",
               f"{result['steps']} steps in {seconds:.2f} s; train loss {losses[0]:.3f} -> {losses[-1]:.3f}; "
               f"train-pair accuracy {acc_before:.2f} -> {acc_after:.2f}; dev accuracy {dev_acc:.2f}; {len(scores)} "
               f"scores finite: {finite}", steps=result["steps"], seconds=round(seconds, 3),
               losses=[round(x, 4) for x in losses], train_accuracy_before=acc_before,
               train_accuracy_after=acc_after, dev_accuracy=dev_acc)

    with session.step("lrf.small_steps"):  # the default learning rate: do its AdamW steps move the backbone, or round away?
        fresh = LocalRewardModel(bert, components, device="auto", dtype="auto", max_length=48)
        start = {n: p.detach().clone() for n, p in fresh.backbone.named_parameters()}
        small = train_stage1(fresh, keyword_pairs(32, seed=3), TrainConfig(lr=5e-5, batch_size=8, epochs=1,
                                                                           patience=1, seed=0))
        moved = sum(int((p.detach() != start[n]).sum()) for n, p in fresh.backbone.named_parameters())
        share = moved / sum(p.numel() for p in fresh.backbone.parameters())
        session.report("lrf.small_steps", "PASS" if share > 0.9 else "FAIL",
               f"{small['steps']} AdamW steps at lr 5e-5 moved {share:.1%} of the backbone's weights (float32 CPU: "
               "~96%; bfloat16 weights: ~40%)", moved_share=round(share, 4))

    with session.step("lrf.vs_float32_cpu"):  # the trained model saved, reloaded on the CPU in float32, same texts
        if not state:
            raise Skip("no trained model to compare (lrf.train failed)")
        texts, scores = state["texts"], state["scores"]
        reloaded = LocalRewardModel.load(model.save(session.work / "lrf"), device="cpu")
        cpu_scores = reloaded.score_texts("gen", texts)
        n = len(texts) // 2
        diff = max(abs(a - b) for a, b in zip(scores, cpu_scores, strict=True))
        order = sum((scores[i] > scores[n + i]) == (cpu_scores[i] > cpu_scores[n + i]) for i in range(n))
        reloaded_dtypes = sorted({str(p.dtype) for p in reloaded.backbone.parameters()})
        session.report("lrf.vs_float32_cpu", "INFO",
               f"reloaded on cpu ({reloaded_dtypes}): max |score difference| {diff:.4f} (score range "
               f"{min(scores):.2f}..{max(scores):.2f}); same pair ranking on {order}/{n} train pairs",
               max_abs_diff=diff, same_ranking=order, of=n)


def check_grpo(session: Session) -> None:
    need("transformers", "peft", "trl", "datasets")
    import torch
    import trl
    from safetensors.torch import load_file

    from optimas_cli.optim import weights
    from optimas_cli.system import RunContext, RunLedger

    folder = session.chat_model()
    component, reward = Reviewer(str(folder)), LetterReward()
    ctx = RunContext(ledger=RunLedger(1), phase="local_optimization", seed=3)
    settings = {"work_dir": str(session.work / "adapters"), "steps": 3, "prompts_per_step": 2, "num_generations": 4,
                "max_completion_length": 16, "learning_rate": 1e-2, "score_on_search": False}
    seen: dict = {}
    done: dict = {}
    original_init = trl.GRPOTrainer.__init__

    def spy(self, *args, **kwargs):  # records what the trainer resolved; changes nothing
        original_init(self, *args, **kwargs)
        parameter = next(self.model.parameters())
        seen.update(bf16=bool(self.args.bf16), args_device=str(self.args.device), model_device=str(parameter.device))

    with session.step("grpo.train"):
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
        session.report("grpo.train", "PASS" if ok else "FAIL",
               f"{d['steps']} steps in {d['train_seconds']:.2f} s ({d['seconds_per_step']:.2f} s/step, first step "
               f"included), continuing the adapter {d2['steps']} steps in {d2['train_seconds']:.2f} s "
               f"({d2['seconds_per_step']:.2f} s/step); trainer bf16={first_seen.get('bf16')} device="
               f"{first_seen.get('model_device')} (expected bf16={want_bf16} on {device}); LoRA B moved: {moved_b}; "
               f"continuing changed it: {continued}; peak GPU memory {peak:.0f} MiB; rewards "
               f"{[round(r, 3) for r in d['train_rewards']]}",
               seconds_per_step=d["seconds_per_step"], train_seconds=d["train_seconds"],
               continued_seconds_per_step=d2["seconds_per_step"], trainer=first_seen, peak_gpu_mib=round(peak, 1),
               rewards=d["train_rewards"])

    with session.step("grpo.serve"):  # the GRPO adapter served by the local provider on the base model in its dtype
        if not done:
            raise Skip("no adapter to serve (grpo.train failed)")
        lm = local_lm(folder, session.work)
        texts = [t[0] for t in lm.complete([x["review"] for x in SEARCH], adapter=done["adapter"])]
        session.report("grpo.serve", "PASS" if len(texts) == len(SEARCH) else "FAIL",
               f"the continued adapter generated {len(texts)} completions through {lm.route}", texts=texts)


def check_policies(session: Session) -> None:
    need("transformers", "peft")
    import torch

    from optimas_cli.optim.node_policies import NodePolicies, Segment
    from optimas_cli.optim.reinforce import reinforce_step

    folder = session.chat_model()
    nodes = {"reader": None, "answerer": None}
    policies = NodePolicies(str(folder), nodes, {"r": 4, "alpha": 8})
    segments = [Segment(policies.render(chat(q)), f"answer {i}", ended=i % 2 == 0) for i, q in enumerate(QUESTIONS)]
    trajectories = [{"reader": a, "answerer": b} for a, b in zip(segments[::2], segments[1::2], strict=True)]
    device, _ = expected_device()

    with session.step("policies.score"):  # log-probs on the device, returned on the CPU, as the CPU model's
        weights_at = sorted({str(p.device.type) for p in policies.model.parameters()})
        reference = policies.reference_logprobs(segments)
        cpu = NodePolicies(str(folder), nodes, {"r": 4, "alpha": 8}, device="cpu").reference_logprobs(segments)
        diff = float((reference - cpu).abs().max())
        ok = weights_at == [device] and reference.device.type == "cpu" and bool(torch.isfinite(reference).all())
        ok = ok and diff < 0.05 * float(cpu.abs().max()) + 0.5  # bfloat16 autocast on a GPU: close, not equal
        session.report("policies.score", "PASS" if ok else "FAIL",
               f"weights on {weights_at} (expected {device}), autocast {policies.autocast}; {len(segments)} "
               f"reference log-probs returned on {reference.device.type}; max |difference| to the float32 CPU "
               f"model {diff:.4f} (log-probs {float(cpu.min()):.1f}..{float(cpu.max()):.1f})",
               max_abs_diff=diff, weights_on=weights_at, autocast=policies.autocast)

    with session.step("policies.reinforce"):  # one REINFORCE step moves every node's LoRA B on the device
        before = {n: p.detach().clone() for n, p in policies.model.named_parameters() if "lora_B" in n}
        optimizer = torch.optim.AdamW(policies.parameters, lr=1e-2)
        started = time.perf_counter()
        reinforce_step(policies, optimizer, trajectories, [1.0, 0.0, 0.5])
        cuda_sync()
        seconds = time.perf_counter() - started
        moved = {n.split(".")[-2] for n, p in policies.model.named_parameters()
                 if "lora_B" in n and not torch.equal(p.detach(), before[n])}
        ok = moved == set(nodes)
        session.report("policies.reinforce", "PASS" if ok else "FAIL",
               f"one step over {len(trajectories)} trajectories in {seconds:.2f} s; LoRA B moved for {sorted(moved)} "
               f"(expected {sorted(nodes)})", seconds=seconds, moved=sorted(moved))
