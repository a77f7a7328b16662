"""Stand-ins for the trained local reward r_k that the baselines plug into the Algorithm 1 loop.

Both implement `score(component_name, inputs, outputs) -> list[float]`, the interface the local
optimizers call (optimas_cli/optim), so a baseline differs from Optimas only in what scores a
candidate output:

- GlobalRewardScorer ('global reward only' ablation): substitute the candidate outputs into the
  cached search trajectories and run everything downstream, then score the final output with the
  pipeline's global metric. Exact but costly: every score is a partial system run, counted in the
  ledger.
- ReferenceSimilarityScorer (hierarchical behaviour cloning, HBC): cosine similarity between the
  embedding of a candidate output and the reference outputs of the nearest OTHER inputs, taken
  from the highest-reward runs of the unoptimized system. Cheap, but only as good as "looks like a
  good output" is at predicting "leads to a good final answer".
"""
from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence

import numpy as np

from optimas_cli.lrf import backbone as bb
from optimas_cli.lrf.text import format_value
from optimas_cli.system import Pipeline, RunContext, SystemConfig, Trajectory
from optimas_cli.system.evaluate import rewards


def input_key(inputs: Mapping) -> str:
    """A component input as a hashable key (values may be lists or dicts)."""
    return json.dumps(inputs, sort_keys=True, ensure_ascii=False, default=str)


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


class TextEmbedder:
    """Sentence embeddings from the LRF backbone loader (MiniLM by default), L2-normalised."""

    def __init__(self, backbone: str | None = None, device: str | None = "auto", dtype: str | None = "auto",
                 max_length: int = 256, batch_size: int = 32):
        import torch

        self._torch = torch
        self.device = bb.pick_device(device)
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
    """HBC's r_k: mean cosine similarity of a candidate output to the reference outputs of the
    `neighbors` training inputs nearest to its own input (by the embedding of the input fields).

    `references[name]` is a list of (inputs, outputs) of component `name` from high-reward runs.
    A reference whose input is the scored input itself is never used: it is the unoptimized
    system's own output there, and cloning it would make the current configuration win by
    construction. Behaviour cloning means moving toward the known-good outputs of similar inputs.
    A component with no usable reference scores every candidate 0 (no preference).
    """

    def __init__(self, references: Mapping[str, Sequence[tuple[dict, dict]]], output_fields: Mapping[str, Sequence[str]],
                 embedder: TextEmbedder, neighbors: int = 3):
        if neighbors < 1:
            raise ValueError("neighbors must be >= 1")
        self.embedder, self.output_fields = embedder, {k: tuple(v) for k, v in output_fields.items()}
        self.neighbors = int(neighbors)
        self.references: dict[str, np.ndarray] = {}  # reference outputs' embeddings
        self.reference_inputs: dict[str, np.ndarray] = {}  # their inputs' embeddings
        self.reference_keys: dict[str, list[str]] = {}
        for name, refs in references.items():
            if not refs:
                continue
            fields = self.output_fields[name]
            self.references[name] = embedder.encode([output_text(out, fields) for _, out in refs])
            self.reference_inputs[name] = embedder.encode([output_text(x, sorted(x)) for x, _ in refs])
            self.reference_keys[name] = [input_key(x) for x, _ in refs]

    @classmethod
    def from_runs(cls, pipeline: Pipeline, trajectories: Sequence[Trajectory], run_rewards: Sequence[float],
                  embedder: TextEmbedder, top_fraction: float = 0.25,
                  neighbors: int = 3) -> tuple[ReferenceSimilarityScorer, dict]:
        """References from the best `top_fraction` of runs (at least one), with a summary for results.json."""
        if not 0 < top_fraction <= 1:
            raise ValueError("top_fraction must be in (0, 1]")
        order = sorted(range(len(trajectories)), key=lambda i: -run_rewards[i])
        keep = order[: max(1, math.ceil(top_fraction * len(order)))]
        system = pipeline.system
        references: dict[str, list[tuple[dict, dict]]] = {name: [] for name in system.order}
        for i in keep:
            for name, step in trajectories[i].steps.items():
                if not step["skipped"]:
                    references[name].append((step["inputs"], step["outputs"]))
        fields = {name: comp.outputs for name, comp in system.components.items()}
        summary = {
            "reference_runs": len(keep),
            "reference_mean_reward": float(np.mean([run_rewards[i] for i in keep])) if keep else 0.0,
            "all_runs_mean_reward": float(np.mean(run_rewards)) if len(run_rewards) else 0.0,
            "references_per_component": {n: len(r) for n, r in references.items()},
            "neighbors": neighbors,
        }
        return cls(references, fields, embedder, neighbors), summary

    def score(self, component_name: str, inputs: list[dict], outputs: list[dict]) -> list[float]:
        refs = self.references.get(component_name)
        if refs is None:
            return [0.0] * len(outputs)
        fields = self.output_fields[component_name]
        cand = self.embedder.encode([output_text(out, fields) for out in outputs])
        sims = cand @ refs.T  # rows: candidates, columns: references (unit vectors: cosine)
        near = self.embedder.encode([output_text(x, sorted(x)) for x in inputs]) @ self.reference_inputs[component_name].T
        keys = self.reference_keys[component_name]
        scores = []
        for row, x in enumerate(inputs):
            own = input_key(x)
            others = [j for j in range(len(keys)) if keys[j] != own]
            nearest = sorted(others, key=lambda j: -near[row, j])[: self.neighbors]
            scores.append(float(np.mean([sims[row, j] for j in nearest])) if nearest else 0.0)
        return scores
