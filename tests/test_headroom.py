"""`optimas headroom` (issue 24): every single change scored on validation only, each matching a full
run of the changed configuration, with what it spends predicted by `optimas plan`'s arithmetic."""
from __future__ import annotations

import dataclasses
import json

from hydra import compose, initialize_config_dir
from rich.console import Console

from optimas_cli.conf import CONF_DIR
from optimas_cli.flows import headroom
from optimas_cli.flows.setup import build_pipeline
from optimas_cli.optim.prompt_pool import GENERIC_CONSTRAINTS
from optimas_cli.system import Component, CompoundSystem, ConfigKind, Pipeline, RunContext, RunLedger, Splits
from optimas_cli.system.evaluate import rewards


def composed(*overrides: str):
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides))


class Writer(Component):
    def forward(self, inputs, value, ctx):
        return [{"text": value} for _ in inputs]


def test_single_changes_enumerate_alternatives_format_edits_and_choice_values():
    prompt = Writer("writer", "writes", inputs=("q",), outputs=("text",), kind=ConfigKind.PROMPT,
                    default="Answer the question. Be brief.", alternatives=("Reply in one word.", "Answer the question. Be brief."))
    pick = Writer("pick", "picks", inputs=("text",), outputs=("k",), kind=ConfigKind.CHOICE, default=5, choices=(1, 5, 10))
    system = CompoundSystem([prompt, pick], inputs=("q",), outputs=("k",))
    pipeline = Pipeline("fake", system, Splits([{"q": 1}], [{"q": 1}], [{"q": 1}]), metric=None)
    changes = [(c.component, c.label, c.value) for c in headroom.single_changes(pipeline)]
    assert changes == [
        ("writer", "alternative 1", "Reply in one word."),  # the alternative equal to the default is not a change
        ("writer", "constrain", f"Answer the question. Be brief. {GENERIC_CONSTRAINTS[0]}"),
        ("writer", "shorten", "Answer the question."),
        ("pick", "value 1", 1), ("pick", "value 10", 10),
    ]


def test_headroom_scores_every_change_on_validation_only_as_a_full_run_would(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cfg = composed("pipeline=toy_hint", "budget=smoke")
    real = build_pipeline(cfg)
    # Test rows lack the system's inputs: touching them would fail the scan.
    poisoned = dataclasses.replace(real, splits=Splits(real.splits.train, real.splits.val, [{"nothing": 0}]))
    monkeypatch.setattr(headroom, "build_pipeline", lambda _cfg: poisoned)

    results = headroom.scan(cfg, Console(quiet=True), root=tmp_path / "outputs")

    system, val = real.system, real.splits.val[: cfg.budget.val_size]
    ctx = RunContext(ledger=RunLedger(len(system)))
    for row in results["changes"]:  # the cheap re-run (run_changed) equals a full run of the changed config
        config = system.default_config().replace(row["component"], row["value"])
        assert row["per_example"] == rewards(real, system.run(val, config, ctx))
    initial = rewards(real, system.run(val, system.default_config(), ctx))
    assert results["initial"]["per_example"] == initial
    labels = {r["change"]: r for r in results["changes"]}
    assert set(labels) == {"value short", "value long"}  # the heuristic route is the default, not a change
    # The chapter's toy: the long hint everywhere gains over brevity's route; its paired CI excludes 0.
    assert labels["value long"]["vs_initial"]["delta"] > 0.3 and labels["value long"]["vs_initial"]["excludes_zero"]
    assert results["ceiling"]["change"] == "value long" and results["room"] == ["hint_generator"]
    # What the plan said it would spend is what the ledger counted, phase by phase.
    # initial: the heuristic route runs both hints on each example (2 + 1 executions over 2 components)
    planned = {p: r["runs"] for p, r in results["plan"]["phases"].items()}
    spent = {p: r["runs"] for p, r in results["ledger"]["by_phase"].items() if r["runs"]}
    assert planned == spent == {headroom.INITIAL: 1.5 * len(val), headroom.CHANGES: 2.0 * len(val)}
    folder = tmp_path / "outputs"
    saved = json.loads(next(folder.glob("*/*-toy_hint-headroom/headroom.json")).read_text())
    assert saved["n"] == len(val) and saved["split"] == "validation"
    assert "| hint_generator | value long |" in next(folder.glob("*/*/headroom.md")).read_text()


def test_dry_run_prints_the_plan_and_spends_nothing(tmp_path, capsys):
    from optimas_cli.cli import main

    assert main(["headroom", "--dry-run", "pipeline=toy_hint", "budget=smoke"]) == 0
    out = capsys.readouterr().out
    assert "headroom plan: toy_hint" in out and "headroom_changes" in out
    assert main(["headroom", "-m", "pipeline=toy_hint"]) == 2
