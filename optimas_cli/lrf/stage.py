"""Stage 1 of the local reward functions, resumable inside a run folder.

collect -> pairs.jsonl (one component at a time; finished components are never re-collected)
train   -> lrf/ (backbone + heads + config) and lrf_report.json (Table 4: pairwise vs judge accuracy
           on test pairs, and per component how many pairs were trained, indistinguishable, tied); then
           the choice components' value scorers (lrf/value_scorer.py) on the same training pairs, with
           their accuracy on the same test pairs (`value_scorer` in the report)
Shared by `optimas collect`, `optimas train-lrf` and the optimas method.
"""
from __future__ import annotations

import logging
import math
import os
import shutil
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path

from rich.console import Console

from optimas_cli.errors import UserError
from optimas_cli.lm.sampling_check import check_sampling
from optimas_cli.lrf.buffer import ReplayBuffer
from optimas_cli.lrf.collect import (
    CANDIDATE_TEMPERATURE,
    COLLECTION_PHASE,
    ExecutionTally,
    collect_all,
    collection_sample_index,
    decoding_temperature,
    expected_collection,
    optimizable_components,
)
from optimas_cli.lrf.judge import JUDGE_PHASE, judge_accuracy
from optimas_cli.lrf.metrics import alignment_report, pairwise_accuracy
from optimas_cli.lrf.model import LocalRewardModel
from optimas_cli.lrf.pairs import PreferencePair, append_pairs, load_pairs, save_pairs
from optimas_cli.lrf.sizing import CollectionSize, fitting_components, size_collection, stage1_limit
from optimas_cli.lrf.text import component_infos
from optimas_cli.lrf.train import (
    PairSplit,
    TrainConfig,
    adapt_stage2,
    distinguishable,
    split_by_input,
    train_stage1,
)
from optimas_cli.lrf.value_scorer import ValueScorerSettings, fit_value_scorers, value_pair_accuracy
from optimas_cli.system import CompoundSystem, Pipeline, RunContext, SystemConfig
from optimas_cli.system.caps import check_caps
from optimas_cli.system.run_folder import RunFolder

log = logging.getLogger("optimas")
PAIRS_FILE, COLLECTED_FILE, LRF_DIR, REPORT_FILE = "pairs.jsonl", "collected.json", "lrf", "lrf_report.json"
SIZE_FILE = "stage1_size.json"  # Stage 1's size under the run cap (lrf/sizing.py), kept for a resume
LRF_CHECKPOINTS = "lrf_checkpoints"  # the LRF's weights as of each loop checkpoint (Stage 2 changes them)


def collect_settings(lrf_cfg: Mapping) -> dict:
    return dict(lrf_cfg.get("collect") or {})


def collect_options(pipeline: Pipeline, lrf_cfg: Mapping) -> dict:
    """lrf.collect as collect_all's keyword arguments. `labels`: mc (the Monte Carlo means, the default) or exact
    (each pair ordered by the pipeline's `exact_output_reward`, which only a pipeline that can compute the exact
    expected reward of an output has: optimas_pipelines/synthetic/system.py); any other pipeline is refused here, before
    its collection runs."""
    options = collect_settings(lrf_cfg)
    options.pop("cap_share", None)  # sizes Stage 1 (lrf/sizing.py), not an option of a collection
    if options.pop("labels", "mc") == "exact":
        options["exact_reward"] = getattr(pipeline, "exact_output_reward", None)
        if options["exact_reward"] is None:
            raise UserError(f"lrf.collect.labels=exact needs a pipeline that computes the exact expected reward of an "
                            f"output; {pipeline.name!r} does not",
                            "use it with pipeline=synthetic, or keep the Monte Carlo labels (lrf.collect.labels=mc)")
    return options


