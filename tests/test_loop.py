"""Algorithm 1: the strict validation gate, cached validation, rejected proposals, resume after a kill."""
from __future__ import annotations

import pytest
import torch

from optimas_cli.optim.loop import LoopSettings, OptimasLoop
from optimas_cli.system import (
    Component,
    CompoundSystem,
    ConfigKind,
    Metric,
    Pipeline,
    RunContext,
    RunLedger,
    Splits,
)
from optimas_cli.system.run_folder import RunFolder

REWARD = {0: 0.5, 1: 0.5, 2: 0.2, 3: 0.9}  # value 1 ties the default 0; 2 loses; 3 wins


class Upstream(Component):
    def __init__(self):
        super().__init__("up", "prepares the question", ("q",), ("prepared",))
        self.calls = 0

    def forward(self, inputs, value, ctx):
        self.calls += len(inputs)
        return [{"prepared": x["q"].upper()} for x in inputs]


class Pick(Component):
    def __init__(self):
        super().__init__("pick", "a global setting", ("prepared",), ("value",), kind=ConfigKind.CHOICE,
                         default=0, choices=(0, 1, 2, 3))

    def forward(self, inputs, value, ctx):
        return [{"value": value} for _ in inputs]


class Prefers:
    """A stand-in local reward that strongly prefers one value (so the choice optimizer samples it)."""

    def __init__(self, favourite):
        self.favourite = favourite

    def score(self, name, inputs, outputs):
        return [100.0 if o["value"] == self.favourite else 0.0 for o in outputs]


def make_pipeline():
    up, pick = Upstream(), Pick()
    system = CompoundSystem([up, pick], inputs=("q",), outputs=("value",))
    rows = [{"q": f"question {i}"} for i in range(5)]
    metric = Metric("reward", lambda ex, out: REWARD[out["value"]])
    return Pipeline("gate", system, Splits(rows, rows, rows), metric), up


def make_loop(pipeline, favourite, folder, iterations=1, adapt=None, on_iteration=None):
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    settings = LoopSettings(iterations=iterations, search_size=3, optimizer={"choice": {"temperature": 0.01}})
    return OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, Prefers(favourite), settings,
                       RunFolder(folder), adapt=adapt, on_iteration=on_iteration)


@pytest.mark.parametrize("favourite, accepted", [(1, False), (2, False), (3, True)])
def test_gate_accepts_only_strict_improvements(tmp_path, favourite, accepted):
    pipeline, _ = make_pipeline()
    adapted = []
    loop = make_loop(pipeline, favourite, tmp_path, adapt=lambda config, ctx: adapted.append(config))
    config, history = loop.run()
    entry = history[0]
    assert entry.proposal == favourite and entry.accepted is accepted
    assert entry.val_after >= entry.val_before  # never lowers the validation score
    if accepted:
        assert config["pick"] == 3 and entry.val_after == pytest.approx(5 * 0.9) and len(adapted) == 1
    else:  # a rejected proposal leaves the configuration alone and triggers no LRF adaptation
        assert config["pick"] == 0 and entry.val_after == pytest.approx(2.5) and adapted == []


@pytest.mark.parametrize("favourite, accepted", [(2, False), (3, True)])
def test_the_paper_count_charges_a_validation_pass_only_when_its_proposal_is_accepted(tmp_path, favourite, accepted):
    pipeline, _ = make_pipeline()
    loop = make_loop(pipeline, favourite, tmp_path)
    loop.run()
    phase = loop.ctx.ledger.to_dict()["by_phase"]["validation"]
    # The first pass runs both components on 5 inputs (5 runs); the proposal's pass re-runs `pick` (5 x 1/2).
    assert phase["runs"] == pytest.approx(5 + 2.5)  # executed: every pass
    assert phase["paper_runs"] == pytest.approx(5 + (2.5 if accepted else 0))  # before: 7.5 either way


