"""Stage 1 in a run folder: pairs split by input, Table 4's alignment on test pairs only, pair counts."""
from __future__ import annotations

import pytest
from fakes import ScriptedLM
from test_lrf_tiny_backbone import build_tiny_bert

from optimas_cli.lrf.metrics import pairwise_accuracy
from optimas_cli.lrf.pairs import PreferencePair
from optimas_cli.lrf.stage import REPORT_FILE, split_pairs, train_initial_lrf
from optimas_cli.lrf.train import TrainConfig
from optimas_cli.system import Component, CompoundSystem, ConfigKind, Metric, Pipeline, RunContext, RunLedger
from optimas_cli.system.pipeline import Splits
from optimas_cli.system.run_folder import RunFolder


class Writer(Component):
    def __init__(self):
        super().__init__("gen", "writes the answer", ("question",), ("answer",), kind=ConfigKind.PROMPT, default="")


class Picker(Component):
    def __init__(self):
        super().__init__("picker", "picks k", ("question",), ("k",), kind=ConfigKind.CHOICE, default=1, choices=(1, 2))


def pipeline() -> Pipeline:
    system = CompoundSystem([Writer(), Picker()], inputs=("question",), outputs=("answer", "k"))
    return Pipeline("stage_test", system, Splits([], [], []), Metric("reward", lambda ex, out: 0.0))


def gen_pairs() -> list[PreferencePair]:
    """30 inputs x 2 pairs: answers with 'red' beat answers with 'blue'."""
    return [PreferencePair("gen", {"question": f"alpha {i}"}, {"answer": f"red beta {i} {j}"},
                           {"answer": f"blue beta {i} {j}"}, 1.0, 0.0) for i in range(30) for j in range(2)]


@pytest.fixture(scope="module")
def lrf_cfg(tmp_path_factory):
    return {"backbone": build_tiny_bert(tmp_path_factory.mktemp("bert")), "device": "cpu", "max_length": 48,
            "min_steps": 0, "min_test_pairs": 20,
            "train": {"lr": 3e-3, "head_lr": 3e-2, "batch_size": 8, "epochs": 3, "patience": 3, "seed": 0,
                      "dev_fraction": 0.2, "test_fraction": 0.2},
            "judge": {"enabled": True, "k": 0}}


def test_alignment_is_measured_on_test_pairs_never_used_to_pick_the_epoch(tmp_path, lrf_cfg):
    few = [PreferencePair("picker", {"question": f"alpha {i}"}, {"k": 2}, {"k": 1}, 1.0, 0.0) for i in range(6)]
    alike = [PreferencePair("gen", {"question": "alpha 99"}, {"answer": ["red"]}, {"answer": "- red"}, 1.0, 0.0)]
    pairs = gen_pairs() + few + alike
    folder = RunFolder(tmp_path)
    folder.write_json("collect_stats.json", {"gen": {"near_ties": 3}, "picker": {"near_ties": 1}})
    judge = ScriptedLM("I cannot tell.")  # never names a side: every verdict is a tie
    ctx = RunContext(ledger=RunLedger(2), lm=judge)
    model, report = train_initial_lrf(pipeline(), pairs, ctx, folder, lrf_cfg)

    split, hidden = split_pairs(model, pairs, lrf_cfg, TrainConfig.from_mapping(lrf_cfg["train"]))
    inputs = {part: {p.context["question"] for p in getattr(split, part) if p.component == "gen"}
              for part in ("train", "dev", "test")}
    assert inputs["test"] and inputs["dev"] and not inputs["test"] & inputs["dev"]
    assert not inputs["test"] & inputs["train"]
    gen = report["components"]["gen"]
    assert report["measured_on"] == "test" and gen["n_pairs"] == len(split.test) == 12
    assert gen["pairwise_accuracy"] == pairwise_accuracy(model, split.test)["mean"]
    assert gen["pairs"] == {"collected": 61, "trained": 36, "dev": 12, "test": 12, "indistinguishable": 1, "tied": 3}
    assert hidden == alike and report["n_indistinguishable"] == 1
    # the unparsable judge is a coin flip, and its parse rate says so
    assert gen["judge_accuracy"] == 0.5 and gen["judge_parse_rate"] == 0.0 and report["judge_parse_rate"] == 0.0
    # 6 pairs are too few for a test split: n/a and why, never an accuracy on the pairs it trained on
    picker = report["components"]["picker"]
    assert picker["pairwise_accuracy"] is None and picker["judge_accuracy"] is None and picker["n_pairs"] == 0
    assert picker["no_test"] == "6 pairs, fewer than the 20 a test split needs"
    assert picker["pairs"] == {"collected": 6, "trained": 6, "dev": 0, "test": 0, "indistinguishable": 0, "tied": 1}
    assert report["mean_pairwise_accuracy"] == gen["pairwise_accuracy"]  # the mean is over measured components
    assert folder.read_json(REPORT_FILE) == report


