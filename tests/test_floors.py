"""Floors: chance, the training majority and a no-LM rule, scored on the runs' own test examples, and the
verdict gate: no "gain" or "at least as good" for a result that does not beat its pipeline's best floor.

The run folders are built here (results.json and predictions.jsonl.gz as `optimas run` writes them) for
the real Amazon pipeline, over a small Amazon-format data folder, so the floors come from its loader."""
from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path

import pytest

from optimas_cli.report.cli import write_report
from optimas_cli.report.runs import load_runs
from optimas_cli.system.traces import PREDICTIONS, TraceSink
from optimas_pipelines.amazon import floors as amazon_floors
from optimas_pipelines.amazon.data import FILES

ROWS_PER_FILE = 10  # 8 train/validation rows and 2 test rows per file (data.py's 80 / 20 split)


def write_amazon_data(root: Path, answer_of, misleading: bool = False) -> None:
    """Both Amazon CSVs; row i of each file has answer answer_of(prefix, i), and one candidate shares a word
    with the session: the answer, or with `misleading` the candidate after it."""
    (root / "amazon").mkdir(parents=True)
    for name, prefix, _ in FILES:
        with (root / "amazon" / name).open("w", newline="", encoding="utf-8") as handle:
            writer = csv.writer(handle)
            writer.writerow(["question", "choices", "answer"])
            for i in range(ROWS_PER_FILE):
                answer = answer_of(prefix, i)
                named = (answer + 1) % 4 if misleading else answer
                choices = [f"gadget{j} model{i}x{j}" if j == named else f"other{j} thing{i}y{j}" for j in range(4)]
                writer.writerow([f"Product Sequence:\ngadget{named} basic", repr(choices), str(answer)])


def test_amazon_floors_are_chance_training_majority_and_word_overlap(tmp_path):
    write_amazon_data(tmp_path, lambda prefix, i: 1 if i < 6 else 3)  # train: mostly 1; test rows 8, 9: 3
    config = {"data_dir": str(tmp_path), "budget": {"train_size": 5}}
    train = amazon_floors.train_examples(config)
    assert [e["id"] for e in train] == ["en-0", "en-1", "en-2", "en-3", "en-4"]  # the budget's first five
    test = [{**e, "key": e["id"]} for e in amazon_floors.load_splits(str(tmp_path)).test]
    chance, majority, overlap = amazon_floors.floors(train, test, config)
    assert chance.mean == 0.25
    assert majority.name == "majority index 1" and majority.mean == 0.0  # every test answer is 3
    assert overlap.mean == 1.0  # the answer is the one candidate sharing a word with the session
    assert {amazon_floors.group(e) for e in test} == {"en", "multilingual"}


def test_tied_word_overlap_scores_the_chance_of_picking_the_answer():
    example = {"key": "k", "sequence": "red shoe", "choices": ["red hat", "red cup", "blue pen", "green box"],
               "answer": "1"}
    (_, _, overlap) = amazon_floors.floors([{"answer": "0"}], [example], {})
    assert overlap.scores == {"k": 0.5}


def write_run(folder: Path, data_dir: Path, *, method: str, seed: int, scores: dict[str, float],
              examples: dict[str, dict], initial: dict[str, float] | None = None) -> None:
    """A finished Amazon run: results.json and the traces of its test (and initial configuration's test)."""
    folder.mkdir(parents=True)
    sink = TraceSink(folder / PREDICTIONS)
    for split, by_key in (("test", scores), ("test_initial", initial or {})):
        sink.write({"key": k, "split": split, "repeat": 0, "index": i, "score": s, "output": {"answer": "0"},
                    "input": {"sequence": examples[k]["sequence"], "choices": examples[k]["choices"]},
                    "gold": {"id": k, "answer": examples[k]["answer"]}} for i, (k, s) in enumerate(by_key.items()))
    mean = statistics.fmean(scores.values())
    results = {"pipeline": "amazon", "method": method, "metric": "accuracy",
               "test": {"mean": mean, "std": 0.0, "scores": [mean], "n": len(scores)},
               "ledger": {"runs": 10.0, "tokens": 0, "calls": 4, "lm": {"total": {"calls": 4, "cache_hits": 3}}},
               "config": {"seed": seed, "data_dir": str(data_dir), "budget": {"train_size": 12},
                          "method": {"name": method}}}
    if method == "optimas":
        results["history"] = [{"iteration": 1, "component": "next_item_decider", "accepted": True}]
    (folder / "results.json").write_text(json.dumps(results))


