"""PubMedQA: the paper's splits on the real files, answer parsing, model routing, end-to-end runs."""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from hydra.utils import instantiate

from optimas_cli.errors import DataError, UserError
from optimas_cli.system import HEURISTIC_ROUTE, LRF_ROUTE, RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate
from optimas_pipelines.pubmedqa import build
from optimas_pipelines.pubmedqa.data import load_splits, official_test_ids
from optimas_pipelines.pubmedqa.metric import accuracy, parse_decision
from tests.fakes import ScriptedLM

ROOT = Path(__file__).resolve().parent.parent
DATA = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
SMOL, GEMMA = "local/smollm2-135m-instruct", "local/gemma-3-270m"

pytestmark = pytest.mark.skipif(not (DATA / "pubmedqa").exists(), reason="needs the shared data folder")


@pytest.fixture(scope="module")
def pipeline():
    return build(data_dir=DATA)


def reply(request) -> str:
    """Analyst requests get a summary, solver requests an answer; the text says which model ran."""
    user = request.messages[-1]["content"]
    if "Summarize" in user:
        return f"summary by {request.model}"
    return "The evidence supports it.\nAnswer: yes"


def context(lm, lrf=None) -> RunContext:
    return RunContext(ledger=RunLedger(4), lm=lm, lrf=lrf)


# -- data -------------------------------------------------------------------------------------
def test_splits_have_the_papers_sizes_and_do_not_overlap(pipeline):
    splits = pipeline.splits
    assert splits.sizes() == {"train": 475, "val": 25, "test": 500}
    ids = [{ex["id"] for ex in part} for part in (splits.train, splits.val, splits.test)]
    assert sum(map(len, ids)) == 1000 and not (ids[0] & ids[1] or ids[0] & ids[2] or ids[1] & ids[2])
    official = json.loads((DATA / "pubmedqa" / "test_ground_truth.json").read_text())
    assert {ex["id"] for ex in splits.test} == set(official)
    assert all(ex["answer"] == official[ex["id"]] for ex in splits.test)


def test_every_split_keeps_the_data_file_order_so_a_prefix_mixes_labels(pipeline):
    raw = list(json.loads((DATA / "pubmedqa" / "ori_pqal.json").read_text()))
    test_ids = [ex["id"] for ex in pipeline.splits.test]
    assert test_ids == sorted(test_ids, key=raw.index)
    assert {ex["answer"] for ex in pipeline.splits.test[:20]} == {"yes", "no", "maybe"}


def test_train_keeps_file_order_and_validation_is_its_last_five_percent(pipeline):
    raw = json.loads((DATA / "pubmedqa" / "ori_pqal.json").read_text())
    test_ids = {ex["id"] for ex in pipeline.splits.test}
    pool = [pmid for pmid in raw if pmid not in test_ids]
    assert [ex["id"] for ex in pipeline.splits.train + pipeline.splits.val] == pool
    assert [ex["id"] for ex in pipeline.splits.val] == pool[-25:]
    first = pipeline.splits.train[0]
    record = raw[first["id"]]
    assert first["question"] == record["QUESTION"]
    assert first["context"] == " ".join(record["CONTEXTS"])
    assert first["answer"] == record["final_decision"]


def test_authors_split_recipe_reproduces_the_official_test_ids():
    raw = json.loads((DATA / "pubmedqa" / "ori_pqal.json").read_text())
    official = json.loads((DATA / "pubmedqa" / "test_ground_truth.json").read_text())
    assert official_test_ids({pmid: r["final_decision"] for pmid, r in raw.items()}) == list(official)


def test_hub_fallback_gives_the_same_splits(monkeypatch, tmp_path, pipeline):
    raw = json.loads((DATA / "pubmedqa" / "ori_pqal.json").read_text())
    hub_rows = [
        {"pubid": int(pmid), "question": r["QUESTION"], "context": {"contexts": r["CONTEXTS"]},
         "final_decision": r["final_decision"]}
        for pmid, r in raw.items()
    ]
    # a stand-in `datasets` module: the real one's import alone takes seconds
    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=lambda name, config, split: hub_rows))
    splits = load_splits(tmp_path)  # an empty data directory: the hub path
    assert splits.test == pipeline.splits.test and splits.val == pipeline.splits.val


