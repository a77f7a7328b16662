"""Algorithm 1: the strict validation gate, cached validation, rejected proposals, resume after a kill."""
from __future__ import annotations

import pytest
import torch

from optimas_cli.lrf.stage import DrawnVersions
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


class CountingStage2:
    """Stage 2's interface (lrf/stage.Stage2) without a reward model: records what it adapts and executes each
    adapted component `executions` times per fresh input, under the adaptation phase. `then(config)` runs after."""

    def __init__(self, system, fresh_size=2, executions=0, then=None):
        self.versions, self.fresh_size, self.executions, self.then = DrawnVersions(system), fresh_size, executions, then
        self.stale, self.calls, self.k = self.versions.stale, [], len(system)

    def __call__(self, config, ctx, names, n_inputs, versions):
        for name in names:
            ctx.ledger.record(name, n_inputs * self.executions, ctx.phase)
        self.calls.append((list(names), n_inputs))
        self.versions.mark(names, versions)
        if self.then is not None:
            self.then(config)

    def expected_runs(self, config, ctx, names, n_inputs):
        return len(names) * n_inputs * self.executions / self.k

    def scores_changed_by(self, names):
        return None  # as with a trained backbone: every route may pick anew


def make_loop(pipeline, favourite, folder, iterations=1, adapt=None, on_iteration=None, adaptation="paper"):
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    settings = LoopSettings(iterations=iterations, search_size=3, optimizer={"choice": {"temperature": 0.01}},
                            adaptation=adaptation)
    return OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, Prefers(favourite), settings,
                       RunFolder(folder), adapt=adapt, on_iteration=on_iteration)


@pytest.mark.parametrize("favourite, accepted", [(1, False), (2, False), (3, True)])
def test_gate_accepts_only_strict_improvements(tmp_path, favourite, accepted):
    pipeline, _ = make_pipeline()
    adapted = []
    stage2 = CountingStage2(pipeline.system, then=adapted.append)
    loop = make_loop(pipeline, favourite, tmp_path, iterations=2, adapt=stage2)
    config, history = loop.run()
    entry = history[0]
    assert entry.proposal == favourite and entry.accepted is accepted
    assert entry.val_after >= entry.val_before  # never lowers the validation score
    if accepted:  # the paper's Stage 2 adapts before the next iteration optimizes
        assert config["pick"] == 3 and entry.val_after == pytest.approx(5 * 0.9) and len(adapted) == 1
        assert history[1].details["adaptation"]["components"] == ["pick"]
    else:  # a rejected proposal leaves the configuration alone and triggers no LRF adaptation
        assert config["pick"] == 0 and entry.val_after == pytest.approx(2.5) and adapted == []
        assert "rejected by the gate" in entry.note


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
    # Stage 2 moves the reward model's favourite
    stage2 = CountingStage2(system, then=lambda config: lrf.favourite.data.fill_(float(adapted_favourite)))

    ctx = RunContext(ledger=RunLedger(len(system)))
    loop = OptimasLoop(pipeline, rows, rows, ctx, lrf, LoopSettings(iterations=2, search_size=3, adaptation="paper"),
                       RunFolder(tmp_path), adapt=stage2)
    config, history = loop.run()
    assert history[0].accepted and config["pick"] == {"route": "lrf"}
    adaptation = history[1].details["adaptation"]  # run before iteration 2 optimizes
    assert history[1].val_after >= 5 * 0.9  # never below what the gate accepted
    if adapted_favourite == 2:  # the adapted routes would pick 2 (0.2 each): the old reward model comes back
        assert adaptation["routes"].startswith("reverted") and int(lrf.favourite.item()) == 3
        assert adaptation["val_after_adaptation"] == pytest.approx(5 * 0.2)
    else:
        assert adaptation["routes"] == "kept" and int(lrf.favourite.item()) == 3


class Choice(Component):
    """A global choice reading `source` and writing `target`: the value itself."""

    def __init__(self, name, source, target):
        super().__init__(name, f"choose {target}", (source,), (target,), kind=ConfigKind.CHOICE, default=0,
                         choices=(0, 1, 2, 3))
        self.target = target

    def forward(self, inputs, value, ctx):
        return [{self.target: value} for _ in inputs]


class PrefersThree:
    def score(self, name, inputs, outputs):
        return [100.0 if 3 in o.values() else 0.0 for o in outputs]


