"""Preference collection: exact pairs from small systems with known downstream rewards."""
from __future__ import annotations

import dataclasses

import pytest
from fakes import ScriptedLM

from optimas_cli.errors import UserError
from optimas_cli.lm.types import LMResponse
from optimas_cli.lrf.collect import (
    COLLECTION_PHASE,
    ExecutionTally,
    balanced_draws,
    collect_all,
    collect_pairs,
    expected_collection,
)
from optimas_cli.system import Component, CompoundSystem, ConfigKind, RunContext, RunLedger


class Prep(Component):
    """Deterministic upstream step with nothing to optimize."""

    def __init__(self):
        super().__init__("prep", "normalizes the query", ("query",), ("clean",))

    def forward(self, inputs, value, ctx):
        return [{"clean": x["query"].strip().lower()} for x in inputs]


class Picker(Component):
    """A global choice: its output is the chosen value itself."""

    def __init__(self, choices=(1, 2, 3), when=None):
        super().__init__("picker", "picks how many passages to use", ("clean",), ("k",),
                         kind=ConfigKind.CHOICE, default=choices[0], choices=choices, when=when)

    def forward(self, inputs, value, ctx):
        return [{"k": value} for _ in inputs]


class Reader(Component):
    """Deterministic downstream step (NONE): passes the choice on."""

    def __init__(self):
        super().__init__("reader", "reads the passages", ("k",), ("used",))

    def forward(self, inputs, value, ctx):
        return [{"used": x["k"]} for x in inputs]


def lookup_reward(example, output):
    return example["reward"][output["used"]] if output["used"] is not None else 0.0


def choice_system():
    return CompoundSystem([Prep(), Picker(), Reader()], inputs=("query",), outputs=("used",))


def ctx_for(system, lm=None):
    return RunContext(ledger=RunLedger(len(system)), lm=lm, phase=COLLECTION_PHASE)


EXAMPLES = [
    {"query": " Q1 ", "reward": {1: 0.2, 2: 0.9, 3: 0.5}},  # the best value is in the middle
    {"query": "Q2", "reward": {1: 1.0, 2: 0.0, 3: 0.0}},  # 2 and 3 tie: no pair between them
]


def as_tuples(pairs):
    return sorted((p.context["clean"], p.chosen["k"], p.rejected["k"], p.chosen_score, p.rejected_score) for p in pairs)


def test_choice_component_gives_every_ordered_pair_with_the_better_value_chosen():
    system = choice_system()
    ctx = ctx_for(system)
    stats = {}
    pairs = collect_pairs(system, system.default_config(), "picker", EXAMPLES, ctx, lookup_reward, stats=stats)
    assert as_tuples(pairs) == sorted([
        ("q1", 2, 1, 0.9, 0.2), ("q1", 3, 1, 0.5, 0.2), ("q1", 2, 3, 0.9, 0.5),
        ("q2", 1, 2, 1.0, 0.0), ("q2", 1, 3, 1.0, 0.0),
    ])
    assert all(p.component == "picker" and p.context == {"clean": p.context["clean"]} for p in pairs)
    assert {(p.meta["chosen_value"], p.meta["rejected_value"]) for p in pairs} >= {(2, 1), (1, 3)}
    assert all(p.gap > 0 for p in pairs)
    assert stats == {"examples": 2, "candidates": 6, "pairs": 5, "near_ties": 1, "identical_outputs": 0, "mc_repeats": 1,
                     "values": 3, "values_drawn": 3}
    # Ledger: prep once per example; picker once per value per example; reader once per candidate.
    # Nothing downstream is stochastic, so no Monte Carlo repeats were paid for.
    executions = ctx.ledger.executions[COLLECTION_PHASE]
    assert executions == {"prep": 2, "picker": 6, "reader": 6}
    assert ctx.ledger.equivalent_runs(COLLECTION_PHASE) == pytest.approx(14 / 3)
    assert "optimize" not in ctx.ledger.executions  # the collection phase is set by collect_pairs


