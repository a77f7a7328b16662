"""Amazon's stratified subsets (pipeline.stratified_subsets=true): the same examples in an order whose
every prefix holds the source files in the split's proportions; off by default, so earlier runs keep
their subsets (the official order: every English row first)."""
from __future__ import annotations

from optimas_pipelines.amazon import floors as amazon_floors
from optimas_pipelines.amazon.data import load_splits, source_of, stratified_order
from tests.test_floors import write_amazon_data


def test_every_prefix_holds_the_sources_in_their_share():
    rows = [{"id": f"en-{i}"} for i in range(3)] + [{"id": f"multilingual-{i}"} for i in range(9)]
    ordered = stratified_order(rows)
    assert sorted(r["id"] for r in ordered) == sorted(r["id"] for r in rows)
    for n in range(1, len(rows) + 1):
        english = sum(source_of(r) == "en" for r in ordered[:n])
        assert abs(english - n * 3 / 12) < 1, (n, english)
    # within a source the file order is kept
    assert [r["id"] for r in ordered if source_of(r) == "multilingual"] == [f"multilingual-{i}" for i in range(9)]


def test_the_default_keeps_the_official_order_and_the_floors_follow_the_runs_setting(tmp_path):
    write_amazon_data(tmp_path, lambda prefix, i: 0)
    official = load_splits(str(tmp_path)).train
    assert [source_of(e) for e in official[:8]] == ["en"] * 8  # the official recipe: English first
    config = {"data_dir": str(tmp_path), "budget": {"train_size": 4}}
    assert [e["id"] for e in amazon_floors.train_examples(config)] == ["en-0", "en-1", "en-2", "en-3"]
    config["pipeline"] = {"stratified_subsets": True}
    sources = [source_of(e) for e in amazon_floors.train_examples(config)]
    assert sources.count("en") == 2 and sources.count("multilingual") == 2  # 8 and 5 of 13 training rows