def test_missing_files_offline_name_the_file_and_the_hub_dataset(monkeypatch, tmp_path):
    def offline(*args, **kwargs):
        raise ConnectionError("offline")

    monkeypatch.setitem(sys.modules, "datasets", SimpleNamespace(load_dataset=offline))
    with pytest.raises(DataError, match=r"pubmedqa/ori_pqal\.json.*qiaojin/PubMedQA"):
        load_splits(tmp_path)


def test_malformed_record_is_reported_with_file_and_line(tmp_path):
    folder = tmp_path / "pubmedqa"
    folder.mkdir()
    good = {"QUESTION": "Is it?", "CONTEXTS": ["a", "b"], "final_decision": "yes"}
    bad = {"QUESTION": "Is it?", "CONTEXTS": ["a"], "final_decision": "perhaps"}
    (folder / "ori_pqal.json").write_text(json.dumps({"1": good, "2": good, "3": bad}, indent=4))
    line = next(i for i, text in enumerate((folder / "ori_pqal.json").read_text().splitlines(), 1) if '"3"' in text)
    with pytest.raises(DataError) as err:
        load_splits(tmp_path)
    assert f"ori_pqal.json line {line}" in str(err.value) and "perhaps" in str(err.value)


# -- parsing ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "text, expected",
    [
        ("Answer: yes", "yes"),
        ("answer: No", "no"),
        ("The answer is maybe.", "maybe"),
        ("**Final answer:** No", "no"),
        ("No. The trial showed improvement... Answer: yes", "yes"),  # the marked answer beats a mention
        ("Yes, mitochondria play a role.", "yes"),
        ("The study found no difference between the groups.", "no"),
        ("Based on the data, maybe; results were mixed.", "maybe"),
        ("The answer to this question is yes", "yes"),
        ("Answer:\n\nMaybe", "maybe"),
        ("The evidence is inconclusive.", "maybe"),
        ("Nothing here commits.", "maybe"),
        ("", "maybe"),
        (None, "maybe"),
        ("Yesterday nobody knew.", "maybe"),  # 'yes'/'no' inside other words do not count
        ("The answer is yes, no, or maybe.", "maybe"),  # a 135M model echoing the options commits to none
        ("Yes/no/maybe: the answer is no", "no"),
        ("Is it yes or no? No, it is not.", "no"),
    ],
)
def test_parse_decision_reads_messy_outputs(text, expected):
    assert parse_decision(text) == expected


def test_accuracy_reparses_the_answer_field():
    assert accuracy({"answer": "no"}, {"answer": "Answer: no"}) == 1.0
    assert accuracy({"answer": "no"}, {"answer": "yes"}) == 0.0
    assert accuracy({"answer": "maybe"}, {"answer": None}) == 1.0  # no commitment reads as maybe


# -- routing ----------------------------------------------------------------------------------
def test_selectors_route_each_lm_component_to_the_chosen_model(pipeline):
    lm = ScriptedLM(reply)
    config = pipeline.system.default_config().replace("context_model_selector", GEMMA)
    trajs = pipeline.system.run(pipeline.splits.test[:3], config, context(lm))
    models = {(component, req.model) for component, req in lm.requests}
    assert models == {("context_analyst", GEMMA), ("problem_solver", SMOL)}
    assert all(t.state["summary"] == f"summary by {GEMMA}" and t.state["answer"] == "yes" for t in trajs)