def test_epsilon_drops_only_pairs_whose_mean_rewards_are_that_close():
    system = choice_system()
    examples = [{"query": "q", "reward": {1: 0.50, 2: 0.55, 3: 0.90}}]
    tight = collect_pairs(system, system.default_config(), "picker", examples, ctx_for(system), lookup_reward, epsilon=0.0)
    loose = collect_pairs(system, system.default_config(), "picker", examples, ctx_for(system), lookup_reward, epsilon=0.1)
    assert as_tuples(tight) == sorted([("q", 2, 1, 0.55, 0.5), ("q", 3, 1, 0.9, 0.5), ("q", 3, 2, 0.9, 0.55)])
    assert as_tuples(loose) == sorted([("q", 3, 1, 0.9, 0.5), ("q", 3, 2, 0.9, 0.55)])
    exact = collect_pairs(system, system.default_config(), "picker", examples, ctx_for(system), lookup_reward, epsilon=0.4)
    assert as_tuples(exact) == []  # 0.9 - 0.5 = 0.4 is not MORE than epsilon


def test_examples_where_the_component_does_not_run_give_no_pairs():
    picker = Picker(when=lambda x: x["clean"] != "skip me")
    system = CompoundSystem([Prep(), picker, Reader()], inputs=("query",), outputs=("used",))
    examples = [EXAMPLES[0], {"query": "skip me", "reward": {1: 0.0, 2: 1.0, 3: 0.5}}]
    ctx = ctx_for(system)
    pairs = collect_pairs(system, system.default_config(), "picker", examples, ctx, lookup_reward)
    assert {p.context["clean"] for p in pairs} == {"q1"}
    assert ctx.ledger.executions[COLLECTION_PHASE]["picker"] == 3


def test_enumerate_runs_every_value_whatever_num_candidates_says():
    system = choice_system()
    ctx = ctx_for(system)
    pairs = collect_pairs(system, system.default_config(), "picker", EXAMPLES, ctx, lookup_reward,
                          num_candidates=2, choices="enumerate")
    assert len(pairs) == 5 and ctx.ledger.executions[COLLECTION_PHASE]["picker"] == 6


def test_balanced_draws_give_each_input_distinct_values_and_every_value_equally_often():
    draws = balanced_draws(8, 12, 3, "0:0:router")
    assert all(len(d) == len(set(d)) == 3 for d in draws)
    counts = [sum(j in d for d in draws) for j in range(8)]
    assert sum(counts) == 36 and max(counts) - min(counts) <= 1  # 36 draws over 8 values: 4 or 5 each
    assert len({tuple(d) for d in draws}) > 4  # values meet in varied sets, not the same few blocks
    assert balanced_draws(8, 12, 3, "0:0:router") == draws
    assert balanced_draws(8, 12, 3, "1:0:router") != draws
    assert balanced_draws(3, 2, 5, "s") == [[0, 1, 2], [0, 1, 2]]  # fewer values than asked: all of them


def many_valued_system(n_values):
    picker = Picker(choices=tuple(range(1, n_values + 1)))
    return CompoundSystem([Prep(), picker, Reader()], inputs=("query",), outputs=("used",))