def test_validation_reuses_cached_upstream_outputs(tmp_path):
    pipeline, up = make_pipeline()
    make_loop(pipeline, 3, tmp_path, iterations=2).run()
    # The upstream component ran once for the 5 validation and once for the 3 search inputs;
    # validating proposals for `pick` re-ran only `pick`.
    assert up.calls == 5 + 3


def test_a_proposal_already_rejected_against_the_same_configuration_is_not_validated_again(tmp_path):
    """The gate's verdict on (configuration, candidate) is known once given: Optimas s2 on Amazon re-validated
    the decider prompt it had just rejected (36 executed runs for the same 8 -> 7)."""
    pipeline, _ = make_pipeline()
    loop = make_loop(pipeline, 2, tmp_path, iterations=3)  # value 2 loses, and is proposed every time
    config, history = loop.run()
    assert [e.proposal for e in history] == [2, 2, 2] and not any(e.accepted for e in history)
    assert history[0].val_candidate == pytest.approx(5 * 0.2)
    assert [e.val_candidate for e in history[1:]] == [None, None]
    assert all("rejected in iteration 1" in e.note for e in history[1:])
    assert loop.ctx.ledger.to_dict()["by_phase"]["validation"]["runs"] == pytest.approx(5 + 2.5)  # one pass


def test_a_rejected_proposal_is_validated_again_once_the_configuration_changed(tmp_path):
    """After an accepted update the same candidate value meets another configuration: it is validated."""
    pipeline, _ = make_pipeline()
    loop = make_loop(pipeline, 2, tmp_path, iterations=1)
    loop.run()
    loop.lrf = Prefers(3)
    loop.settings.iterations = 2
    loop.run()  # resumes: iteration 2 accepts value 3
    loop.lrf = Prefers(2)
    loop.settings.iterations = 3
    _, history = loop.run()
    assert [e.accepted for e in history] == [False, True, False]
    assert history[2].val_candidate == pytest.approx(5 * 0.2)  # validated again, against value 3


class Killed(Exception):
    pass


def kill_after_second(entry):
    if entry.iteration == 2:
        raise Killed


def test_resume_after_a_kill_continues_with_the_same_history(tmp_path):
    pipeline, _ = make_pipeline()
    _, uninterrupted = make_loop(pipeline, 3, tmp_path / "a", iterations=4).run()

    with pytest.raises(Killed):
        make_loop(pipeline, 3, tmp_path / "b", iterations=4, on_iteration=kill_after_second).run()
    seen = []
    resumed = make_loop(pipeline, 3, tmp_path / "b", iterations=4, on_iteration=lambda e: seen.append(e.iteration))
    RunFolder(tmp_path / "b").restore_accounts(resumed.ctx)
    _, history = resumed.run()
    assert seen == [3, 4]  # finished iterations are not repeated
    assert history == uninterrupted  # runs_so_far included: the cost curve goes on as if never killed


def test_a_resumed_run_counts_what_an_uninterrupted_run_counts(tmp_path):
    pipeline, _ = make_pipeline()
    uninterrupted = make_loop(pipeline, 3, tmp_path / "a", iterations=4)
    uninterrupted.run()
    with pytest.raises(Killed):
        make_loop(pipeline, 3, tmp_path / "b", iterations=4, on_iteration=kill_after_second).run()
    resumed = make_loop(pipeline, 3, tmp_path / "b", iterations=4)
    RunFolder(tmp_path / "b").restore_accounts(resumed.ctx)
    resumed.run()
    # Before the fix the resumed process counted its rebuild of the cached validation (5) and search (3)
    # trajectories again: +8 runs. Everything before the kill is counted once, the rebuild not at all.
    assert resumed.ctx.ledger.to_dict()["by_phase"]["validation"]["runs"] == \
        uninterrupted.ctx.ledger.to_dict()["by_phase"]["validation"]["runs"]
    assert resumed.ctx.ledger.equivalent_runs() == pytest.approx(uninterrupted.ctx.ledger.equivalent_runs())


