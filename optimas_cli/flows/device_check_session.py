"""What every part of `optimas device-check` shares: its scratch folder and tiny models, one line per check
(PASS / FAIL / WARN / INFO / SKIP with its numbers), and the device and dtype a check expects."""
from __future__ import annotations

import contextlib
import importlib.util
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path

QUESTIONS = ["What is the capital of France?", "Name a colour.", "Why?",
             "Answer briefly: how many legs does a dog have, and why do cats purr so much?",
             "Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000.", "Yes or no?"]
MAX_TOKENS = 12
STATUSES = ("PASS", "FAIL", "WARN", "INFO", "SKIP")


class Skip(Exception):
    pass


def need(*modules: str) -> None:
    missing = [m for m in modules if importlib.util.find_spec(m) is None]
    if missing:
        raise Skip(f"not installed: {', '.join(missing)}")


def chat(text: str) -> list[dict]:
    return [{"role": "user", "content": text}]


def expected_device():
    """(device, dtype) that 'auto' must resolve to: cuda + bfloat16 on a GPU, else cpu + float32."""
    import torch

    return ("cuda", torch.bfloat16) if torch.cuda.is_available() else ("cpu", torch.float32)


def cuda_sync() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.synchronize()


@dataclass
class Session:
    work: Path  # scratch: the tiny models, adapters, the LM cache (never the user's ~/.cache/optimas)
    results: list[dict] = field(default_factory=list)
    built: dict[str, Path] = field(default_factory=dict)

    def report(self, name: str, status: str, line: str, **numbers) -> dict:
        entry = {"name": name, "status": status, "summary": line, **numbers}
        self.results.append(entry)
        print(f"{status:<4} {name}: {line}", flush=True)
        return entry

    @contextlib.contextmanager
    def step(self, name: str):
        """A part of a check that reports its own line; an exception in it is one FAIL (or SKIP) line for it,
        and the parts after it still run."""
        try:
            yield
        except Skip as why:
            self.report(name, "SKIP", str(why))
        except Exception as error:  # a crash of the checked code is the finding
            traceback.print_exc()
            self.report(name, "FAIL", f"{type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"[:400])

    def run_check(self, name: str, fn) -> None:
        started = time.perf_counter()
        with self.step(name):
            fn(self)
        print(f"     ({name}: {time.perf_counter() - started:.1f} s)", flush=True)

    def chat_model(self) -> Path:
        """The tiny chat model, built once."""
        if "model" not in self.built:
            from optimas_cli.flows.tiny_models import build_tiny_chat_model

            self.built["model"] = build_tiny_chat_model(self.work / "tiny-llama")
        return self.built["model"]

    def adapter(self) -> Path:
        """A random LoRA adapter for the tiny chat model, built once."""
        if "adapter" not in self.built:
            from optimas_cli.flows.tiny_models import build_tiny_lora_adapter

            self.built["adapter"] = build_tiny_lora_adapter(self.chat_model(), self.work / "tiny-adapter")
        return self.built["adapter"]

    def counts(self) -> dict[str, int]:
        return {s: sum(r["status"] == s for r in self.results) for s in STATUSES}

    def failed(self) -> list[str]:
        return [r["name"] for r in self.results if r["status"] == "FAIL"]