def test_a_sampled_choice_runs_num_candidates_values_per_input_and_covers_every_value():
    system = many_valued_system(6)
    examples = [{"query": f"q{i}", "reward": {v: ((v * 7 + i) % 6) / 6 for v in range(1, 7)}} for i in range(9)]
    runs = []
    for _ in range(2):
        ctx, stats = ctx_for(system), {}
        pairs = collect_pairs(system, system.default_config(), "picker", examples, ctx, lookup_reward,
                              num_candidates=2, stats=stats)
        runs.append(as_tuples(pairs))
        assert ctx.ledger.executions[COLLECTION_PHASE]["picker"] == 18  # 9 inputs x 2 values, not x 6
        assert ctx.ledger.executions[COLLECTION_PHASE]["reader"] == 18
        assert stats["candidates"] == 18 and len(pairs) == 9  # one pair per input (no ties here)
        assert stats["values"] == stats["values_drawn"] == 6
        per_input = {}
        for p in pairs:
            per_input.setdefault(p.context["clean"], set()).update({p.chosen["k"], p.rejected["k"]})
        assert all(len(v) == 2 for v in per_input.values())
        assert set().union(*per_input.values()) == set(range(1, 7))
    assert runs[0] == runs[1]  # seeded
    ctx = ctx_for(system).replace(sample_index=1 << 16)  # Stage 2's next collection draws other values
    assert as_tuples(collect_pairs(system, system.default_config(), "picker", examples, ctx, lookup_reward,
                                   num_candidates=2)) != runs[0]


def test_too_few_draws_to_cover_a_choice_warn_and_say_how_many_values_stay_unseen(caplog):
    system = many_valued_system(6)
    examples = [{"query": f"q{i}", "reward": {v: v / 6 for v in range(1, 7)}} for i in range(2)]
    stats = {}
    collect_pairs(system, system.default_config(), "picker", examples, ctx_for(system), lookup_reward,
                  num_candidates=2, stats=stats)
    assert stats["values_drawn"] == 4 and "leave 2 of its 6 values undrawn" in caplog.text


def test_the_plan_counts_sampled_choices_as_drawn_and_enumerated_ones_in_full():
    system = many_valued_system(6)
    for mode, picker_runs in (("sample", 2 * 5), ("enumerate", 6 * 5)):
        tally = ExecutionTally()
        expected_collection(system, system.default_config(), 5, {"num_candidates": 2, "choices": mode}, tally, 0.0)
        ctx = ctx_for(system)
        collect_pairs(system, system.default_config(), "picker",
                      [{"query": f"q{i}", "reward": {v: v / 6 for v in range(1, 7)}} for i in range(5)],
                      ctx, lookup_reward, num_candidates=2, choices=mode)
        assert sum(ctx.ledger.executions[COLLECTION_PHASE].values()) == tally.executions == 5 + 2 * picker_runs


def test_an_unknown_choice_mode_is_a_user_error():
    system = choice_system()
    with pytest.raises(UserError, match="lrf.collect.choices"):
        collect_pairs(system, system.default_config(), "picker", EXAMPLES, ctx_for(system), lookup_reward,
                      choices="all")


# -- LM components: sampled candidates, stochastic downstream, Monte Carlo repeats -------------------

class Writer(Component):
    def __init__(self):
        super().__init__("writer", "writes a city", ("clean",), ("city",), kind=ConfigKind.PROMPT, default="Name a city.")

    def forward(self, inputs, value, ctx):
        texts = ctx.complete(self.name, [[{"role": "user", "content": f"{value} {x['clean']}"}] for x in inputs])
        return [{"city": t} for t in texts]


class Checker(Component):
    """A stochastic downstream LM step: says ok or fail about the city."""

    def __init__(self):
        super().__init__("checker", "checks the city", ("city",), ("verdict",), kind=ConfigKind.PROMPT, default="Check:")

    def forward(self, inputs, value, ctx):
        texts = ctx.complete(self.name, [[{"role": "user", "content": f"{value} {x['city']}"}] for x in inputs])
        return [{"verdict": t} for t in texts]


# writer samples by sample_index: paris, rome, paris (a duplicate), lyon
WRITER_SAMPLES = ["paris", "rome", "paris", "lyon"]
# checker's verdict per (city, Monte Carlo repeat): expected rewards paris 1.0, rome 0.5, lyon 0.0
CHECKER = {("paris", 0): "ok", ("paris", 1): "ok", ("rome", 0): "ok", ("rome", 1): "fail",
           ("lyon", 0): "fail", ("lyon", 1): "fail"}


