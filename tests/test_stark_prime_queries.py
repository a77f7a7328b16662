"""STaRK-Prime queries and splits, read from the REAL files in the shared data folder."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from optimas_cli.errors import DataError, UserError
from optimas_pipelines.stark_prime import build
from optimas_pipelines.stark_prime import data as stark_data
from optimas_pipelines.stark_prime.queries import (
    OFFICIAL_SIZES,
    load_splits,
    query_files,
    read_queries,
    read_split,
    select_queries,
)

DATA_DIR = Path(os.environ.get("OPTIMAS_DATA_DIR") or Path(__file__).resolve().parents[2] / "shared" / "data")
REAL = DATA_DIR / "stark_prime" / "stark_qa.csv"
needs_real = pytest.mark.skipif(not REAL.exists(), reason=f"real STaRK-Prime queries not at {REAL}")


@pytest.fixture(scope="module")
def real():
    return load_splits(*query_files(DATA_DIR))


@needs_real
def test_real_split_sizes_match_the_official_files(real):
    queries, splits = real
    assert {s: len(ids) for s, ids in splits.items()} == {"train": 6162, "val": 2241, "test": 2801}
    assert len(queries) == 11204  # records; the file has more lines because some queries span two
    all_ids = [i for ids in splits.values() for i in ids]
    assert len(set(all_ids)) == len(all_ids) == len(queries)  # disjoint and covering


@needs_real
def test_real_answer_ids_are_parsed_as_node_id_lists(real):
    queries, _ = real
    assert queries[9117].answer_ids == (4607,)  # the paper code's first training example
    assert queries[9117].text.startswith("Is the lens-specific intermediate filament-like protein, filensin")
    assert all(q.answer_ids and all(isinstance(a, int) for a in q.answer_ids) for q in queries.values())
    assert sum(len(q.answer_ids) > 1 for q in queries.values()) > 1000  # many queries have several answers


@needs_real
def test_official_selection_keeps_the_first_ids_in_file_order(real):
    _, splits = real
    chosen = select_queries(splits, OFFICIAL_SIZES)
    assert {s: len(ids) for s, ids in chosen.items()} == {"train": 250, "val": 25, "test": 100}
    first_lines = (DATA_DIR / "stark_prime" / "train.index").read_text().split()[:250]
    assert chosen["train"] == [int(x) for x in first_lines]
    assert chosen["train"][0] == 9117
    assert select_queries(splits, {"train": None, "val": 3, "test": 0})["train"] == splits["train"]


def test_malformed_query_row_names_file_and_line(tmp_path):
    bad = tmp_path / "stark_qa.csv"
    bad.write_text('id,query,answer_ids\n1,"a good one",[5]\n2,"spans\ntwo lines","[6, 7]"\n3,broken,[x]\n')
    with pytest.raises(DataError, match=r"stark_qa.csv line 5"):
        read_queries(bad)
    bad.write_text('id,query,answer_ids\n1,"fine",[5]\n2,"no answers",[]\n')
    with pytest.raises(DataError, match="line 3"):
        read_queries(bad)


def test_malformed_split_line_is_reported(tmp_path):
    path = tmp_path / "train.index"
    path.write_text("1\n2\nthree\n")
    with pytest.raises(DataError, match=r"train.index line 3"):
        read_split(path)


@needs_real
def test_offline_without_a_knowledge_base_fails_with_one_clear_message(tmp_path, monkeypatch):
    monkeypatch.setattr(stark_data, "stark_qa_installed", lambda: False)
    with pytest.raises(UserError) as err:
        build(DATA_DIR, cache_dir=tmp_path / "cache")
    message = str(err.value)
    for needed in ("PrimeKG knowledge base", "node texts and relations", "only the queries and splits",
                   "pip install stark-qa", "snap-stanford/stark", "emb_dir=", "kb_dir=", "candidates_file=",
                   "optimas_pipelines/stark_prime/README.md", str(tmp_path / "cache")):
        assert needed in message
    assert not (tmp_path / "cache").exists()  # nothing half-built is left behind


def test_missing_query_files_offline_say_where_they_belong(tmp_path, monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "stark_qa", None)  # as if not installed
    with pytest.raises(DataError, match=r"stark_prime/stark_qa.csv.*data_dir"):
        query_files(tmp_path)