class Route(Component):
    """A per-instance choice: each input may be routed to its own value."""

    def __init__(self):
        super().__init__("pick", "routed per input", ("prepared",), ("value",), kind=ConfigKind.CHOICE,
                         default=0, choices=(0, 1, 2, 3), per_instance=True)

    def forward(self, inputs, value, ctx):
        return [{"value": value} for _ in inputs]


class RoutingReward(torch.nn.Module):
    """A reward model whose favourite value lives in its weights, as a trained LRF's would."""

    def __init__(self, favourite):
        super().__init__()
        self.favourite = torch.nn.Parameter(torch.tensor(float(favourite)), requires_grad=False)

    def score(self, name, inputs, outputs):
        return [100.0 if o["value"] == int(self.favourite.item()) else 0.0 for o in outputs]


@pytest.mark.parametrize("adapted_favourite", [2, 3])
def test_stage2_cannot_lower_validation_through_the_routes(tmp_path, adapted_favourite):
    """Routes follow the LRF, so Stage 2 changes behaviour: adapted routes pass the gate or are undone."""
    up, route = Upstream(), Route()
    system = CompoundSystem([up, route], inputs=("q",), outputs=("value",))
    rows = [{"q": f"question {i}"} for i in range(5)]
    metric = Metric("reward", lambda ex, out: REWARD[out["value"]])
    pipeline = Pipeline("routes", system, Splits(rows, rows, rows), metric)
    lrf = RoutingReward(favourite=3)  # routing every input to 3 beats the default 0 (0.9 vs 0.5)

    def adapt(config, ctx):  # Stage 2 moves the reward model's favourite
        lrf.favourite.data.fill_(float(adapted_favourite))

    ctx = RunContext(ledger=RunLedger(len(system)))
    loop = OptimasLoop(pipeline, rows, rows, ctx, lrf, LoopSettings(iterations=1, search_size=3),
                       RunFolder(tmp_path), adapt=adapt)
    config, history = loop.run()
    entry = history[0]
    assert entry.accepted and config["pick"] == {"route": "lrf"}
    assert entry.val_after == pytest.approx(5 * 0.9)  # never below what the gate accepted
    if adapted_favourite == 2:  # the adapted routes would pick 2 (0.2 each): the old reward model comes back
        assert entry.details["adaptation"].startswith("reverted") and int(lrf.favourite.item()) == 3
        assert entry.details["val_after_adaptation"] == pytest.approx(5 * 0.2)
    else:
        assert entry.details["adaptation"] == "kept" and int(lrf.favourite.item()) == 3


@pytest.mark.parametrize("matched", [True, False])
def test_an_accepted_update_with_no_room_left_to_prepare_the_next_iteration(tmp_path, matched):
    """Cap 17: the opening (8 runs) and the proposal's validation pass (2.5) fit, re-running the search sample
    from the update (1.5) does not. At a matched loop's planned end the validated update stands (optimas_no_adapt
    s0 on Amazon lost a gate-accepted decider prompt there); under a cap a resume may raise, the iteration is
    left to the resume, which redoes it whole."""
    from optimas_cli.system.caps import BudgetCaps

    pipeline, _ = make_pipeline()
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    ctx.caps = BudgetCaps(max_runs=17.0, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    settings = LoopSettings(iterations=1, search_size=3, optimizer={"choice": {"temperature": 0.01}}, until_cap=matched)
    adapted = []
    loop = OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, Prefers(3), settings,
                       RunFolder(tmp_path), adapt=lambda config, ctx: adapted.append(config))
    config, history = loop.run()
    assert adapted == [] and ctx.ledger.equivalent_runs() <= 17.0
    if matched:
        assert config["pick"] == 3 and len(history) == 1 and history[0].accepted
        assert "no room" in history[0].note and ctx.caps.stopped is None  # the planned end, not a stop
    else:
        assert config["pick"] == 0 and history == [] and ctx.caps.stopped is not None