class CountingLM(ScriptedLM):
    """Decodes like a real LM: at temperature 0 (its default, as in every conf/lm config) the sample
    index and seed change nothing, so a scripted answer may depend on them only when the call samples."""

    temperature = 0.0

    def __init__(self, answer):
        super().__init__(answer)
        self.calls: list[tuple[str, int]] = []

    def complete(self, requests, component="-", phase="-"):
        self.calls.append((component, len(requests)))
        out = []
        for req in requests:
            self.requests.append((component, req))
            temperature = self.temperature if req.temperature is None else req.temperature
            seen = req if temperature > 0 else dataclasses.replace(req, sample_index=0, seed=None)
            out.append(LMResponse(texts=[self.answer(seen) for _ in range(req.n)]))
        return out


def lm_answer(req):
    text = req.messages[-1]["content"]
    if text.startswith("Check:"):
        return CHECKER[(text.split()[-1], req.sample_index)]
    return WRITER_SAMPLES[req.sample_index]


def lm_system():
    return CompoundSystem([Prep(), Writer(), Checker()], inputs=("query",), outputs=("verdict",))


def ok_reward(example, output):
    return 1.0 if output["verdict"] == "ok" else 0.0


def test_sampled_downstream_is_scored_by_the_mean_of_distinct_monte_carlo_repeats():
    system, lm = lm_system(), CountingLM(lm_answer)
    ctx = ctx_for(system, lm)
    examples = [{"query": "a"}, {"query": "b"}, {"query": "c"}]
    stats = {}
    pairs = collect_pairs(system, system.default_config(), "writer", examples, ctx, ok_reward,
                          num_candidates=4, mc_repeats=2, temperature=0.9, diverse=True,
                          downstream_temperature=0.7, stats=stats)
    expected = {("paris", "rome", 1.0, 0.5), ("paris", "lyon", 1.0, 0.0), ("rome", "lyon", 0.5, 0.0)}
    got = [(p.chosen["city"], p.rejected["city"], p.chosen_score, p.rejected_score) for p in pairs]
    assert sorted(got) == sorted(e for e in expected for _ in examples)
    writer_requests = [r for c, r in lm.requests if c == "writer"]
    assert {r.temperature for r in writer_requests} == {0.9}
    assert sorted({r.sample_index for r in writer_requests}) == [0, 1, 2, 3]
    checker_requests = [r for c, r in lm.requests if c == "checker"]
    assert {r.temperature for r in checker_requests} == {0.7}  # the explicit downstream decoding
    assert sorted({r.sample_index for r in checker_requests}) == [0, 1]  # one seeded stream per repeat
    # Batched: one LM call per writer sample over all examples, and one per repeat over every (example, distinct
    # candidate): the candidates' downstream runs share a batch.
    assert lm.calls == [("writer", 3)] * 4 + [("checker", 9)] * 2
    executions = ctx.ledger.executions[COLLECTION_PHASE]
    assert executions == {"prep": 3, "writer": 12, "checker": 18}
    assert stats["mc_repeats"] == 2


def test_greedy_downstream_runs_once_and_is_charged_once():
    """At the run's temperature 0 a second downstream run could only replay the first: not run, not charged."""
    system, lm = lm_system(), CountingLM(lm_answer)
    ctx = ctx_for(system, lm)
    stats = {}
    pairs = collect_pairs(system, system.default_config(), "writer", [{"query": "a"}, {"query": "b"}], ctx,
                          ok_reward, num_candidates=4, mc_repeats=2, temperature=0.9, stats=stats)
    # greedy verdicts (sample 0): paris ok, rome ok, lyon fail
    got = sorted((p.chosen["city"], p.rejected["city"], p.chosen_score, p.rejected_score) for p in pairs)
    assert got == sorted([("paris", "lyon", 1.0, 0.0), ("rome", "lyon", 1.0, 0.0)] * 2)
    checker_requests = [r for c, r in lm.requests if c == "checker"]
    assert {r.temperature for r in checker_requests} == {None}  # the run's own decoding
    assert ctx.ledger.executions[COLLECTION_PHASE]["checker"] == 6  # 3 distinct candidates x 2 inputs, once
    assert lm.calls.count(("checker", 6)) == 1
    assert stats["mc_repeats"] == 1