def collect_initial_pairs(
    pipeline: Pipeline, config: SystemConfig, examples: Sequence[dict], ctx: RunContext, folder: RunFolder,
    lrf_cfg: Mapping, console: Console | None = None,
) -> list[PreferencePair]:
    """Preference pairs for every optimizable component; a killed collection resumes per component. Under a run
    cap Stage 1 is sized to its share of it (stage1_size), and a component that would cross that share on a
    resume (the shared prefix runs again for what is left) is not collected."""
    size = stage1_size(pipeline, config, len(examples), ctx, folder, lrf_cfg)
    options = collect_options(pipeline, lrf_cfg)
    if size is not None:
        options, examples = size.settings(options), list(examples)[: size.inputs]
        if console:
            console.print(f"  sized to its share of the run cap: {size.inputs} inputs x {size.num_candidates} candidates "
                          f"x {size.mc_repeats} repeats for {len(size.components)} components, at most "
                          f"{size.runs:.1f} of {size.limit:.1f} runs")
    done: list[str] = folder.read_json(COLLECTED_FILE, {"components": []})["components"]
    todo = [n for n in optimizable_components(pipeline.system) if n not in done]
    stats = folder.read_json("collect_stats.json", {})
    _drop_unfinished(folder, done)
    if size is not None and todo:
        spent = ctx.ledger.equivalent_runs(COLLECTION_PHASE)
        fit = fitting_components(pipeline.system, config, [n for n in todo if n in size.components], len(examples),
                                 options, decoding_temperature(ctx), size.limit - spent) if examples else []
        skipped = [n for n in todo if n not in fit]
        for name in skipped:  # no pairs: marked done, so a resume does not retry it
            stats[name] = {"skipped": f"its collection does not fit Stage 1's share of the run cap ({size.limit:g} runs)"}
            done.append(name)
        if skipped and not fit:
            folder.checkpoint(ctx, {"collect_stats.json": stats, COLLECTED_FILE: {"components": done}})
        todo = fit

    def persist(name: str, pairs: list[PreferencePair]) -> None:
        append_pairs(folder.file(PAIRS_FILE), pairs)  # dropped by a resume until the checkpoint marks them done
        done.append(name)
        folder.checkpoint(ctx, {"collect_stats.json": stats, COLLECTED_FILE: {"components": done}})
        if console:
            console.print(f"  collected {len(pairs)} pairs for [bold]{name}[/] · runs so far {ctx.ledger.equivalent_runs():.1f}")
        check_caps(ctx)  # a safe point: this component's pairs and the accounts are saved

    def fits(runs: float) -> None:  # a step of the collection that would cross the run cap is not started
        check_caps(ctx, {"max_runs": runs})

    if todo:
        check_sampling(pipeline.system, ctx, float(options.get("temperature", CANDIDATE_TEMPERATURE)),
                       "stage 1's candidates", console)  # before the first candidate: can they differ at all?
        with ctx.ledger.timed(COLLECTION_PHASE):
            collect_all(pipeline.system, config, examples, ctx.replace(phase=COLLECTION_PHASE), pipeline.metric,
                        components=todo, on_pairs=persist, stats=stats, before=fits, **options)
    # Pairs of a component whose collection was cut short are not marked done: drop them.
    pairs = load_pairs(folder.file(PAIRS_FILE)) if folder.file(PAIRS_FILE).exists() else []
    return [p for p in pairs if p.component in done]


def stage1_size(pipeline: Pipeline, config: SystemConfig, n_available: int, ctx: RunContext, folder: RunFolder,
                lrf_cfg: Mapping) -> CollectionSize | None:
    """Stage 1's size under budget.max_runs and lrf.collect.cap_share (lrf/sizing.py); None without either.
    Computed once per run folder and kept in it, so a resume collects the rest at the size the first part had."""
    caps = getattr(ctx, "caps", None)
    limit = stage1_limit(collect_settings(lrf_cfg), getattr(caps, "max_runs", None))
    if limit is None:
        return None
    kept = folder.read_json(SIZE_FILE)
    if kept is not None:
        return CollectionSize(**{**kept, "components": tuple(kept["components"])})
    size = size_collection(pipeline.system, config, optimizable_components(pipeline.system), n_available,
                           collect_settings(lrf_cfg), decoding_temperature(ctx), limit)
    folder.write_json(SIZE_FILE, size.to_dict())
    log.info("stage 1 sized to %.4g of the run cap's %g runs: %s", limit, caps.max_runs, size.to_dict())
    return size


def _drop_unfinished(folder: RunFolder, done: list[str]) -> None:
    """Pairs of a component killed before it was marked done are collected again: drop the first ones."""
    path = folder.file(PAIRS_FILE)
    if not path.exists():
        return
    pairs = load_pairs(path)
    kept = [p for p in pairs if p.component in done]
    if len(kept) < len(pairs):
        save_pairs(path, kept)


def train_config(lrf_cfg: Mapping, n_train_pairs: int) -> TrainConfig:
    """Training settings; with few pairs, enough epochs to reach `min_steps` optimizer steps."""
    settings = dict(lrf_cfg.get("train") or {})
    cfg = TrainConfig.from_mapping(settings)
    min_steps = int(lrf_cfg.get("min_steps", 0) or 0)
    batches = max(1, math.ceil(n_train_pairs / cfg.batch_size))
    if min_steps and cfg.epochs * batches < min_steps:
        cfg.epochs = math.ceil(min_steps / batches)
    return cfg


