"""The trainable nodes of a compound system as one base model with one LoRA adapter per node.

SysDPO and REINFORCE train every trainable node's weights jointly from one loss, so all adapters
live on one peft model over the shared base (the weights components' local model): the log-prob
of a node's output switches to that node's adapter, the reference log-prob (SysDPO) disables all
adapters, i.e. the base model. A node's segment is (its rendered prompt, its completion text, whether
the completion ended); its log-prob is the sum over the completion's tokens, plus the end-of-turn token
when generation ended there (not when it was cut at max_tokens: the model never chose to stop), given
the prompt the local provider renders, so training scores exactly what generation sampled.
"""
from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from optimas_cli.devices import pick_device
from optimas_cli.errors import UserError
from optimas_cli.lm.local.model import render_chat
from optimas_cli.system.run_folder import replaced

NO_GRAD_CHUNK = 4  # rows per forward pass when no gradients are kept (reference and margin scoring)



class Segment(NamedTuple):
    """One node execution: its rendered prompt and completion text; `ended` False when generation was
    cut at max_tokens (finish reason "length"), so no end-of-turn token follows the completion."""

    prompt: str
    completion: str
    ended: bool = True


NodeSegments = Mapping[str, Segment]  # one trajectory: trainable node -> its segment


class NodePolicies:
    """`adapters` maps each trainable node to its current adapter folder (None: a fresh LoRA). One AdamW
    over all adapters (`optimizer`) is kept for the whole training, so its moment estimates carry over
    from one update to the next; a checkpoint saves it beside the adapters."""

    def __init__(self, base_model_path: str, adapters: Mapping[str, str | None], lora: Mapping | None = None,
                 device: str = "auto", learning_rate: float = 1e-4):
        from peft import LoraConfig, PeftModel, get_peft_model
        from transformers import AutoModelForCausalLM, AutoTokenizer

        lora = dict(lora or {})
        self.tokenizer = AutoTokenizer.from_pretrained(base_model_path)
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        # float32 weights everywhere (LoRA steps this small round away in bfloat16); on a GPU the forward
        # passes run in bfloat16 under autocast, as GRPO's do. Log-probs come back on the CPU.
        self.device = pick_device(device, "device")
        self.autocast = self.device.startswith("cuda") and torch.cuda.is_bf16_supported()
        base = AutoModelForCausalLM.from_pretrained(base_model_path, dtype=torch.float32).to(self.device)
        self.max_positions = getattr(base.config, "max_position_embeddings", None) or 4096
        self.nodes = list(adapters)
        fresh = LoraConfig(r=int(lora.get("r", 8)), lora_alpha=int(lora.get("alpha", 16)), lora_dropout=0.0,
                           target_modules="all-linear", task_type="CAUSAL_LM")
        self.model = None
        for name, folder in adapters.items():
            if self.model is None:
                self.model = (PeftModel.from_pretrained(base, folder, adapter_name=name, is_trainable=True) if folder
                              else get_peft_model(base, fresh, adapter_name=name))
            elif folder:
                self.model.load_adapter(folder, adapter_name=name, is_trainable=True)
            else:
                self.model.add_adapter(name, fresh)
        self.parameters = [p for n, p in self.model.named_parameters() if "lora_" in n]
        self._trainable()
        self.model.train()
        self.optimizer = torch.optim.AdamW(self.parameters, lr=float(learning_rate))

    def _trainable(self) -> None:
        # peft's set_adapter freezes the other adapters; every node's LoRA trains from the joint loss.
        for p in self.parameters:
            p.requires_grad_(True)

    def render(self, messages: list[dict]) -> str:
        return render_chat(self.tokenizer, messages)

    def _encode(self, segments: Sequence[Segment]) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Left-padded ids, attention mask, and a mask of the completion tokens (targets): every
        completion ends at the last position, so only the tail needs logits."""
        special = not self.tokenizer.chat_template  # as the local provider tokenizes prompts
        rows, targets = [], []
        for prompt, completion, ended in map(_segment, segments):
            prompt_ids = self.tokenizer(prompt, add_special_tokens=special)["input_ids"]
            completion_ids = self.tokenizer(completion, add_special_tokens=False)["input_ids"]
            completion_ids += [self.tokenizer.eos_token_id] if ended else []
            # The local provider keeps a too-long prompt's end (LocalModel.tokenize); so does scoring.
            prompt_ids = prompt_ids[max(0, len(prompt_ids) + len(completion_ids) - self.max_positions):]
            rows.append(prompt_ids + completion_ids)
            targets.append([0] * len(prompt_ids) + [1] * len(completion_ids))
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id
        ids = torch.tensor([[pad] * (width - len(r)) + r for r in rows])
        mask = torch.tensor([[0] * (width - len(r)) + [1] * len(r) for r in rows])
        target = torch.tensor([[0] * (width - len(t)) + t for t in targets])
        return ids, mask, target

    def _sequence_logprobs(self, segments: Sequence[Segment]) -> torch.Tensor:
        """Summed log-prob of each completion. Logits only for the completions' positions: full-vocabulary
        logits over whole prompts (~900 tokens x 49k on Amazon) took 20+ GB for a few trajectory pairs.
        Without gradients, rows go through in small chunks."""
        if not torch.is_grad_enabled() and len(segments) > NO_GRAD_CHUNK:
            return torch.cat([self._sequence_logprobs(segments[i:i + NO_GRAD_CHUNK])
                              for i in range(0, len(segments), NO_GRAD_CHUNK)])
        ids, mask, target = (t.to(self.device) for t in self._encode(segments))
        keep = int(target.sum(dim=-1).max()) + 1  # the completions, and the position that predicts their first token
        positions = (mask.cumsum(-1) - 1).clamp(min=0)  # left padding: positions count real tokens, as in generation
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=self.autocast):
            logits = self.model(input_ids=ids, attention_mask=mask, position_ids=positions,
                                logits_to_keep=keep).logits[:, :-1].float()
        tail = ids.shape[1] - keep + 1
        token_logprobs = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, tail:, None]).squeeze(-1)
        return (token_logprobs * target[:, tail:]).sum(dim=-1).cpu()  # differentiable: gradients flow back

    def logprobs(self, node: str, segments: Sequence[Segment]) -> torch.Tensor:
        """log pi_node(completion | prompt) per segment, with gradients into the node's adapter."""
        self.model.set_adapter(node)
        self._trainable()
        return self._sequence_logprobs(segments)

    @torch.no_grad()
    def reference_logprobs(self, segments: Sequence[Segment]) -> torch.Tensor:
        """log pi_ref(completion | prompt): the base model, every adapter disabled."""
        with self.model.disable_adapter():
            return self._sequence_logprobs(segments)

    def trajectory_logprobs(self, trajectories: Sequence[NodeSegments], reference: bool = False) -> torch.Tensor:
        """Sum over each trajectory's nodes of log pi(y_i | prompt_i): the DAG factorization of log p(tau | x).

        Each distinct (node, segment) is scored once, so prefixes that branches share cost one pass.
        With `reference`, the base model scores them (no gradients).
        """
        distinct = sorted({(node, seg) for t in trajectories for node, seg in t.items()})
        scored: dict[tuple[str, Segment], torch.Tensor] = {}
        for node in dict.fromkeys(n for n, _ in distinct):
            segments = [seg for n, seg in distinct if n == node]
            values = self.reference_logprobs(segments) if reference else self.logprobs(node, segments)
            scored.update({(node, seg): v for seg, v in zip(segments, values, strict=True)})
        return torch.stack([sum((scored[(n, seg)] for n, seg in t.items()), torch.tensor(0.0)) for t in trajectories])

    def save(self, out_dir: Path) -> dict[str, str]:
        """Each node's adapter into its own folder under out_dir; returns node -> folder."""
        folders = {}
        for node in self.nodes:
            self.model.save_pretrained(str(out_dir), selected_adapters=[node])
            folder = out_dir / node  # peft writes a non-"default" adapter into a subfolder named after it
            if not (folder / "adapter_config.json").is_file():
                raise RuntimeError(f"peft wrote no adapter for {node!r} under {out_dir}")
            folders[node] = str(folder)
        return folders

    def save_optimizer(self, path: Path) -> None:
        """The optimizer's state (moments, step counts), written whole or not at all."""
        with replaced(path) as tmp:
            torch.save(self.optimizer.state_dict(), tmp)

    def load_optimizer(self, path: Path) -> None:
        self.optimizer.load_state_dict(torch.load(path, map_location=self.device))


def _segment(segment: Sequence) -> Segment:
    """A Segment from a (prompt, completion) or (prompt, completion, ended) tuple."""
    return segment if isinstance(segment, Segment) else Segment(*segment)


def shared_base_model(components: Sequence) -> str:
    """The one base model folder every trainable node's adapter applies to."""
    from optimas_cli.optim.weights import resolve_base_model

    bases = {c.name: resolve_base_model(c.base_model_path()) for c in components}
    if len(set(bases.values())) != 1:
        raise UserError(
            f"the trainable components run on different base models ({bases})",
            "give every weights component the same local model (their adapters train on one shared base)",
        )
    return next(iter(bases.values()))