def test_an_explicit_zero_downstream_temperature_is_deterministic_even_when_the_lm_samples():
    system, lm = lm_system(), CountingLM(lm_answer)
    lm.temperature = 0.7  # an LM config that samples by default
    ctx = ctx_for(system, lm)
    collect_pairs(system, system.default_config(), "writer", [{"query": "a"}], ctx, ok_reward,
                  num_candidates=4, mc_repeats=3, temperature=0.9, downstream_temperature=0.0)
    assert {r.temperature for c, r in lm.requests if c == "checker"} == {0.0}
    assert ctx.ledger.executions[COLLECTION_PHASE]["checker"] == 3
    with pytest.raises(UserError, match="downstream_temperature"):
        collect_pairs(system, system.default_config(), "writer", [{"query": "a"}], ctx, ok_reward,
                      downstream_temperature=-1.0)


def test_greedy_candidates_are_drawn_once_not_once_per_candidate():
    system, lm = lm_system(), CountingLM(lm_answer)
    ctx = ctx_for(system, lm)
    pairs = collect_pairs(system, system.default_config(), "writer", [{"query": "a"}], ctx, ok_reward,
                          num_candidates=4, temperature=0.0)
    assert pairs == []  # one candidate: nothing to compare
    assert ctx.ledger.executions[COLLECTION_PHASE]["writer"] == 1


def test_without_diversity_duplicates_are_scored_but_never_paired_with_themselves():
    system, lm = lm_system(), CountingLM(lm_answer)
    stats = {}
    pairs = collect_pairs(system, system.default_config(), "writer", [{"query": "a"}], ctx_for(system, lm), ok_reward,
                          num_candidates=4, mc_repeats=2, diverse=False, stats=stats,
                          downstream_temperature=0.7)
    got = sorted((p.chosen["city"], p.rejected["city"]) for p in pairs)
    # candidates paris, rome, paris, lyon: both parises beat rome and lyon; the two parises are not a pair
    assert got == sorted([("paris", "rome"), ("paris", "lyon"), ("rome", "lyon"), ("paris", "rome"), ("paris", "lyon")])
    assert stats["identical_outputs"] == 1 and stats["candidates"] == 4


class RuleChecker(Component):
    """A deterministic downstream step (NONE): repeating it could not change the reward."""

    def __init__(self):
        super().__init__("checker", "checks the city", ("city",), ("verdict",))

    def forward(self, inputs, value, ctx):
        return [{"verdict": "ok" if x["city"] == "paris" else "fail"} for x in inputs]


def test_repeats_drop_to_one_when_nothing_downstream_is_stochastic():
    system = CompoundSystem([Prep(), Writer(), RuleChecker()], inputs=("query",), outputs=("verdict",))
    lm = CountingLM(lm_answer)
    ctx = ctx_for(system, lm)
    pairs = collect_pairs(system, system.default_config(), "writer", [{"query": "a"}, {"query": "b"}], ctx,
                          ok_reward, num_candidates=4, mc_repeats=5)
    assert sorted((p.chosen["city"], p.rejected["city"]) for p in pairs) == sorted([("paris", "lyon"), ("paris", "rome")] * 2)
    # 3 distinct candidates x 2 examples, each checked once despite mc_repeats=5
    assert ctx.ledger.executions[COLLECTION_PHASE]["checker"] == 6


