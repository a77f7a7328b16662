"""Per-example traces: <run>/predictions.jsonl.gz, one JSON line per evaluated example and repeat.

A line holds the split, the repeat, the example's system inputs and gold fields, every component's
inputs and outputs (and r_k when the run has a trained local reward model), the final output and
its score. Fields are kept whole; gzip keeps long retrieved passages affordable. `optimas show`
and `optimas report` read these files.
"""
from __future__ import annotations

import gzip
import hashlib
import json
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

PREDICTIONS = "predictions.jsonl.gz"


def example_key(example: dict, inputs: Sequence[str]) -> str:
    """What lines two runs up on the same example: its id, else a hash of its system inputs."""
    for field in ("id", "task_id", "query_id", "question_id"):
        if example.get(field) is not None:
            return str(example[field])
    text = json.dumps({f: example.get(f) for f in inputs}, sort_keys=True, default=str)
    return "sha1:" + hashlib.sha1(text.encode()).hexdigest()[:12]


class TraceSink:
    """Appends trace lines to one file; created empty, so a re-run evaluation never doubles its lines.

    `reward_model` (a LocalRewardModel) adds r_k to each component's step it has a head for.
    """

    def __init__(self, path: str | Path, reward_model: Any = None):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_bytes(gzip.compress(b""))
        self.reward_model = reward_model
        self._rewards: dict[tuple[str, str], float] = {}  # greedy repeats repeat their steps: score each once

    def write(self, records: Iterable[dict]) -> None:
        data = "".join(json.dumps(r, ensure_ascii=False, default=str) + "\n" for r in records)
        with gzip.open(self.path, "at", encoding="utf-8") as handle:  # one gzip member per write
            handle.write(data)

    def write_trajectories(self, system, trajectories: Sequence, scores: Sequence[float], split: str,
                           repeat: int) -> None:
        steps = [{name: dict(step) for name, step in t.steps.items()} for t in trajectories]
        self._add_rewards(steps)
        self.write(
            {
                **_head(t.example, system.inputs, split, repeat, i),
                "components": {n: steps[i][n] for n in system.order if n in steps[i]},
                "output": t.final(system.outputs),
                "score": float(score),
            }
            for i, (t, score) in enumerate(zip(trajectories, scores, strict=True))
        )

    def write_outputs(self, examples: Sequence[dict], inputs: Sequence[str], component: str,
                      prompts: Sequence[Any], outputs: Sequence[dict], scores: Sequence[float], split: str,
                      repeat: int) -> None:
        """A method without a pipeline run (single_llm): its one call is the only component."""
        self.write(
            {
                **_head(ex, inputs, split, repeat, i),
                "components": {component: {"inputs": {"prompt": prompt}, "outputs": out, "skipped": False}},
                "output": out,
                "score": float(score),
            }
            for i, (ex, prompt, out, score) in enumerate(zip(examples, prompts, outputs, scores, strict=True))
        )

    def _add_rewards(self, steps: list[dict[str, dict]]) -> None:
        model = self.reward_model
        if model is None:
            return
        names = {n for s in steps for n, step in s.items() if not step.get("skipped")}
        for name in sorted(names):
            if name not in getattr(model, "head_index", {}):
                continue  # no head: nothing scores this component's outputs
            where = [s[name] for s in steps if name in s and not s[name].get("skipped")]
            keys = [(name, json.dumps([w["inputs"], w["outputs"]], sort_keys=True, default=str)) for w in where]
            new = {k: w for k, w in zip(keys, where, strict=True) if k not in self._rewards}
            if new:
                values = model.score(name, [w["inputs"] for w in new.values()], [w["outputs"] for w in new.values()])
                self._rewards.update(zip(new, map(float, values), strict=True))
            for key, w in zip(keys, where, strict=True):
                w["reward"] = self._rewards[key]


def _head(example: dict, inputs: Sequence[str], split: str, repeat: int, index: int) -> dict:
    return {
        "split": split,
        "repeat": repeat,
        "index": index,
        "key": example_key(example, inputs),
        "input": {f: example.get(f) for f in inputs},
        "gold": {k: v for k, v in example.items() if k not in inputs},
    }


def predictions_path(folder: str | Path) -> Path | None:
    """The run's trace file (compressed or plain), or None for a run written before traces existed."""
    for name in (PREDICTIONS, "predictions.jsonl"):
        path = Path(folder) / name
        if path.exists():
            return path
    return None


def read_predictions(path: str | Path) -> list[dict]:
    path = Path(path)
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]