def split_pairs(model: LocalRewardModel, pairs: Sequence[PreferencePair], lrf_cfg: Mapping,
                cfg: TrainConfig) -> tuple[PairSplit, list[PreferencePair]]:
    """(the seeded split by input of every pair, the indistinguishable ones). Those never train and
    never stop training early, but stay in the test split: held-out pairs, ties for the reward model."""
    _, hidden = distinguishable(model, pairs)
    split = split_by_input(pairs, cfg.dev_fraction, cfg.test_fraction, cfg.seed,
                           min_test_pairs=int(lrf_cfg.get("min_test_pairs", 0) or 0),
                           train_fraction=float(lrf_cfg.get("train_fraction", 1.0) or 1.0))
    ties = {id(p) for p in hidden}
    split.train = [p for p in split.train if id(p) not in ties]
    split.dev = [p for p in split.dev if id(p) not in ties]
    return split, hidden


def pair_counts(pairs: Sequence[PreferencePair], split: PairSplit, hidden: Sequence[PreferencePair],
                collect_stats: Mapping[str, Mapping]) -> dict[str, dict]:
    """Per component: pairs collected, trained, dev, test, indistinguishable (never trained on) and
    tied (candidates whose mean rewards were within epsilon: never pairs at all)."""
    parts = {"collected": pairs, "trained": split.train, "dev": split.dev, "test": split.test,
             "indistinguishable": hidden}
    names = list(dict.fromkeys([*(p.component for p in pairs), *collect_stats]))
    counts = {name: {key: sum(p.component == name for p in group) for key, group in parts.items()} for name in names}
    for name in names:
        counts[name]["tied"] = int((collect_stats.get(name) or {}).get("near_ties", 0))
    return counts


def train_initial_lrf(
    pipeline: Pipeline, pairs: Sequence[PreferencePair], ctx: RunContext, folder: RunFolder, lrf_cfg: Mapping,
    buffer: ReplayBuffer | None = None,
) -> tuple[LocalRewardModel, dict]:
    """Stage 1 plus the alignment report; reloads both when this folder already holds them.

    Pairs are split by input: train, dev (early stopping) and test (the reported alignment of the
    LRF and of the LLM judge). A component with too few pairs for a test split reads n/a, with why.
    """
    cfg = TrainConfig.from_mapping(lrf_cfg.get("train"))  # the split's fractions and seed
    report = folder.read_json(REPORT_FILE)
    if report is not None and folder.file(LRF_DIR).exists():
        model = LocalRewardModel.load(folder.file(LRF_DIR))
        if buffer is not None:  # the same seeded split as before, so the buffer gets the same pairs
            buffer.add(split_pairs(model, pairs, lrf_cfg, cfg)[0].train)
        return model, report

    model = LocalRewardModel.from_config(lrf_cfg, component_infos(pipeline.system))
    split, hidden = split_pairs(model, pairs, lrf_cfg, cfg)
    with ctx.ledger.timed("lrf_training"), ctx.ledger.computing("lrf_training"):
        # a cap is checked before each epoch: a stop drops the partial training, a resume trains again
        stage1 = train_stage1(model, split.train, train_config(lrf_cfg, len(split.train)), dev=split.dev, buffer=buffer,
                              before_epoch=lambda: check_caps(ctx))
        values = fit_value_scorers(model, pipeline.system, split.train, ValueScorerSettings.from_lrf(lrf_cfg))
    accuracy = pairwise_accuracy(model, split.test, indistinguishable=hidden)
    judge = None
    judge_cfg = dict(lrf_cfg.get("judge") or {})
    if judge_cfg.get("enabled", True) and split.test and ctx.lm is not None:
        check_caps(ctx)  # before the judge's calls (priced, on an API model)
        with ctx.ledger.timed(JUDGE_PHASE):
            judge = judge_accuracy(ctx.lm, split.test, examples=split.train, k=int(judge_cfg.get("k", 8)),
                                   components=component_infos(pipeline.system), seed=int(lrf_cfg.get("seed", 0) or 0),
                                   max_chars=int(judge_cfg.get("max_chars", 400)), indistinguishable=hidden)
    counts = pair_counts(pairs, split, hidden, folder.read_json("collect_stats.json", {}))
    report = alignment_report(accuracy, judge, counts, split.no_test)
    report.update(measured_on="test", n_pairs=len(pairs), n_train_pairs=len(split.train),
                  n_dev_pairs=len(split.dev), n_test_pairs=len(split.test), n_indistinguishable=len(hidden),
                  stage1=stage1)
    if values:  # s_k(x, v) ranks a pair's two values before running them: its accuracy on the same test pairs
        report["value_scorer"] = {"trained": values, "accuracy": value_pair_accuracy(model, split.test)}
    model.save(folder.file(LRF_DIR))
    folder.checkpoint(ctx, {REPORT_FILE: report})  # the report marks Stage 1 done: a kill before it trains again
    check_caps(ctx)  # a safe point: the trained model and the accounts are saved
    return model, report


