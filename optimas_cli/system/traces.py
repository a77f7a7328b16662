"""Per-example traces: <run>/predictions.jsonl.gz, one JSON line per evaluated example and repeat.

A line holds the split, the repeat, the example's system inputs and gold fields, every component's
inputs and outputs (and r_k when the run has a trained local reward model), the final output and
its score. Fields are kept whole; gzip keeps long retrieved passages affordable. `optimas show`
and `optimas report` read these files, and their xz-packed form (predictions.jsonl.xz): committed run
folders hold that, since xz's large window stores the passages each split and repeat repeat once.
"""
from __future__ import annotations

import gzip
import hashlib
import json
import lzma
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from optimas_cli.errors import DataError

PREDICTIONS = "predictions.jsonl.gz"
PACKED = "predictions.jsonl.xz"  # the same lines, packed for keeping (scripts/compact_run_data.py)
UNPACK = {".gz": gzip.decompress, ".xz": lzma.decompress}


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
    for name in (PREDICTIONS, PACKED, "predictions.jsonl"):
        path = Path(folder) / name
        if path.exists():
            return path
    return None


# What every trace line holds, with its type: `optimas show` and the report read these. `components`
# may be absent (a method that keeps only the final output); present, it is an object of objects.
FIELDS = {"split": ((str,), "text"), "key": ((str,), "text"), "repeat": ((int,), "a whole number"),
          "score": ((int, float), "a number"), "components": ((dict,), "a JSON object")}
OPTIONAL = ("components",)


def read_predictions(path: str | Path) -> list[dict]:
    """The trace lines; a damaged file (cut short, not gzip or xz, not UTF-8, not JSON, a field of the wrong
    type) is a DataError naming the file, the line and what is wrong."""
    path = Path(path)
    try:
        data = UNPACK.get(path.suffix, bytes)(path.read_bytes())
    except (OSError, EOFError, lzma.LZMAError) as error:  # BadGzipFile is an OSError; a cut-off stream an EOFError
        raise DataError(f"{path} is damaged: {error}", "re-evaluate the run (optimas eval "
                        f"config_file={path.parent}/best_config.json) or restore the file") from None
    records = []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        if not raw.strip():
            continue
        try:
            record = json.loads(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            raise DataError(f"{path} line {number} is not UTF-8 text (byte {raw[error.start]:#04x})",
                            "restore the file, or re-evaluate the run") from None
        except json.JSONDecodeError as error:
            raise DataError(f"{path} line {number} is not JSON ({error.msg})", "restore the file, or re-evaluate the run") from None
        problem = _line_problem(record)
        if problem:
            raise DataError(f"{path} line {number}: {problem}", "restore the file, or re-evaluate the run")
        records.append(record)
    return records


def _line_problem(record: Any) -> str | None:
    if not isinstance(record, dict):
        return f"a {type(record).__name__}, not a JSON object"
    for name, (kinds, label) in FIELDS.items():
        value = record.get(name)
        if name not in record:
            if name in OPTIONAL:
                continue
            return f"{name!r} is missing"
        if isinstance(value, bool) or not isinstance(value, kinds):
            return f"{name!r} is {repr(value)[:40]}, not {label}"
    broken = [n for n, step in record.get("components", {}).items() if not isinstance(step, dict)]
    return f"component {broken[0]!r} is not a JSON object" if broken else None