class SideNote(Component):
    """A stochastic component parallel to the writer (not downstream of it): must be run once, then held fixed."""

    def __init__(self):
        super().__init__("side", "adds a note", ("clean",), ("note",), kind=ConfigKind.PROMPT, default="Note:")

    def forward(self, inputs, value, ctx):
        return [{"note": f"note{ctx.sample_index}"} for _ in inputs]


class Joiner(Component):
    def __init__(self):
        super().__init__("joiner", "joins", ("city", "note"), ("final",))

    def forward(self, inputs, value, ctx):
        return [{"final": f"{x['city']}|{x['note']}"} for x in inputs]


def test_components_parallel_to_the_collected_one_run_once_and_stay_fixed():
    system = CompoundSystem([Prep(), Writer(), SideNote(), Joiner()], inputs=("query",), outputs=("final",))
    lm = CountingLM(lambda req: WRITER_SAMPLES[req.sample_index])
    ctx = ctx_for(system, lm)
    finals = []

    def reward(example, output):
        finals.append(output["final"])
        return {"paris": 1.0, "rome": 0.5, "lyon": 0.0}[output["final"].split("|")[0]]

    pairs = collect_pairs(system, system.default_config(), "writer", [{"query": "a"}], ctx, reward,
                          num_candidates=4, mc_repeats=3)
    assert len(pairs) == 3
    assert {f.split("|")[1] for f in finals} == {"note0"}  # the side note never re-sampled
    assert ctx.ledger.executions[COLLECTION_PHASE]["side"] == 1


def test_none_components_have_nothing_to_collect_and_unknown_names_are_user_errors():
    system = choice_system()
    assert collect_pairs(system, system.default_config(), "reader", EXAMPLES, ctx_for(system), lookup_reward) == []
    with pytest.raises(UserError, match="no component named 'nope'"):
        collect_pairs(system, system.default_config(), "nope", EXAMPLES, ctx_for(system), lookup_reward)


def test_collect_all_visits_every_optimizable_component_and_reports_each_as_it_finishes():
    system = CompoundSystem([Prep(), Picker(), Reader()], inputs=("query",), outputs=("used",))
    seen = []
    stats = {}
    result = collect_all(system, system.default_config(), EXAMPLES, ctx_for(system), lookup_reward,
                         on_pairs=lambda name, pairs: seen.append((name, len(pairs))), stats=stats, epsilon=0.0)
    assert list(result) == ["picker"] and seen == [("picker", 5)]
    assert stats["picker"]["pairs"] == 5
    assert collect_all(system, system.default_config(), EXAMPLES, ctx_for(system), lookup_reward, components=[]) == {}
    with pytest.raises(UserError):
        collect_all(system, system.default_config(), EXAMPLES, ctx_for(system), lookup_reward, components=["ghost"])


def test_through_the_real_lm_client_only_what_is_generated_is_charged(tiny_lm):
    """The real client and call cache: greedy downstream runs once per candidate; sampled repeats are
    distinct seeded generations (their own cache rows), and each is charged."""
    examples = [{"query": "a"}, {"query": "b"}]
    charged, generated = {}, {}
    for downstream in (None, 1.0):
        system, stats = lm_system(), {}
        ctx = ctx_for(system, tiny_lm)
        usage = tiny_lm.usage.components["checker"]
        calls, misses = usage.calls, usage.calls - usage.cache_hits
        collect_pairs(system, system.default_config(), "writer", examples, ctx, ok_reward, num_candidates=3,
                      mc_repeats=2, temperature=1.0, downstream_temperature=downstream, stats=stats)
        charged[downstream] = ctx.ledger.executions[COLLECTION_PHASE]["checker"]
        generated[downstream] = (usage.calls - usage.cache_hits) - misses
        assert usage.calls - calls == charged[downstream]  # one LM completion per charged run
        assert charged[downstream] == stats["candidates"] * stats["mc_repeats"]
    assert charged[1.0] == 2 * charged[None]  # the same candidates (cached), two sampled repeats each
    assert generated[1.0] > generated[None]  # the repeats were new generations, not replays
