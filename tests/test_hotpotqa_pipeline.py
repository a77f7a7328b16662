"""HotpotQA on the real data: splits, loader errors, hub fallback, BM25 retrieval, the system end to end."""
from __future__ import annotations

import json
import os
import re
import shutil
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlparse

import pytest

from optimas_cli.errors import DataError, UserError
from optimas_cli.system import RunContext, RunLedger
from optimas_cli.system.evaluate import evaluate, rewards
from optimas_pipelines.hotpotqa import build, data
from optimas_pipelines.hotpotqa.colbert import ColBERTv2Search
from optimas_pipelines.hotpotqa.passage_search import BM25PassageIndex, Passage
from optimas_pipelines.hotpotqa.test_ids import TEST_IDS
from tests.fakes import ScriptedLM

ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("OPTIMAS_DATA_DIR") or ROOT.parent / "shared" / "data")
HOTPOT = DATA_DIR / "hotpotqa"
ALL_FILES = (data.TEST_FILE, *data.POOL_FILES)

pytestmark = pytest.mark.skipif(not (HOTPOT / data.TEST_FILE).exists(), reason="needs the shared data folder")


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("OPTIMAS_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(scope="module")
def pipeline(cache_dir):
    return build(data_dir=str(DATA_DIR))


def _copy_data(tmp_path: Path) -> Path:
    (tmp_path / "hotpotqa").mkdir()
    for name in ALL_FILES:
        shutil.copy(HOTPOT / name, tmp_path / "hotpotqa" / name)
    return tmp_path


# -- splits -------------------------------------------------------------------------------------
def test_default_splits_are_the_papers(pipeline):
    splits = pipeline.splits
    assert splits.sizes() == {"train": 832, "val": 250, "test": 100}
    sample = json.loads((HOTPOT / data.TEST_FILE).read_text())
    assert [ex["id"] for ex in splits.test] == [row["id"] for row in sample] == list(TEST_IDS)
    train, val, test = ({ex["id"] for ex in part} for part in (splits.train, splits.val, splits.test))
    assert not (train & test) and not (val & test) and not (train & val)
    assert len(train) == 832 and len(val) == 250
    assert pipeline.info["test_questions_removed_from_pool"] == 18
    assert pipeline.info["corpus_paragraphs"] > 11_000


def test_examples_carry_the_system_input_and_the_gold_fields(pipeline):
    ex = pipeline.splits.test[0]
    assert ex["question"].startswith("VIVA Media AG")
    assert ex["gold_answer"] == "Gesellschaft mit beschränkter Haftung"
    assert ex["supporting_titles"] == ["VIVA Media", "Gesellschaft mit beschränkter Haftung"]


def test_smaller_budgets_subsample_without_moving_questions_between_splits():
    rows = data.load_rows(DATA_DIR, seed=0)
    full, small = data.make_splits(rows), data.make_splits(rows, train_size=50, val_size=20, test_size=10)
    assert small.sizes() == {"train": 50, "val": 20, "test": 10}
    assert {e["id"] for e in small.train} <= {e["id"] for e in full.train}
    assert {e["id"] for e in small.val} <= {e["id"] for e in full.val}
    other_seed = data.make_splits(data.load_rows(DATA_DIR, seed=1))
    assert [e["id"] for e in other_seed.train] != [e["id"] for e in full.train]
    with pytest.raises(UserError, match="exceeds"):
        data.make_splits(rows, train_size=900, val_size=250)


# -- loader errors and the hub fallback ---------------------------------------------------------
def test_a_malformed_jsonl_row_names_its_file_and_line(tmp_path):
    root = _copy_data(tmp_path)
    path = root / "hotpotqa" / "rpt_dev.jsonl"
    lines = path.read_text().splitlines()
    broken = json.loads(lines[6])
    del broken["context"]
    lines[6] = json.dumps(broken)
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"rpt_dev\.jsonl line 7.*context"):
        data.load_rows(root)
    lines[6] = "{not json"
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(DataError, match=r"rpt_dev\.jsonl line 7"):
        data.load_rows(root)


def test_a_malformed_test_entry_names_its_file_and_entry(tmp_path):
    root = _copy_data(tmp_path)
    path = root / "hotpotqa" / data.TEST_FILE
    rows = json.loads(path.read_text())
    rows[3]["context"]["sentences"].pop()
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=rf"{re.escape(data.TEST_FILE)} entry 3.*titles"):
        data.load_rows(root)


