"""Stand-ins for the trained local reward r_k that the baselines plug into the Algorithm 1 loop.

Both implement `score(component_name, inputs, outputs) -> list[float]`, the interface the local
optimizers call (optimas_cli/optim), so a baseline differs from Optimas only in what scores a
candidate output:

- GlobalRewardScorer ('global reward only' ablation): substitute the candidate outputs into the
  cached search trajectories and run everything downstream, then score the final output with the
  pipeline's global metric. Exact but costly: every score is a partial system run, counted in the
  ledger.
- RandomScorer ('random reward' ablation): a uniform number drawn from a hash of (seed, component,
  input, output). It carries no information about the global reward, so the loop's gate is all that
  separates a good proposal from a bad one: what Optimas gains over it is what its LRF contributes.
- ReferenceSimilarityScorer (hierarchical behaviour cloning, HBC): cosine similarity between the
  embedding of a candidate output and the known-good reference output of the same example, taken
  from the highest-reward sampled run of the unoptimized system there. Cheap, but only as good as
  "looks like a good output" is at predicting "leads to a good final answer".
"""
from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

from optimas_cli.devices import pick_device
from optimas_cli.lrf import backbone as bb
from optimas_cli.lrf.text import format_value
from optimas_cli.system import Pipeline, RunContext, SystemConfig, Trajectory
from optimas_cli.system.evaluate import rewards


def input_key(inputs: Mapping) -> str:
    """A component input as a hashable key (values may be lists or dicts)."""
    return json.dumps(inputs, sort_keys=True, ensure_ascii=False, default=str)


def example_key(example: Mapping, system_inputs: Sequence[str]) -> str:
    """An example by its system inputs (its gold fields left out)."""
    return input_key({f: example.get(f) for f in system_inputs})


def output_text(outputs: Mapping, fields: Sequence[str]) -> str:
    """What the embedding model reads for one output: 'field: value' lines."""
    return "\n".join(f"{f}: {format_value(outputs.get(f))}" for f in fields)


class GlobalRewardScorer:
    """r_k(x, y) := R of the final output when y replaces C_k's output on x's cached trajectory.

    The loop hands over its search trajectories through `observe` (and again whenever it accepts
    an update), so a score is only defined for the inputs of those trajectories. `rollouts` > 1
    averages the global reward over that many downstream samples (distinct LM sample indices).
    """

    def __init__(self, pipeline: Pipeline, ctx: RunContext, rollouts: int = 1):
        if rollouts < 1:
            raise ValueError("rollouts must be >= 1")
        self.pipeline, self.system = pipeline, pipeline.system
        self.ctx, self.rollouts = ctx, int(rollouts)
        self.trajectories: list[Trajectory] = []
        self.config: SystemConfig | None = None
        self._index: dict[tuple[str, str], int] = {}
        self.calls = 0  # scored batches, for the method's report

    def observe(self, trajectories: Sequence[Trajectory], config: SystemConfig) -> None:
        self.trajectories, self.config = list(trajectories), config
        self._index = {}
        for i, traj in enumerate(self.trajectories):
            for name, step in traj.steps.items():
                if not step["skipped"]:
                    self._index.setdefault((name, input_key(step["inputs"])), i)

    def score(self, component_name: str, inputs: list[dict], outputs: list[dict]) -> list[float]:
        if self.config is None:
            raise RuntimeError("GlobalRewardScorer.score called before observe(): it has no trajectories to run")
        rows = []
        for x in inputs:
            row = self._index.get((component_name, input_key(x)))
            if row is None:
                raise RuntimeError(
                    f"the global-reward scorer has no cached trajectory whose {component_name!r} input matches; it "
                    "scores only inputs of the search sample it observed (global rewards need the example's gold)"
                )
            rows.append(row)
        trajs = [self.trajectories[r] for r in rows]
        totals = np.zeros(len(inputs))
        for r in range(self.rollouts):
            rctx = self.ctx.replace(sample_index=self.ctx.sample_index + r)
            finished = self.system.run_after(component_name, trajs, outputs, self.config, rctx)
            totals += np.asarray(rewards(self.pipeline, finished), dtype=float)
        self.calls += 1
        return (totals / self.rollouts).tolist()


class RandomScorer:
    """r_k(x, y) := a uniform number in [0, 1) fixed by (seed, k, x, y): the same output on the same input
    always gets the same score, whatever else is in the batch and in whatever order it is asked."""

    def __init__(self, seed: int = 0):
        self.seed = int(seed)

    def score(self, component_name: str, inputs: list[dict], outputs: list[dict]) -> list[float]:
        return [self._uniform(component_name, x, y) for x, y in zip(inputs, outputs, strict=True)]

    def _uniform(self, name: str, inputs: Mapping, outputs: Mapping) -> float:
        key = json.dumps([self.seed, name, input_key(inputs), input_key(outputs)], ensure_ascii=False)
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") / 2.0**64