@pytest.fixture
def below_majority(tmp_path) -> Path:
    """Training answers all 0 and 15 of 20 test answers 0 (majority floor 0.75, the best: the word overlap
    is misled); Optimas gains clearly over Unoptimized (0.1 -> 0.6, a paired CI above 0) yet stays below."""
    data = tmp_path / "data"
    write_amazon_data(data, lambda prefix, i: 2 if (prefix, i) == ("multilingual", 9) else 0, misleading=True)
    examples = {e["id"]: e for e in amazon_floors.load_splits(str(data)).test}
    keys = sorted(examples)  # 2 test rows per file, each under 5 keys: 20 test examples
    examples = {f"{k}#{r}": {**examples[k], "id": f"{k}#{r}"} for k in keys for r in range(5)}
    keys = sorted(examples)
    base = {k: float(i < 2) for i, k in enumerate(keys)}
    gained = {k: float(i < 12) for i, k in enumerate(keys)}
    write_run(tmp_path / "runs" / "unoptimized", data, method="unoptimized", seed=0, scores=base, examples=examples)
    write_run(tmp_path / "runs" / "optimas", data, method="optimas", seed=0, scores=gained, examples=examples,
              initial=base)
    return tmp_path


def test_no_gain_verdict_below_the_best_floor(below_majority):
    out = below_majority / "report"
    text = write_report(load_runs([str(below_majority / "runs")]), out)
    with (out / "optimas_gain.csv").open() as handle:
        (row,) = list(csv.DictReader(handle))
    assert float(row["delta_low"]) > 0  # the paired gain over Unoptimized is real...
    assert row["gain_shown"] == "False"  # ...but it is no verdict: Optimas is below the majority floor
    assert row["floor_block"] == "below floor: majority index 0 (0.7500)"
    assert "| no (below floor: majority index 0 (0.7500)) |" in text
    assert "on 0 of 1 pipeline(s)" in text