def test_default_selector_is_the_first_candidate_and_heuristic_takes_the_highest_prior():
    pipeline = build(data_dir=DATA, candidate_models=[SMOL, GEMMA], model_priors={SMOL: 0.1, GEMMA: 0.9})
    config = pipeline.system.default_config()
    assert config["context_model_selector"] == SMOL and config["solver_model_selector"] == SMOL
    lm = ScriptedLM(reply)
    trajs = pipeline.system.run(
        pipeline.splits.val[:2], config.replace("solver_model_selector", HEURISTIC_ROUTE), context(lm)
    )
    assert [t.state["solver_model"] for t in trajs] == [GEMMA, GEMMA]


def test_lrf_route_picks_a_model_per_question_and_batches_per_model(pipeline):
    class PrefersGemmaOnEvenQuestions:
        def score(self, component, inputs, outputs):
            return [float((out["context_model"] == GEMMA) == (i % 2 == 0)) for i, out in enumerate(outputs)]

    lm = ScriptedLM(reply)
    config = pipeline.system.default_config().replace("context_model_selector", LRF_ROUTE)
    trajs = pipeline.system.run(pipeline.splits.val[:4], config, context(lm, PrefersGemmaOnEvenQuestions()))
    assert [t.state["context_model"] for t in trajs] == [GEMMA, SMOL, GEMMA, SMOL]
    assert [t.state["summary"] for t in trajs] == [f"summary by {m}" for m in (GEMMA, SMOL, GEMMA, SMOL)]


def test_heuristic_route_without_a_prior_is_a_clear_user_error():
    pipeline = build(data_dir=DATA, candidate_models=[SMOL, GEMMA], model_priors={SMOL: 0.1})
    config = pipeline.system.default_config().replace("context_model_selector", HEURISTIC_ROUTE)
    with pytest.raises(UserError, match="model_priors has no score for 'local/gemma-3-270m'"):
        pipeline.system.run(pipeline.splits.val[:1], config, context(ScriptedLM(reply)))


@pytest.mark.parametrize("models", [[SMOL, SMOL], [""]])
def test_bad_candidate_lists_are_user_errors(models):
    with pytest.raises(UserError, match="candidate_models"):
        build(data_dir=DATA, candidate_models=models)


def test_the_candidates_start_with_the_runs_lm_and_add_the_embedded_pair_only_offline():
    served = "hosted_vllm/my-model"
    assert build(data_dir=DATA, lm_model=served).info["candidate_models"] == [served]
    listed = build(data_dir=DATA, lm_model=served, candidate_models=["openai/gpt-4o", served])
    assert listed.info["candidate_models"] == [served, "openai/gpt-4o"]
    assert build(data_dir=DATA).info["candidate_models"] == [SMOL, GEMMA]


# -- end to end -------------------------------------------------------------------------------
def test_pipeline_runs_end_to_end_on_real_rows(pipeline):
    examples = pipeline.splits.test[:6]
    result = evaluate(pipeline, pipeline.system.default_config(), examples, context(ScriptedLM(reply)))
    expected = sum(ex["answer"] == "yes" for ex in examples) / len(examples)
    assert 0 < expected < 1 and result["mean"] == pytest.approx(expected) and result["n"] == 6


def test_single_llm_task_asks_once_and_parses_the_decision(pipeline):
    task = pipeline.single_llm
    messages = task.prompt(pipeline.splits.test[0])
    assert pipeline.splits.test[0]["context"] in messages[-1]["content"]
    assert task.parse("I think so. Answer: no") == {"answer": "no"}


@pytest.mark.parametrize("lm, expected", [([], [SMOL, GEMMA]),
                                          (["lm=vllm", "lm.model=hosted_vllm/served"], ["hosted_vllm/served"])])
def test_hydra_config_builds_the_pipeline_on_the_runs_lm(lm, expected):
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(ROOT / "conf"), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["pipeline=pubmedqa", *lm])
    pipeline = instantiate(cfg.pipeline, data_dir=str(DATA), _convert_="all")
    assert pipeline.info["candidate_models"] == expected
    assert pipeline.system.components["context_model_selector"].heuristic_score({}, {"context_model": GEMMA}) == 0.27