def branched(tmp_path, adaptation, iterations=4, cap=None, stage2=None, kill_after=None):
    """first -> second in a chain, `side` on a parallel branch; every component's best value is 3.
    Round robin picks them in topological order: first, side, second, first, ..."""
    system = CompoundSystem([Choice("first", "q", "a"), Choice("second", "a", "b"), Choice("side", "q", "c")],
                            inputs=("q",), outputs=("a", "b", "c"))
    rows = [{"q": f"question {i}"} for i in range(5)]
    metric = Metric("reward", lambda ex, out: float((out["a"] == 3) + (out["b"] == 3) + (out["c"] == 3)))
    pipeline = Pipeline("branched", system, Splits(rows, rows, rows), metric)
    ctx = RunContext(ledger=RunLedger(len(system)))
    if cap is not None:
        from optimas_cli.system.caps import BudgetCaps
        ctx.caps = BudgetCaps(max_runs=cap, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    stage2 = stage2 or CountingStage2(system, executions=3)
    settings = LoopSettings(iterations=iterations, search_size=3, scheduler="round_robin", adaptation=adaptation,
                            optimizer={"choice": {"temperature": 0.01}})
    on_iteration = None
    if kill_after is not None:
        def on_iteration(entry):
            if entry.iteration == kill_after:
                raise Killed
    loop = OptimasLoop(pipeline, rows, rows, ctx, PrefersThree(), settings, RunFolder(tmp_path), adapt=stage2,
                       carry=None, on_iteration=on_iteration)
    assert system.order == ["first", "side", "second"]
    return loop, stage2


def test_lazy_adaptation_refreshes_a_component_only_when_next_picked_and_its_context_changed(tmp_path):
    """first's update (iteration 1) changes second's inputs: second is refreshed when it is picked (iteration 3),
    not before; side (a parallel branch) never; first once second, downstream of it, changed (iteration 4), not
    for its own update. The paper adapts all three after every accepted update."""
    loop, stage2 = branched(tmp_path / "lazy", "lazy", iterations=4)
    _, history = loop.run()
    assert [e.component for e in history] == ["first", "side", "second", "first"]
    assert [e.accepted for e in history] == [True, True, True, False]
    assert stage2.calls == [(["second"], 2), (["first"], 2)]
    assert [list(e.details.get("adaptation", {}).get("components", [])) for e in history] == [[], [], ["second"], ["first"]]
    lazy_runs = loop.ctx.ledger.equivalent_runs("adaptation")
    assert history[2].details["adaptation"]["runs"] == pytest.approx(lazy_runs / 2) == pytest.approx(2 * 3 / 3)

    paper, paper_stage2 = branched(tmp_path / "paper", "paper", iterations=4)
    paper.run()
    every = ["first", "side", "second"]
    assert paper_stage2.calls == [(every, 2)] * 3  # after each accepted update, every component
    paper_runs = paper.ctx.ledger.equivalent_runs("adaptation")
    assert paper_runs == pytest.approx(3 * 3 * 2 * 3 / 3) and lazy_runs == pytest.approx(4.0)


def test_a_lazy_refresh_is_sized_to_leave_room_for_the_iteration_it_prepares(tmp_path):
    """Under a cap, the refresh takes the fresh inputs that fit after the iteration's own search and validation."""
    free, _ = branched(tmp_path / "free", "lazy", iterations=3)
    free.run()
    # iteration 3 refreshes second on 2 fresh inputs, 1 run each: a cap 1 run lower leaves room for one
    cap = free.ctx.ledger.equivalent_runs() - 1.0
    loop, stage2 = branched(tmp_path / "capped", "lazy", iterations=3, cap=cap)
    _, history = loop.run()
    assert stage2.calls == [(["second"], 1)] and loop.ctx.ledger.equivalent_runs() <= cap + 1e-9
    assert history[2].details["adaptation"]["fresh_inputs"] == 1 and history[2].accepted
    assert "1 of 2 fresh inputs" in history[2].details["adaptation"]["note"]


@pytest.mark.parametrize("matched", [True, False])
def test_an_accepted_update_is_kept_when_the_adaptation_after_it_does_not_fit(tmp_path, matched):
    """Cap 17: the opening (8 runs) and the proposal's validation pass (2.5) fit; iteration 2's adaptation (10 runs)
    does not. The validated update stands, the history says why the adaptation did not run, the cap holds."""
    from optimas_cli.system.caps import BudgetCaps

    pipeline, _ = make_pipeline()
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    ctx.caps = BudgetCaps(max_runs=17.0, spent=lambda: {"max_runs": ctx.ledger.equivalent_runs()})
    settings = LoopSettings(iterations=3, search_size=3, optimizer={"choice": {"temperature": 0.01}},
                            until_cap=matched, adaptation="paper")
    stage2 = CountingStage2(pipeline.system, fresh_size=2, executions=10)
    loop = OptimasLoop(pipeline, pipeline.splits.train, pipeline.splits.val, ctx, Prefers(3), settings,
                       RunFolder(tmp_path), adapt=stage2)
    config, history = loop.run()
    assert stage2.calls == [] and ctx.ledger.equivalent_runs() <= 17.0
    assert config["pick"] == 3 and len(history) == 1 and history[0].accepted
    assert history[0].details["adaptation"]["note"].startswith("skipped: the loop stopped at its cap")
    assert (ctx.caps.stopped is None) is matched  # a matched loop's planned end is not a stop
    assert RunFolder(tmp_path).read_json("loop_state.json")["config"]["pick"] == 3  # checkpointed: a resume keeps it


@pytest.mark.parametrize("adaptation", ["lazy", "paper"])
def test_a_run_cap_is_never_crossed_and_every_validation_pass_is_in_the_history(tmp_path, adaptation):
    free, _ = branched(tmp_path / "free", adaptation, iterations=6)
    free.run()
    total = free.ctx.ledger.equivalent_runs()
    for cap in (total / 2, total * 3 / 4, total - 1):
        loop, _ = branched(tmp_path / f"cap{cap}", adaptation, iterations=6, cap=cap)
        _, history = loop.run()
        assert loop.ctx.ledger.equivalent_runs() <= cap + 1e-9
        passes = loop.ctx.ledger.executions["validation"]["first"] + loop.ctx.ledger.executions["validation"]["side"]
        # the opening pass ran each on 5 inputs; every later pass of first or side is an entry with its verdict
        validated = [e for e in history if e.val_candidate is not None and e.component != "second"]
        assert passes == 2 * 5 + 5 * len(validated) and all(e.gate is not None for e in validated)


@pytest.mark.parametrize("adaptation", ["lazy", "paper"])
def test_a_killed_run_resumes_to_the_uninterrupted_one_with_its_adaptation_state(tmp_path, adaptation):
    loop, stage2 = branched(tmp_path / "a", adaptation, iterations=5)
    _, uninterrupted = loop.run()
    with pytest.raises(Killed):
        killed, stage2_b = branched(tmp_path / "b", adaptation, iterations=5, kill_after=1)
        killed.carry = Carry(stage2_b)
        killed.run()
    resumed, stage2_c = branched(tmp_path / "b", adaptation, iterations=5)
    resumed.carry = Carry(stage2_c)
    RunFolder(tmp_path / "b").restore_accounts(resumed.ctx)
    _, history = resumed.run()
    assert history == uninterrupted and stage2_b.calls + stage2_c.calls == stage2.calls
    assert {p: dict(c) for p, c in resumed.ctx.ledger.executions.items()} == \
        {p: dict(c) for p, c in loop.ctx.ledger.executions.items()}


class Carry:
    """The drawn versions checkpointed with the loop, as Stage2.state() does."""

    def __init__(self, stage2):
        self.stage2 = stage2

    def state(self):
        return {"drawn": self.stage2.versions.drawn}

    def restore(self, state):
        self.stage2.versions.drawn = state["drawn"]


class HeadsOnlyStage2(CountingStage2):
    """As Stage2 on a frozen backbone: an adaptation changes only the adapted components' local rewards."""

    def scores_changed_by(self, names):
        return list(names)


@pytest.mark.parametrize("stage2_kind, revalidated", [(CountingStage2, True), (HeadsOnlyStage2, False)])
def test_an_adaptation_re_validates_only_the_routes_whose_reward_it_can_change(tmp_path, stage2_kind, revalidated):
    """first, then the router after it, are accepted; iteration 3 refreshes first (the router downstream of it
    changed). Only when that refresh can move the router's reward (a trained backbone) is the router re-validated."""
    route = Route()
    route.inputs = ("a",)
    system = CompoundSystem([Choice("first", "q", "a"), route], inputs=("q",), outputs=("a", "value"))
    rows = [{"q": f"question {i}"} for i in range(5)]
    metric = Metric("reward", lambda ex, out: float((out["a"] == 3) + (out["value"] == 3)))
    pipeline = Pipeline("routed", system, Splits(rows, rows, rows), metric)
    stage2 = stage2_kind(system, executions=3)
    ctx = RunContext(ledger=RunLedger(len(system)))
    settings = LoopSettings(iterations=3, search_size=3, scheduler="round_robin", adaptation="lazy",
                            optimizer={"choice": {"temperature": 0.01}})
    loop = OptimasLoop(pipeline, rows, rows, ctx, PrefersThree(), settings, RunFolder(tmp_path), adapt=stage2)
    config, history = loop.run()
    assert [e.accepted for e in history[:2]] == [True, True] and config["pick"] == {"route": "lrf"}
    assert [c for c, _ in stage2.calls] == [["pick"], ["first"]]
    assert ("routes" in history[2].details["adaptation"]) is revalidated
