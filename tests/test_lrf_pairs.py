"""PreferencePair files: round trips, resuming after a killed write, malformed lines."""
from __future__ import annotations

import pytest

from optimas_cli.errors import DataError
from optimas_cli.lrf.pairs import PreferencePair, append_pairs, load_pairs


def pair(i: int, component: str = "gen") -> PreferencePair:
    return PreferencePair(component, {"question": f"q{i}", "passages": ["a", "b"]}, {"answer": f"good {i}"},
                          {"answer": f"bad {i}"}, 0.75, 0.25, {"round": i})


def test_gap_and_round_trip(tmp_path):
    pairs = [pair(0), pair(1, "router")]
    assert pairs[0].gap == 0.5
    path = tmp_path / "pairs.jsonl"
    assert append_pairs(path, pairs) == 2
    assert load_pairs(path) == pairs


def test_a_killed_collection_resumes_without_losing_or_corrupting_pairs(tmp_path, caplog, monkeypatch):
    from optimas_cli.lrf import pairs as module

    # A library imported by an earlier test in this worker may have configured logging with
    # disable_existing_loggers (the warning then never reaches caplog): the check is about the warning
    monkeypatch.setattr(module.log, "disabled", False)
    path = tmp_path / "pairs.jsonl"
    append_pairs(path, [pair(0), pair(1)])
    with open(path, "a", encoding="utf-8") as fh:  # the writer died half-way through line 3
        fh.write('{"component": "gen", "context": {"quest')
    assert load_pairs(path) == [pair(0), pair(1)]
    assert "truncated last line" in caplog.text
    append_pairs(path, [pair(2)])  # resuming cuts the partial line first
    assert load_pairs(path) == [pair(0), pair(1), pair(2)]
    assert path.read_text().count("\n") == 3


def test_a_malformed_line_in_the_middle_is_an_error_naming_the_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    append_pairs(path, [pair(0)])
    with open(path, "a", encoding="utf-8") as fh:
        fh.write('{"component": "gen"}\n')
    append_pairs(path, [pair(1)])
    with pytest.raises(DataError, match=r"line 2"):
        load_pairs(path)
    with pytest.raises(DataError, match="does not exist"):
        load_pairs(tmp_path / "missing.jsonl")
