"""What a tracker logs, read from a finished run folder: nothing here is measured twice."""
from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from optimas_cli.report.variants import flatten
from optimas_cli.stats import mean_ci
from optimas_cli.system.results_file import BULK, RESULTS, read_results

# The files a run folder holds that a tracker keeps as artifacts, when the run wrote them.
ARTIFACT_FILES = (RESULTS, BULK, "best_config.json", "config.yaml", "lrf_report.json", "optimas.log")
LEDGER_KEYS = ("runs", "paper_runs", "calls", "tokens", "usd", "unpriced_calls", "compute_seconds", "seconds")


@dataclass
class RunRecord:
    folder: Path
    name: str
    status: str  # finished | failed (no results.json: the run did not get to the end)
    params: dict[str, object] = field(default_factory=dict)  # the resolved config, flattened
    tags: dict[str, str] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)  # one value each
    iterations: list[dict[str, float]] = field(default_factory=list)  # one dict per Algorithm 1 iteration
    artifacts: list[Path] = field(default_factory=list)

    @classmethod
    def read(cls, folder: str | Path) -> RunRecord:
        folder = Path(folder)
        results = read_results(folder) or {}
        config = results.get("config") or _saved_config(folder)
        record = cls(folder=folder, name=folder.name, status="finished" if results else "failed",
                     params=flatten(config))
        record.tags = {k: str(v) for k, v in (("pipeline", results.get("pipeline")), ("method", results.get("method")),
                                              ("metric", results.get("metric")), ("seed", config.get("seed")),
                                              ("folder", str(folder.resolve())), ("status", record.status))
                       if v is not None}
        record.tags |= {f"code.{k}": str(v) for k, v in (results.get("code") or {}).items() if v is not None}
        record.metrics = scores(results) | lrf_accuracy(results) | ledger(results)
        if results and "test.ci_low" not in record.metrics:  # older results.json: the CI from its traces
            record.metrics |= traced_test_ci(folder)
        record.iterations = iterations(results)
        record.artifacts = [folder / name for name in ARTIFACT_FILES if (folder / name).is_file()]
        return record

    def plots(self) -> list[Path]:
        """This run's validation and gate plots, drawn as `optimas report` draws them (none without a history)."""
        from optimas_cli.report import plots
        from optimas_cli.report.runs import read_run

        run = read_run(self.folder)
        if not hasattr(run, "results"):
            return []
        out = Path(tempfile.mkdtemp(prefix="optimas-plots-"))
        drawn = [plots.plot_validation([run], out / "validation_reward.png"),
                 plots.plot_gate([run], out / "gate_decisions.png")]
        return [p for p in drawn if p is not None]


def _saved_config(folder: Path) -> dict:
    path = folder / "config.yaml"
    return OmegaConf.to_container(OmegaConf.load(path)) if path.is_file() else {}


def scores(results: dict) -> dict[str, float]:
    """Test and validation means with their 95% bootstrap CIs; the initial configuration and the paired gain."""
    out: dict[str, float] = {}
    for split in ("test", "validation", "test_initial"):
        block = results.get(split)
        if not isinstance(block, dict) or "mean" not in block:
            continue
        out[f"{split}.mean"] = float(block["mean"])
        out[f"{split}.n"] = float(block.get("n", 0))
        if block.get("per_example"):
            ci = mean_ci(block["per_example"])
            out[f"{split}.ci_low"], out[f"{split}.ci_high"] = ci.low, ci.high
    gain = results.get("test_gain")
    if isinstance(gain, dict):
        out |= {f"test_gain.{k}": float(gain[k]) for k in ("delta", "ci_low", "ci_high")}
    return out


def traced_test_ci(folder: Path) -> dict[str, float]:
    """The test CI as `optimas report` computes it from predictions.jsonl.gz; none without traces."""
    from optimas_cli.report.evidence import cell_evidence
    from optimas_cli.report.runs import read_run

    run = read_run(folder)
    ci = cell_evidence([run], None).ci if hasattr(run, "results") else None
    return {} if ci is None else {"test.ci_low": ci.low, "test.ci_high": ci.high}


def lrf_accuracy(results: dict) -> dict[str, float]:
    """Per component: the pairwise accuracy of its local reward function (and the judge's) on its test
    pairs, how many test pairs that is (`test_pairs`), and how many pairs it was trained on (`train_pairs`):
    results.json's `n_pairs` counts the test pairs only, so it is logged under the name that says so."""
    lrf = results.get("lrf") or {}
    out = {}
    for name, row in (lrf.get("components") or {}).items():
        if not isinstance(row, dict):
            continue
        counts = {"pairwise_accuracy": row.get("pairwise_accuracy"), "judge_accuracy": row.get("judge_accuracy"),
                  "test_pairs": row.get("n_pairs"), "train_pairs": (row.get("pairs") or {}).get("trained")}
        out |= {f"lrf.{name}.{key}": float(value) for key, value in counts.items() if value is not None}
    for key in ("train_pairs", "test_pairs"):  # all components together
        if lrf.get(f"n_{key}") is not None:
            out[f"lrf.{key}"] = float(lrf[f"n_{key}"])
    return out


def ledger(results: dict) -> dict[str, float]:
    block = results.get("ledger") or {}
    return {f"ledger.{k}": float(block[k]) for k in LEDGER_KEYS if isinstance(block.get(k), int | float)}


def iterations(results: dict) -> list[dict[str, float]]:
    """Each judged proposal: its validation delta (candidate - current) and the gate's decision."""
    out = []
    for entry in results.get("history") or []:
        if not isinstance(entry, dict) or "iteration" not in entry:
            continue
        gate = entry.get("gate") or {}
        candidate = entry.get("val_candidate", entry.get("val_after"))
        row = {"iteration": float(entry["iteration"]), "accepted": float(bool(entry.get("accepted")))}
        if candidate is not None and entry.get("val_before") is not None:
            row["val_delta"] = float(candidate) - float(entry["val_before"])
        if entry.get("val_after") is not None:
            row["val_after"] = float(entry["val_after"])
        for key in ("delta", "ci_low", "ci_high"):
            if gate.get(key) is not None:
                row[f"gate_{key}"] = float(gate[key])
        out.append(row)
    return out