class TextEmbedder:
    """Sentence embeddings from the LRF backbone loader (MiniLM by default), L2-normalised."""

    def __init__(self, backbone: str | None = None, device: str | None = "auto", dtype: str | None = "auto",
                 max_length: int = 256, batch_size: int = 32):
        import torch

        self._torch = torch
        self.device = pick_device(device, "method.device")
        self.model, self.tokenizer, causal, self.where = bb.load_backbone(backbone, dtype, self.device)
        self.model.eval()
        self.pooling = "last" if causal else "mean"
        # A longer text than the backbone has positions for would crash it: cut at its limit.
        positions = getattr(self.model.config, "max_position_embeddings", None) or int(max_length)
        self.max_length, self.batch_size = min(int(max_length), int(positions)), int(batch_size)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        torch = self._torch
        chunks = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                enc = self.tokenizer(list(texts[start : start + self.batch_size]), padding=True, truncation=True,
                                     max_length=self.max_length, return_tensors="pt")
                enc = {k: v.to(self.device) for k, v in enc.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
                hidden = self.model(**enc).last_hidden_state
                pooled = bb.pool(hidden, enc["attention_mask"], self.pooling).float()
                chunks.append(torch.nn.functional.normalize(pooled, dim=-1).cpu().numpy())
        if not chunks:
            return np.zeros((0, 0), dtype=np.float32)
        return np.concatenate(chunks)


class ReferenceSimilarityScorer:
    """HBC's r_k: cosine similarity of a candidate output to the known-good reference output of
    the same example, i.e. C_k's output in the highest-reward sampled run on that example.

    `references[name][example]` is component `name`'s output in the reference run of the example
    (keyed by `example_key`). A scored component input is traced back to its example through the
    loop's search trajectories (`observe`), so a downstream component's candidates are compared with
    the reference even after upstream changes altered their inputs. A candidate whose example has no
    reference scores 0 (no preference).
    """

    def __init__(self, references: Mapping[str, Mapping[str, dict]], output_fields: Mapping[str, Sequence[str]],
                 embedder: TextEmbedder, system_inputs: Sequence[str]):
        self.embedder, self.output_fields = embedder, {k: tuple(v) for k, v in output_fields.items()}
        self.system_inputs = tuple(system_inputs)
        self.references: dict[str, dict[str, np.ndarray]] = {}  # component -> example -> reference embedding
        for name, by_example in references.items():
            if by_example:
                vectors = embedder.encode([output_text(out, self.output_fields[name]) for out in by_example.values()])
                self.references[name] = dict(zip(by_example, vectors, strict=True))
        self._example_of: dict[tuple[str, str], str] = {}

    @classmethod
    def from_runs(cls, pipeline: Pipeline, runs: Sequence[Sequence[Trajectory]], run_rewards: Sequence[Sequence[float]],
                  embedder: TextEmbedder, top_fraction: float = 0.25) -> tuple[ReferenceSimilarityScorer, dict]:
        """References from sampled runs: runs[s][i] is sample s on example i. An example's reference run
        is its highest-reward sample (the first on ties), kept when that reward is among the top
        `top_fraction` of all the runs' rewards (the known-good ones); a summary for results.json."""
        if not 0 < top_fraction <= 1:
            raise ValueError("top_fraction must be in (0, 1]")
        system = pipeline.system
        every = sorted((r for sample in run_rewards for r in sample), reverse=True)
        threshold = every[max(1, math.ceil(top_fraction * len(every))) - 1] if every else math.inf
        references: dict[str, dict[str, dict]] = {name: {} for name in system.order}
        kept = []
        for i in range(len(runs[0]) if runs else 0):
            best = max(range(len(runs)), key=lambda s: (run_rewards[s][i], -s))
            if run_rewards[best][i] < threshold:
                continue
            kept.append(run_rewards[best][i])
            run = runs[best][i]
            for name, step in run.steps.items():
                if not step["skipped"]:
                    references[name][example_key(run.example, system.inputs)] = step["outputs"]
        summary = {
            "reference_inputs": len(kept), "inputs": len(runs[0]) if runs else 0, "samples": len(runs),
            "reference_mean_reward": float(np.mean(kept)) if kept else 0.0,
            "all_runs_mean_reward": float(np.mean(every)) if every else 0.0,
            "references_per_component": {n: len(r) for n, r in references.items()},
        }
        fields = {name: comp.outputs for name, comp in system.components.items()}
        return cls(references, fields, embedder, system.inputs), summary

    def observe(self, trajectories: Sequence[Trajectory], config: SystemConfig) -> None:
        """Map each component input of the loop's search trajectories to its example."""
        self._example_of = {}
        for traj in trajectories:
            for name, step in traj.steps.items():
                if not step["skipped"]:
                    key = (name, input_key(step["inputs"]))
                    self._example_of.setdefault(key, example_key(traj.example, self.system_inputs))

    def score(self, component_name: str, inputs: list[dict], outputs: list[dict]) -> list[float]:
        refs = self.references.get(component_name, {})
        examples = [self._example_of.get((component_name, input_key(x))) for x in inputs]
        rows = [i for i, ex in enumerate(examples) if ex in refs]
        scores = [0.0] * len(outputs)
        if rows:
            fields = self.output_fields[component_name]
            cand = self.embedder.encode([output_text(outputs[i], fields) for i in rows])
            for vector, i in zip(cand, rows, strict=True):
                scores[i] = float(vector @ refs[examples[i]])  # unit vectors: cosine
        return scores
