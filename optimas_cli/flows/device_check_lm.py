"""`optimas device-check`'s lm.* checks: the embedded provider (litellm -> LMClient -> LocalProvider -> LocalModel,
or LocalModel alone without litellm) on the tiny chat model. Device and dtype 'auto' must resolve to cuda +
bfloat16 on a GPU (cpu + float32 without one); batched greedy generation; seeded sampling that is the same
whatever the batch; whether greedy outputs are batch-invariant (reported, never failed: bfloat16 with padding
may legitimately differ); a LoRA adapter request; diverse beam search; agreement with the float32 CPU model
(reported)."""
from __future__ import annotations

import importlib.util
import time
from pathlib import Path

from optimas_cli.flows.device_check_session import (
    MAX_TOKENS,
    QUESTIONS,
    Session,
    Skip,
    chat,
    cuda_sync,
    expected_device,
    need,
)


class ViaClient:
    """Requests through LMClient -> litellm.completion -> the local provider's dynamic batcher."""

    route = "litellm -> LMClient -> LocalProvider"

    def __init__(self, folder: Path, work: Path):
        from optimas_cli.lm.client import LMClient
        from optimas_cli.lm.local.provider import LOCAL_PROVIDER
        from optimas_cli.lm.local.registry import model_name, register_local_model

        self.name = register_local_model("device-check-tiny", folder)
        self.client = LMClient(model=self.name, temperature=0.0, max_tokens=MAX_TOKENS, cache=False,
                               cache_dir=str(work / "cache"))
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


def local_lm(folder: Path, work: Path) -> ViaClient | ViaModel:
    """The tiny model behind the provider: through litellm when it is installed, else the model class alone."""
    return ViaClient(folder, work) if importlib.util.find_spec("litellm") else ViaModel(folder)


def check_lm(session: Session) -> None:
    import torch

    need("transformers")
    folder = session.chat_model()
    lm = local_lm(folder, session.work)
    m = lm.local_model
    device, dtype = expected_device()
    weights = next(m.model.parameters())
    ok = str(m.device) == device and weights.device.type == device and weights.dtype == dtype
    session.report("lm.load", "PASS" if ok else "FAIL",
           f"route {lm.route}; auto resolved to device {m.device}, weights on {weights.device} in {weights.dtype} "
           f"(expected {device} + {dtype})", device=str(weights.device), dtype=str(weights.dtype), route=lm.route)
    state = {"invariant": None, "alone": None}

    with session.step("lm.greedy_batch"):  # batched greedy generation, twice (must be deterministic), each question alone
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
        session.report("lm.greedy_batch", "PASS" if ok else "FAIL",
               f"{len(QUESTIONS)} prompts ran as batches {sizes} in {seconds:.2f} s; repeat identical: "
               f"{again == batch}; empty texts: {empty}", batch_sizes=sizes, seconds=round(seconds, 3), texts=batch)
        same = sum(a == b for a, b in zip(alone, batch, strict=True))
        state.update(invariant=same == len(QUESTIONS), alone=alone)
        session.report("lm.greedy_batch_invariance", "PASS" if state["invariant"] else "WARN",
               f"{same}/{len(QUESTIONS)} greedy texts equal alone and in the padded batch"
               + ("" if state["invariant"] else f" ({dtype} with left padding: reported, not failed)"),
               equal=same, of=len(QUESTIONS), alone=alone)

    with session.step("lm.sampling"):  # a sample depends on (seed, sample_index, messages), not on its batch
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
        session.report("lm.sampling", status,
               f"same request twice identical: {repeat_ok}; alone == in a batch of {1 + len(QUESTIONS)}: {batch_ok}; "
               f"{len(indices)}/4 distinct over sample_index, {len(set(n3))}/3 distinct for n=3",
               repeat=repeat_ok, batch_invariant=batch_ok, distinct_over_indices=len(indices))

    with session.step("lm.lora"):  # an adapter request changes the outputs, only for its requests; loaded once
        need("peft")
        adapter = str(session.adapter())
        base = [t[0] for t in lm.complete(QUESTIONS)]
        adapted = [t[0] for t in lm.complete(QUESTIONS, adapter=adapter)]
        restored = [t[0] for t in lm.complete(QUESTIONS)]
        adapted_again = [t[0] for t in lm.complete(QUESTIONS, adapter=adapter)]
        lora = [p for n, p in m._peft.named_parameters() if "lora_" in n]
        lora_devices, lora_dtypes = sorted({p.device.type for p in lora}), sorted({str(p.dtype) for p in lora})
        changed = sum(a != b for a, b in zip(adapted, base, strict=True))
        ok = changed > 0 and restored == base and adapted_again == adapted and lora_devices == [device]
        session.report("lm.lora", "PASS" if ok else "FAIL",
               f"adapter changed {changed}/{len(QUESTIONS)} texts; base restored: {restored == base}; adapter "
               f"repeat identical: {adapted_again == adapted}; LoRA weights on {lora_devices} in {lora_dtypes}",
               changed=changed, lora_dtypes=lora_dtypes)

    with session.step("lm.diverse_beam"):  # the SysDPO / sampling=dbs path: n candidates per prompt from one search
        rows = lm.complete(QUESTIONS[:2], n=3, diversity_penalty=1.0)
        ok = [len(r) for r in rows] == [3, 3]
        session.report("lm.diverse_beam", "PASS" if ok else "FAIL",
               f"candidates per prompt {[len(r) for r in rows]}, distinct {[len(set(r)) for r in rows]}")

    with session.step("lm.vs_float32_cpu"):  # the same greedy requests on the float32 CPU model: reported only
        if (device, dtype) == ("cpu", torch.float32):
            session.report("lm.vs_float32_cpu", "INFO", "already the float32 CPU model")
            return
        if state["alone"] is None:
            raise Skip("no greedy outputs to compare (lm.greedy_batch failed)")
        from optimas_cli.lm.local.model import Decoding, LocalModel

        reference = LocalModel("device-check-cpu", folder, dtype="float32", device="cpu")
        cpu = [reference.generate([reference.render(chat(q))], Decoding(0.0, MAX_TOKENS), [0])[0].text
               for q in QUESTIONS]
        same = sum(a == b for a, b in zip(cpu, state["alone"], strict=True))
        session.report("lm.vs_float32_cpu", "INFO", f"{same}/{len(QUESTIONS)} greedy texts ({dtype} on {device}, alone) "
               "equal to the float32 CPU model's", equal=same, of=len(QUESTIONS), cpu=cpu)
