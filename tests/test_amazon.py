"""Amazon next-item selection: the paper's splits on the real files, index parsing, adapters, end to end."""
from __future__ import annotations

import ast
import csv
import os
from pathlib import Path

import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from optimas_cli.errors import DataError
from optimas_cli.system import ConfigKind, RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.amazon import build
from optimas_pipelines.amazon.data import FILES, load_splits, read_csv
from optimas_pipelines.amazon.metric import accuracy, parse_choice
from tests.fakes import ScriptedLM

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
BASE = "local/smollm2-135m-instruct"
CHOICES = [
    "Oral-B Pro 3 Electric Toothbrush, Blue",
    "Ella's Kitchen First Taste Mixed Case 8 x 70g",
    "Neviti Carnival Popcorn Box, Blue",
    "Arteza 12 White Acrylic Paint Pens",
]

pytestmark = pytest.mark.skipif(not (DATA / "amazon").exists(), reason="needs the shared data folder")


@pytest.fixture(scope="module")
def pipeline():
    return build(data_dir=DATA)


def reply(request) -> str:
    user = request.messages[-1]["content"]
    if "behaviour analyst" in user:
        return f"Shopping for toothbrushes (adapter {request.adapter})."
    if "candidate profiler" in user:
        return "0: unrelated\n1: unrelated\n2: fits the session\n3: unrelated"
    return "Answer: 2"


def context(lm) -> RunContext:
    return RunContext(ledger=RunLedger(3), lm=lm)


# -- data -------------------------------------------------------------------------------------
def test_splits_have_the_papers_sizes_and_do_not_overlap(pipeline):
    splits = pipeline.splits
    assert splits.sizes() == {"train": 335, "val": 60, "test": 99}
    ids = [{ex["id"] for ex in part} for part in (splits.train, splits.val, splits.test)]
    assert sum(map(len, ids)) == 494 and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])


def test_each_file_splits_at_eighty_percent_and_validation_is_the_tail_of_train(pipeline):
    english = read_csv(DATA / "amazon" / FILES[0][0], "en")
    multilingual = read_csv(DATA / "amazon" / FILES[1][0], "multilingual")
    assert (len(english), len(multilingual)) == (120, 374)
    assert pipeline.splits.test == english[96:] + multilingual[299:]
    assert pipeline.splits.train + pipeline.splits.val == english[:96] + multilingual[:299]


def test_examples_follow_the_official_recipe(pipeline):
    with open(DATA / "amazon" / FILES[0][0], encoding="utf-8", newline="") as fh:
        row = next(csv.DictReader(fh))
    example = pipeline.splits.train[0]
    assert example["sequence"] == row["question"].split("Product Sequence:")[-1].strip()
    assert example["sequence"].startswith("Oral-B iO9")
    assert example["choices"] == ast.literal_eval(row["choices"]) and len(example["choices"]) == 4
    assert example["answer"] == row["answer"] == "2"


def test_malformed_row_is_reported_with_file_and_line(tmp_path):
    folder = tmp_path / "amazon"
    folder.mkdir()
    good = ["Clicked:\nProduct Sequence: \nA\nB\n", repr(CHOICES), "1"]
    bad = ["Clicked:\nProduct Sequence: \nC\n", "['only one']", "0"]
    path = folder / FILES[0][0]
    with open(path, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([["question", "choices", "answer"], good, good, bad])
    bad_line = 1 + 2 * 5 + 1  # header, two rows of five lines each (quoted newlines), then the bad row
    assert path.read_text(encoding="utf-8").splitlines()[bad_line - 1].startswith('"Clicked:')
    with pytest.raises(DataError) as err:
        read_csv(path, "en")
    assert f"{path} line {bad_line}" in str(err.value) and "at least two" in str(err.value)


def test_out_of_range_answer_is_malformed(tmp_path):
    path = tmp_path / "rows.csv"
    with open(path, "w", encoding="utf-8", newline="") as fh:
        csv.writer(fh).writerows([["question", "choices", "answer"], ["Product Sequence: x", repr(CHOICES), "4"]])
    with pytest.raises(DataError, match="line 2: answer 4 is not an index"):
        read_csv(path, "en")


def test_missing_files_offline_name_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    with pytest.raises(DataError, match=r"amazon/session_based_next_item_selection_dataset\.csv"):
        load_splits(tmp_path)


# -- parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("2", "2"),
        ("Answer: 3", "3"),
        ("answer is [1]", "1"),
        ("Option 2", "2"),
        ("(0) because the user likes toothbrushes", "0"),
        ("3. Arteza 12 White Acrylic Paint Pens", "3"),
        ("1. Oral-B Pro 3 Electric Toothbrush, Blue", "0"),  # its own 1-based list; the title decides
        ("1. Oral-B Pro 3 Electric Tooth", "0"),  # ... also when the token limit cut the title short
        ("1. Oral-B Pro", "1"),  # too little of a title to tell: the index stands
        # SmolLM2-135M on real test rows: its own numbered list of numbers names no item (was read as "1")
        ("1. 1. 2. 3. 4. 5. 6. 7. 8. 9. 10", ""),
        ("1. 2022-01-01: 2022-01-01: 2022-", ""),
        ("1. 1. Arteza 12 White Acrylic Paint Pens", "3"),  # ... unless it quotes a title
        ("The user will most likely view Neviti Carnival Popcorn Box, Blue next.", "2"),
        ("Arteza 12 White Acrylic Paint Pens", "3"),  # a title with a number in it is not index 12 or 1
        ("I would pick the second option.", "1"),
        ("Likely the Ella's Kitchen first-taste mixed case", "1"),  # most of one title's words
        ("Option 1 fits less than option 0. Answer: 0", "0"),  # the last marked index wins
        ("Answer: 7", ""),  # out of range, and nothing else to go on
        ("I am not sure.", ""),
        ("", ""),
    ],
)
def test_parse_choice_reads_messy_outputs(text, expected):
    assert parse_choice(text, CHOICES) == expected