def no_pairs_report(folder: RunFolder) -> dict:
    """The `lrf` block of a run whose Stage 1 collected no pair: per component its ties, no accuracy."""
    counts = pair_counts([], PairSplit(), [], folder.read_json("collect_stats.json", {}))
    report = alignment_report({"per_component": {}, "mean": None}, None, counts)
    report.update(measured_on="test", n_pairs=0, n_train_pairs=0, n_dev_pairs=0, n_test_pairs=0,
                  n_indistinguishable=0)
    return report


def make_buffer(lrf_cfg: Mapping, seed: int) -> ReplayBuffer:
    b = dict(lrf_cfg.get("buffer") or {})
    return ReplayBuffer(int(b.get("capacity_per_component", 500)), float(b.get("mix_ratio", 0.5)), seed)


class DrawnVersions:
    """Per component, the configuration version its newest preference pairs were drawn under: how many accepted
    updates each component had then (absent: Stage 1's pairs, drawn before any). A component's local reward
    depends on what feeds it (its inputs) and what consumes its output (the reward its candidates earn); an
    update on a parallel branch changes neither, and its own update changes neither."""

    def __init__(self, system: CompoundSystem):
        self.drawn: dict[str, dict[str, int]] = {}
        self.context = {n: {*system.downstream(n), *(u for u in system.order if n in system.downstream(u))}
                        for n in system.order}

    def stale(self, names: Sequence[str], versions: Mapping[str, int], whole_system: bool = False) -> list[str]:
        """Those of `names` whose pairs were drawn before an accepted update upstream or downstream of them
        (`whole_system`: of any component, the paper's trigger: every accepted update adapts every r_k).
        `versions`: each component's accepted updates so far."""
        def behind(name: str) -> bool:
            drawn = self.drawn.get(name, {})
            watched = set(versions) | set(drawn) if whole_system else self.context[name]
            return any(versions.get(c, 0) != drawn.get(c, 0) for c in watched)
        return [n for n in names if behind(n)]

    def mark(self, names: Sequence[str], versions: Mapping[str, int]) -> None:
        """`names` have fresh pairs drawn under `versions`."""
        for name in names:
            self.drawn[name] = dict(versions)


def expected_collection_runs(system: CompoundSystem, config: SystemConfig, names: Sequence[str], n_inputs: int,
                             lrf_cfg: Mapping, ctx: RunContext) -> float:
    """The executed runs collecting `names` on `n_inputs` inputs will take under `config` (at most: every
    sampled candidate distinct), by optimas plan's arithmetic: what a run cap checks before a collection
    (Stage 1's per component, a Stage 2 adaptation) starts, and what sizes a lazy refresh."""
    tally = ExecutionTally()
    expected_collection(system, config, n_inputs, collect_settings(lrf_cfg), tally, decoding_temperature(ctx), names)
    return tally.executions / len(system)