def test_without_files_the_loader_uses_the_hub(tmp_path, monkeypatch):
    import datasets

    hub_rows = json.loads((HOTPOT / data.TEST_FILE).read_text())[::-1]
    hub_rows += [json.loads(line) for line in (HOTPOT / "rpt_train.jsonl").read_text().splitlines()[:120]]
    asked = []

    def fake_load_dataset(name, config, split):
        asked.append((name, config, split))
        return datasets.Dataset.from_list(hub_rows)

    monkeypatch.setattr(datasets, "load_dataset", fake_load_dataset)
    rows = data.load_rows(tmp_path, seed=0)  # an empty data directory
    assert asked == [("hotpotqa/hotpot_qa", "distractor", "validation")]
    assert [r["id"] for r in rows.test] == list(TEST_IDS)  # the paper's test set, in its order
    others = {r["id"] for r in hub_rows} - set(TEST_IDS)
    assert {r["id"] for r in rows.pool} == others  # fewer than the offline pool size: all of them
    assert rows.source == "hotpotqa/hotpot_qa"


def test_without_files_or_network_the_error_says_how_to_fix_it(tmp_path, monkeypatch):
    import datasets

    def offline(*_args, **_kwargs):
        raise ConnectionError("hub unreachable")

    monkeypatch.setattr(datasets, "load_dataset", offline)
    with pytest.raises(DataError, match="data_dir") as err:
        data.load_rows(tmp_path)
    assert "hub unreachable" in str(err.value)


# -- retrieval ----------------------------------------------------------------------------------
def test_bm25_finds_a_gold_paragraph_among_everyones_distractors(pipeline):
    search = pipeline.system.components["retriever"].search
    question = pipeline.splits.test[0]["question"]
    titles = [p.title for p in search.search([question], 5)[0]]
    assert titles[0] == "VIVA Media"


def test_retriever_k_sets_the_number_of_passages(pipeline):
    retriever = pipeline.system.components["retriever"]
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    batch = [{"search_keywords": "VIVA Media, 2004"}, {"search_keywords": ""}]
    for k in retriever.choices:
        content, empty = retriever.execute(batch, k, ctx)
        assert len(content["retrieve_content"].splitlines()) == k
        assert empty["retrieve_content"] == ""  # no keywords, nothing retrieved


def test_the_reward_model_reads_every_retriever_k_differently(pipeline):
    """MiniLM reads 256 tokens: as plain text, top-5, top-10 and top-25 passages all begin alike and
    their pairs would be unlearnable. The retriever's declared view shows k and the titles instead."""
    from transformers import AutoTokenizer

    from optimas_cli.lrf.backbone import resolve_backbone
    from optimas_cli.lrf.text import TextRenderer, component_info

    retriever = pipeline.system.components["retriever"]
    info = component_info("retriever", retriever)
    renderer = TextRenderer(AutoTokenizer.from_pretrained(resolve_backbone("default")), 256)
    ctx = RunContext(ledger=RunLedger(len(pipeline.system)))
    inputs = [{"search_keywords": ex["question"]} for ex in pipeline.splits.train[:8]]
    outputs = {k: retriever.execute(inputs, k, ctx) for k in retriever.choices}
    for i, x in enumerate(inputs):
        texts = {k: renderer.render(info, x, outputs[k][i]) for k in retriever.choices}
        assert len(set(texts.values())) == len(retriever.choices), texts
        for k, text in texts.items():
            assert f"Output retrieve_content: {k} passages: " in text
            top = outputs[k][i]["retrieve_content"].splitlines()[0].split(" | ")[0]
            assert top in text  # the titles, not the first passage's opening words
            assert len(renderer.tokenizer(text)["input_ids"]) <= 256


def test_the_index_is_cached_on_disk(tmp_path):
    passages = [Passage("Danube", "The Danube flows through Budapest."), Passage("Seine", "The Seine flows through Paris.")]
    BM25PassageIndex._loaded.clear()
    built = BM25PassageIndex.load_or_build(passages, cache_dir=tmp_path)
    BM25PassageIndex._loaded.clear()
    loaded = BM25PassageIndex.load_or_build(passages, cache_dir=tmp_path)
    assert built.build_seconds is not None and loaded.build_seconds is None
    assert [p.title for p in loaded.search(["river in Paris"], 2)[0]] == ["Seine"]
    assert loaded.search(["zzzz unknownword"], 2) == [[]]