def test_floors_stand_beside_the_methods_on_the_same_examples(below_majority):
    out = below_majority / "report"
    text = write_report(load_runs([str(below_majority / "runs")]), out)
    with (out / "table2_floors.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    floors = {r["floor"]: float(r["floor_mean"]) for r in rows if r["method"].startswith("floor:")}
    assert floors == {"chance": 0.25, "majority index 0": 0.75, "lexical overlap": 0.0}
    optimas = {r["floor"]: r["beats_floor"] for r in rows if r["method"] == "optimas"}
    assert optimas == {"chance": "True", "majority index 0": "False", "lexical overlap": "True"}
    # Table 2 names the best floor and marks the cells below it; Table 3 says which calls the cache answered.
    assert "| majority index 0 0.7500 |" in text and "0.6000" in text and "▽" in text
    assert "4 (3 from the LM cache)" in text
    # The per-language rows: both source files, floors recomputed on each.
    with (out / "table2_groups.csv").open() as handle:
        groups = {(r["group"], r["method"]): r for r in csv.DictReader(handle)}
    assert groups[("en", "floor:majority index 0")]["n"] == "10"
    assert float(groups[("en", "floor:majority index 0")]["mean"]) == 1.0
    assert float(groups[("multilingual", "floor:majority index 0")]["mean"]) == 0.5


def test_stark_floors_rank_the_candidates_without_an_lm():
    from optimas_pipelines.stark_prime import floors as stark_floors
    from optimas_pipelines.stark_prime.data import render_candidates

    example = {"key": "q1", "question": "Which drug treats migraine headaches?", "candidate_ids": [10, 11, 12, 13, 14],
               "answer_ids": [12], "candidate_names": ["aspirin", "insulin", "sumatriptan", "heparin", "warfarin"],
               "relation_info": render_candidates(["blood", "diabetes", "migraine headaches", "clotting", "clotting"]),
               "text_info": render_candidates(["pain", "sugar", "treats migraine", "blood", "blood"]),
               "emb_scores": [0.9, 0.8, 0.7, 0.2, 0.1]}
    chance, majority, retrieval, overlap = stark_floors.floors([], [example], {})
    assert chance.scores == {"q1": pytest.approx(sum(1 / r for r in range(1, 6)) / 5)}  # one answer among five
    assert majority.scores is None and "not defined" in majority.how
    assert retrieval.scores == {"q1": pytest.approx(1 / 3)}  # the retriever ranked the answer third
    assert overlap.scores == {"q1": 1.0}  # it alone shares 'treats', 'migraine', 'headaches' with the question


def test_a_pipeline_whose_floors_are_undefined_says_so_and_keeps_its_verdicts(tmp_path):
    from optimas_cli.report.floors import PipelineFloors, check
    from optimas_cli.report.runs import Run
    from optimas_pipelines.bigcodebench import floors as bcb_floors

    (floor,) = bcb_floors.floors([], [{"key": "t"}], {})
    assert floor.scores is None and floor.how.startswith("not defined")
    run = Run(tmp_path, {"pipeline": "bigcodebench", "method": "optimas", "config": {"seed": 0}})
    assert check([run], PipelineFloors((floor,), {})).blocks == ""  # nothing to beat: nothing blocks


def test_the_majority_floor_shares_ties_and_needs_a_recurring_answer():
    from optimas_cli.report.floors import majority_floor

    test = [{"key": "a", "answer": "yes"}, {"key": "b", "answer": "no"}, {"key": "c", "answer": "maybe"}]
    exact = lambda answer, example: float(example["answer"] == answer)  # noqa: E731
    majority = majority_floor(["yes", "yes", "no", "maybe"], test, exact)
    assert majority.name == "majority 'yes'" and majority.scores == {"a": 1.0, "b": 0.0, "c": 0.0}
    tied = majority_floor(["yes", "no", "no", "yes", "maybe"], test, exact)
    assert tied.name == "majority 'no' / 'yes'" and tied.scores == {"a": 0.5, "b": 0.5, "c": 0.0}
    unique = majority_floor(["yes", "no"], test, exact)
    assert unique.scores is None and "no answer recurs" in unique.how


def test_hotpotqa_majority_answer_is_normalized_and_scored_by_answer_f1():
    from optimas_pipelines.hotpotqa import floors as hotpot_floors

    train = [{"gold_answer": a} for a in ("Yes", "yes.", "no", "Paris")]
    test = [{"key": "a", "gold_answer": "yes"}, {"key": "b", "gold_answer": "no"}]
    majority = hotpot_floors.majority_answer(train, test)
    assert majority.name == "majority 'yes'" and majority.scores == {"a": 1.0, "b": 0.0}


def test_hotpotqa_bm25_floor_answers_with_the_top_passage_title(tmp_path):
    from optimas_pipelines.hotpotqa.floors import bm25_floor
    from optimas_pipelines.hotpotqa.passage_search import BM25PassageIndex, Passage

    search = BM25PassageIndex.load_or_build(
        [Passage("Paris", "capital city of France on the Seine"), Passage("Berlin", "capital of Germany on the Spree"),
         Passage("Danube", "a long river through Vienna and Budapest")], cache_dir=tmp_path)
    test = [{"key": "a", "question": "Which city is the capital of France?", "gold_answer": "Paris"},
            {"key": "b", "question": "Which river flows through Vienna?", "gold_answer": "the Danube River"},
            {"key": "c", "question": "zzz qqq", "gold_answer": "Paris"}]
    floor = bm25_floor(search, test)
    assert floor.scores == {"a": 1.0, "b": pytest.approx(2 / 3), "c": 0.0}  # no match: an empty answer