class Stage2:
    """Stage 2: fresh pairs for the named components under the current configuration, mixed with the replay
    buffer; `versions` tells the loop which local rewards an accepted update has made stale. It keeps what a
    resumed run needs (`state()`/`restore()`, checkpointed with the loop): the adaptations so far (their fresh
    inputs are the cursor into the fresh pool), the drawn versions, the replay buffer, and the adapted LRF's
    weights as of the checkpoint (a kill after an adaptation but before its checkpoint must not leave the
    resumed run with weights from the future)."""

    def __init__(self, pipeline: Pipeline, lrf: LocalRewardModel, buffer: ReplayBuffer, lrf_cfg: Mapping,
                 fresh_pool: Sequence[dict], fresh_size: int, folder: RunFolder):
        self.pipeline, self.lrf, self.buffer, self.lrf_cfg = pipeline, lrf, buffer, lrf_cfg
        self.fresh_pool, self.fresh_size, self.folder = list(fresh_pool), int(fresh_size), folder
        self.adaptations: list[dict] = []
        self.versions = DrawnVersions(pipeline.system)
        self.stale = self.versions.stale
        self._saved: int | None = None  # the adaptation count whose weights are on disk

    def __call__(self, config: SystemConfig, ctx: RunContext, names: Sequence[str], n_inputs: int,
                 versions: Mapping[str, int]) -> dict:
        """Collect fresh pairs for `names` on the next `n_inputs` inputs of the fresh pool, adapt the LRF on
        them (mixed with replayed pairs), and mark their pairs as drawn under `versions`."""
        cursor = sum(a["fresh_inputs"] for a in self.adaptations) % len(self.fresh_pool)
        fresh_inputs = (self.fresh_pool[cursor:] + self.fresh_pool[:cursor])[:n_inputs]
        # Its own sample indices: the fresh pool is (by default) Stage 1's inputs, and a component the
        # update left unchanged would otherwise replay Stage 1's very samples (and cached calls).
        sample_index = ctx.sample_index + collection_sample_index(len(self.adaptations) + 1)
        with ctx.ledger.timed("adaptation"):
            fresh = collect_all(self.pipeline.system, config, fresh_inputs,
                                ctx.replace(lrf=self.lrf, sample_index=sample_index),
                                self.pipeline.metric, components=names, **collect_options(self.pipeline, self.lrf_cfg))
            flat = [p for ps in fresh.values() for p in ps]
            moved = self.scores_changed_by(names)
            with ctx.ledger.computing("lrf_training"), \
                    self.buffer.replaying_only(moved) if moved is not None else nullcontext():
                result = adapt_stage2(self.lrf, flat, self.buffer, train_config(self.lrf_cfg, len(flat)))
                # phi moved (a trained backbone) or the buffer grew: the value scorers it moves learn again
                held = [p for c in self.buffer.components() for p in self.buffer.pairs[c]]
                result["value_scorer"] = fit_value_scorers(self.lrf, self.pipeline.system, held,
                                                           ValueScorerSettings.from_lrf(self.lrf_cfg), moved)
        adaptation = {"components": list(names), "fresh_inputs": len(fresh_inputs), **result}
        self.adaptations.append(adaptation)
        self.versions.mark(names, versions)
        return adaptation

    def scores_changed_by(self, names: Sequence[str]) -> list[str] | None:
        """The components whose local rewards adapting `names` can change (None: every one). On a frozen backbone
        (lrf.train_backbone=heads) only their own heads train, with only their pairs replayed: the other heads,
        and what the routes they score pick, stay exactly as they were."""
        return list(names) if getattr(self.lrf, "train_backbone", None) == "heads" else None

    def expected_runs(self, config: SystemConfig, ctx: RunContext, names: Sequence[str], n_inputs: int) -> float:
        """The executed runs collecting `names` on `n_inputs` inputs will take under `config` (at most: every
        sampled candidate distinct), by optimas plan's arithmetic. A run cap checks it before Stage 2 starts
        (which would otherwise cross the cap by a whole adaptation), and sizes a lazy refresh by it."""
        return expected_collection_runs(self.pipeline.system, config, names, n_inputs, self.lrf_cfg, ctx)

    def _weights(self, n: int) -> Path:
        return self.folder.file(LRF_CHECKPOINTS) / f"after-{n}-adaptations"

    def state(self) -> dict:
        n = len(self.adaptations)
        if self._saved != n:
            tmp = self._weights(n).with_name(self._weights(n).name + ".tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            self.lrf.save(tmp)
            shutil.rmtree(self._weights(n), ignore_errors=True)
            os.replace(tmp, self._weights(n))
            for old in self.folder.file(LRF_CHECKPOINTS).iterdir():  # keep this one and the last committed
                if old.name not in (self._weights(n).name, self._weights(n - 1).name):
                    shutil.rmtree(old, ignore_errors=True)
            self._saved = n
        return {"adaptations": self.adaptations, "drawn": self.versions.drawn, "buffer": self.buffer.state()}

    def restore(self, state: dict) -> None:
        self.adaptations[:] = state["adaptations"]
        self.versions.drawn = {name: dict(versions) for name, versions in state["drawn"].items()}
        self.buffer.restore(state["buffer"])
        n = len(self.adaptations)
        self.lrf.load_state_dict(LocalRewardModel.load(self._weights(n), device="cpu").state_dict())
        self._saved = n