class _ColBERTStub(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 (the http.server API)
        params = parse_qs(urlparse(self.path).query)
        self.server.queries.append((params["query"][0], int(params["k"][0])))
        hits = [{"text": f"Title {i} | Abstract {i} for {params['query'][0]}.", "score": 1.0 / (i + 1)} for i in range(30)]
        body = json.dumps({"topk": hits}).encode() if "bad" not in params["query"][0] else b"<html>"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def test_colbert_client_speaks_the_colbertv2_protocol():
    server = HTTPServer(("127.0.0.1", 0), _ColBERTStub)
    server.queries = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        search = ColBERTv2Search(f"http://127.0.0.1:{server.server_port}/wiki17_abstracts", timeout=5)
        result = search.search(["VIVA Media", ""], 5)
        assert server.queries == [("VIVA Media", 5)]
        assert [p.title for p in result[0]] == [f"Title {i}" for i in range(5)] and result[1] == []
        assert result[0][0].text == "Abstract 0 for VIVA Media."
        with pytest.raises(UserError, match="topk"):
            search.search(["bad query"], 5)
    finally:
        server.shutdown()
        server.server_close()
    with pytest.raises(UserError, match="failed"):
        ColBERTv2Search(f"http://127.0.0.1:{server.server_port}/x", timeout=2).search(["q"], 1)


# -- the system end to end ------------------------------------------------------------------------
def _scripted_lm(gold_by_question: dict[str, str]) -> ScriptedLM:
    """Plays each component the way a chatty model would (labels, extra lines), answering from a table."""

    def field(prompt: str, label: str) -> str:
        return re.search(rf"^{label}: (.*)$", prompt, re.M).group(1)

    def answer(request):
        prompt = request.messages[-1]["content"]
        if prompt.startswith("Rephrase"):
            return f"Rewritten Query: {field(prompt, 'Question')}\nI kept every name."
        if prompt.startswith("Extract"):
            return field(prompt, "Query")
        if prompt.startswith("Using the retrieved"):
            return "Hints: " + field(prompt, "Retrieved Information")[:200]
        return f"**Answer:** {gold_by_question.get(field(prompt, 'Query'), 'I do not know')}."

    return ScriptedLM(answer)


def test_the_pipeline_runs_end_to_end_on_real_test_rows(pipeline):
    examples = pipeline.splits.test[:3]
    gold = {ex["question"]: ex["gold_answer"] for ex in examples[:2]}  # the third is answered wrongly
    lm = _scripted_lm(gold)
    system = pipeline.system
    ctx = RunContext(ledger=RunLedger(len(system)), lm=lm)
    trajectories = system.run(examples, system.default_config(), ctx)
    scores = rewards(pipeline, trajectories)
    assert all(isinstance(s, float) for s in scores)
    assert scores[:2] == [1.0, 1.0] and scores[2] == 0.0
    first = trajectories[0].state
    assert first["rewritten_query"] == examples[0]["question"]
    assert len(first["retrieve_content"].splitlines()) == 5  # the default k
    assert first["retrieve_content"].startswith("VIVA Media | ")
    assert first["hints"].startswith("VIVA Media | ")
    by_component = {c: r for c, r in lm.requests}
    assert list(by_component) == ["question_rewriter", "info_extractor", "hint_generator", "answer_generator"]
    assert by_component["answer_generator"].max_tokens == 32 and by_component["hint_generator"].max_tokens == 96
    assert evaluate(pipeline, system.default_config(), examples, ctx)["mean"] == pytest.approx(2 / 3)


def test_single_llm_task_is_one_call_on_the_raw_question(pipeline):
    task = pipeline.single_llm
    ex = pipeline.splits.test[0]
    messages = task.prompt(ex)
    assert len(messages) == 1 and ex["question"] in messages[0]["content"]
    assert task.parse("Answer: Gesellschaft mit beschränkter Haftung.") == {"answer": "Gesellschaft mit beschränkter Haftung"}
    assert pipeline.metric(ex, task.parse("Answer: Gesellschaft mit beschränkter Haftung.")) == 1.0


def test_the_hydra_config_builds_the_pipeline(cache_dir):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    conf = OmegaConf.load(ROOT / "conf" / "pipeline" / "hotpotqa.yaml")
    pipeline = instantiate(conf, data_dir=str(DATA_DIR), train_size=50, val_size=20)
    assert pipeline.splits.sizes() == {"train": 50, "val": 20, "test": 100}
    assert pipeline.system.default_config()["retriever"] == 5
    with pytest.raises(UserError, match="k=3"):
        build(data_dir=str(DATA_DIR), k=3)