def test_indistinguishable_pairs_of_test_inputs_stay_in_the_test_split_as_ties(tmp_path, lrf_cfg):
    # Every input has one distinguishable pair and one that renders alike (a list vs its text).
    pairs = gen_pairs()[::2] + [PreferencePair("gen", {"question": f"alpha {i}"}, {"answer": ["red"]},
                                               {"answer": "- red"}, 1.0, 0.0) for i in range(30)]
    ctx = RunContext(ledger=RunLedger(2), lm=None)
    model, report = train_initial_lrf(pipeline(), pairs, ctx, RunFolder(tmp_path), lrf_cfg)
    split, hidden = split_pairs(model, pairs, lrf_cfg, TrainConfig.from_mapping(lrf_cfg["train"]))
    assert len(hidden) == 30 and not {id(p) for p in hidden} & {id(p) for p in split.train + split.dev}
    test_ties = [p for p in split.test if any(p is h for h in hidden)]
    assert test_ties and len(test_ties) * 2 == len(split.test)  # one of each per test input
    gen = report["components"]["gen"]
    seen = pairwise_accuracy(model, [p for p in split.test if not any(p is h for h in hidden)])["mean"]
    assert gen["n_pairs"] == len(split.test) and gen["n_distinguishable"] == len(split.test) // 2
    assert gen["pairwise_accuracy_distinguishable"] == pytest.approx(seen)
    assert gen["pairwise_accuracy"] == pytest.approx((seen + 0.5) / 2)


class SampledWriter(Component):
    """A prompt component whose reply the scripted LM picks by sample index (a fresh index: a fresh sample)."""

    def __init__(self):
        super().__init__("gen", "writes the answer", ("question",), ("answer",), kind=ConfigKind.PROMPT, default="")

    def forward(self, inputs, value, ctx):
        return [{"answer": text} for text in ctx.complete("gen", [[{"role": "user", "content": x["question"]}]
                                                                  for x in inputs])]


def test_stage2_draws_new_samples_on_stage1s_inputs(tmp_path, lrf_cfg):
    # Before: Stage 2 collected at Stage 1's sample indices, so on the same inputs an unchanged component
    # replayed Stage 1's exact candidates (and the buffer got the same comparisons again).
    from optimas_cli.lrf.buffer import ReplayBuffer
    from optimas_cli.lrf.collect import collect_all
    from optimas_cli.lrf.model import LocalRewardModel
    from optimas_cli.lrf.stage import Stage2
    from optimas_cli.lrf.text import component_infos

    system = CompoundSystem([SampledWriter()], inputs=("question",), outputs=("answer",))
    metric = Metric("reward", lambda ex, out: float(int(out["answer"].split()[-1]) % 3))
    pipe = Pipeline("stage2_test", system, Splits([], [], []), metric)
    lm = ScriptedLM(lambda req: f"draw {req.sample_index}")
    inputs = [{"question": f"alpha {i}"} for i in range(3)]
    settings = {"num_candidates": 3, "mc_repeats": 1, "temperature": 1.0}
    ctx = RunContext(ledger=RunLedger(1), lm=lm, phase="lrf_collection")
    stage1 = collect_all(system, system.default_config(), inputs, ctx, metric, **settings)["gen"]
    stage1_draws = {(str(r.messages), r.sample_index) for _, r in lm.requests}
    lm.requests.clear()

    model = LocalRewardModel.from_config(lrf_cfg, component_infos(system))
    buffer = ReplayBuffer(seed=0)
    buffer.add(stage1)
    adapt = Stage2(pipe, model, buffer, {**lrf_cfg, "collect": settings}, inputs, len(inputs), RunFolder(tmp_path))
    adapt(system.default_config(), ctx.replace(phase="adaptation"), ["gen"], len(inputs), {})
    stage2_draws = {(str(r.messages), r.sample_index) for _, r in lm.requests}
    assert {m for m, _ in stage2_draws} == {m for m, _ in stage1_draws}  # the same prompts (inputs, config)
    assert not stage2_draws & stage1_draws  # ... sampled afresh
    assert adapt.adaptations[0]["fresh_pairs"] > 0


def test_a_components_expected_collection_alone_adds_up_to_the_whole_and_bounds_what_runs(tmp_path):
    """Stage2.expected_runs of one component is its share of the whole collection (a lazy refresh is sized and
    capped by it), and an upper bound of what collecting it executes. Collected together, the components run
    what they hold fixed once (the shared prefix), so the whole is the parts less their prefixes plus one."""
    from optimas_cli.lrf.buffer import ReplayBuffer
    from optimas_cli.lrf.collect import collect_all, expected_prefix_runs
    from optimas_cli.lrf.stage import Stage2
    from optimas_pipelines.synthetic.system import build

    pipe = build(components=5, shape="diamond", kinds="mix", noise=0.5, instance=1)
    config, inputs = pipe.system.default_config(), pipe.splits.train[:3]
    stage2 = Stage2(pipe, None, ReplayBuffer(), {"collect": {"num_candidates": 3, "mc_repeats": 2}}, inputs, 3,
                    RunFolder(tmp_path))
    ctx = RunContext(ledger=RunLedger(len(pipe.system)), phase="adaptation", temperature=0.7)
    names = list(pipe.system.order)
    alone = [stage2.expected_runs(config, ctx, [n], 3) for n in names]
    prefixes = [expected_prefix_runs(pipe.system, config, [n], 3) for n in names]
    whole = stage2.expected_runs(config, ctx, names, 3)
    assert whole == pytest.approx(sum(alone) - sum(prefixes) + expected_prefix_runs(pipe.system, config, names, 3))
    assert whole < sum(alone) and min(alone) > 0
    for name, expected in zip(names, alone, strict=True):
        before = ctx.ledger.equivalent_runs()
        collect_all(pipe.system, config, inputs, ctx, pipe.metric, components=[name], num_candidates=3, mc_repeats=2)
        assert 0 < ctx.ledger.equivalent_runs() - before <= expected + 1e-9