def test_accuracy_matches_titles_against_the_examples_choices():
    example = {"choices": CHOICES, "answer": "2"}
    assert accuracy(example, {"answer": "2"}) == 1.0
    assert accuracy(example, {"answer": "Neviti Carnival Popcorn Box, Blue"}) == 1.0
    assert accuracy(example, {"answer": "1"}) == 0.0 and accuracy(example, {"answer": ""}) == 0.0


# -- components -------------------------------------------------------------------------------
def test_local_components_pass_their_adapter_and_base_model(pipeline, tmp_path):
    lm = ScriptedLM(reply)
    adapter = tmp_path / "analyzer-adapter"
    config = pipeline.system.default_config().replace("session_analyzer", adapter)
    trajs = pipeline.system.run(pipeline.splits.val[:2], config, context(lm))
    seen = {(component, req.model, req.adapter) for component, req in lm.requests}
    assert seen == {
        ("session_analyzer", BASE, str(adapter)),
        ("candidate_profiler", BASE, None),  # default configuration: the base model itself
        ("next_item_decider", None, None),  # the run's LM
    }
    assert trajs[0].state["context"] == f"Shopping for toothbrushes (adapter {adapter})."


def test_weights_components_expose_what_the_rl_optimizer_needs(pipeline):
    example = pipeline.splits.train[0]
    for name, inputs, shown, field in [
        ("session_analyzer", {"sequence": example["sequence"]}, example["sequence"], "context"),
        ("candidate_profiler", {"context": "toothbrushes", "choices": example["choices"]},
         f"3. {example['choices'][3]}", "feedback"),
    ]:
        component = pipeline.system.components[name]
        assert component.kind is ConfigKind.WEIGHTS and component.default is None
        assert component.base_model_path() == BASE
        messages = component.build_messages(inputs, None)
        assert messages[-1]["role"] == "user" and shown in messages[-1]["content"]
        assert component.parse_output("  some text \n") == {field: "some text"}
    assert pipeline.system.components["next_item_decider"].kind is ConfigKind.PROMPT


# -- end to end -------------------------------------------------------------------------------
def test_pipeline_runs_end_to_end_on_real_rows(pipeline):
    examples = pipeline.splits.test[:8]
    result = evaluate(pipeline, pipeline.system.default_config(), examples, context(ScriptedLM(reply)))
    expected = sum(ex["answer"] == "2" for ex in examples) / len(examples)
    assert 0 < expected < 1 and result["mean"] == pytest.approx(expected)


def test_single_llm_reply_is_scored_against_the_examples_titles(pipeline):
    example = pipeline.splits.test[0]
    task = pipeline.single_llm
    assert example["choices"][0] in task.prompt(example)[-1]["content"]
    gold_title = example["choices"][int(example["answer"])]
    assert pipeline.metric(example, task.parse(f"The user will view {gold_title}")) == 1.0


def test_hydra_config_builds_the_pipeline():
    cfg = OmegaConf.load(ROOT / "conf" / "pipeline" / "amazon.yaml")
    pipeline = instantiate(cfg, data_dir=str(DATA), _convert_="all")
    assert pipeline.info == {"base_model": BASE, "decider_model": None}
    assert pipeline.splits.sizes() == {"train": 335, "val": 60, "test": 99}
