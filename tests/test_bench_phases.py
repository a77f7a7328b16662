"""`make bench`'s per-phase records and tables: the ledger's running peak RSS and prefill/decode split at
each phase's end, the bench's rows read from results.json (old revisions' too), its ratios and verdicts."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
from rich.console import Console

import optimas_cli.system.ledger as ledger_module
from optimas_cli.lm.client import LMClient
from optimas_cli.lm.local.clock import ENGINE, EngineTotals
from optimas_cli.lm.types import LMRequest
from optimas_cli.system import RunLedger

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("bench_phases", ROOT / "scripts" / "bench_phases.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)


def test_each_phase_records_the_running_peak_rss_when_its_outermost_block_ends(monkeypatch):
    readings = iter([100.0, 300.0, 400.0, 500.0])  # getrusage's maxrss: it only grows
    monkeypatch.setattr(ledger_module, "peak_rss_mib", lambda: next(readings))
    ledger = RunLedger(1)
    with ledger.timed("collect"):
        pass
    with ledger.timed("train"), ledger.timed("train"):  # the nested block reads nothing
        pass
    with ledger.timed("collect"):
        pass
    summary = ledger.to_dict()
    phases = summary["by_phase"]
    assert phases["collect"]["peak_rss_mib_so_far"] == 400.0 and phases["train"]["peak_rss_mib_so_far"] == 300.0
    assert summary["peak_rss_mib"] == 500.0  # the process's, when the summary is written


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads VmRSS from /proc")
def test_the_peak_rss_reading_covers_memory_the_process_just_touched():
    status = Path("/proc/self/status").read_text()
    resident_mib = int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024
    held = bytearray(64 << 20)  # 64 MiB more, written so that it is resident
    held[::4096] = b"x" * len(held[::4096])
    assert ledger_module.peak_rss_mib() >= resident_mib + 60
    del held


def test_a_phase_records_the_prefill_and_decode_of_the_embedded_model_inside_it(tiny_model):
    lm = LMClient(model=tiny_model, temperature=0.0, max_tokens=6, cache=False)
    ledger = RunLedger(1)
    questions = ["What is the capital of France?", "Name a colour.", "Why do cats purr?"]
    with ledger.timed("validation"):
        lm.complete([LMRequest([{"role": "user", "content": q}]) for q in questions], phase="validation")
    with ledger.timed("lrf_training"):  # no generation in it
        pass
    phases, usage = ledger.to_dict()["by_phase"], lm.usage.to_dict()["by_phase"]["validation"]
    engine = phases["validation"]["engine"]
    assert engine["prefill_tokens"] == usage["prompt_tokens"] > 0
    assert engine["decode_tokens"] == usage["completion_tokens"] - len(questions)  # each row's first is prefill's
    assert engine["prefill_seconds"] > 0 and engine["decode_seconds"] > 0
    assert phases["lrf_training"]["engine"] == {"prefill_tokens": 0, "prefill_seconds": 0.0, "decode_tokens": 0,
                                                "decode_seconds": 0.0}


def test_a_checkpoint_inside_a_phase_keeps_its_prefill_decode_and_peak_for_the_resumed_process():
    first = RunLedger(1)
    with first.timed("optimize"):
        ENGINE.add(EngineTotals(prefill_tokens=100, prefill_seconds=1.0, decode_tokens=20, decode_seconds=2.0))
        checkpoint = first.state()  # the process is killed here
    resumed = RunLedger(1)
    resumed.restore(checkpoint)
    with resumed.timed("optimize"):
        ENGINE.add(EngineTotals(prefill_tokens=50, prefill_seconds=0.5, decode_tokens=10, decode_seconds=1.0))
    phase = resumed.to_dict()["by_phase"]["optimize"]
    assert phase["engine"] == {"prefill_tokens": 150, "prefill_seconds": 1.5, "decode_tokens": 30, "decode_seconds": 3.0}
    assert phase["peak_rss_mib_so_far"] >= round(checkpoint["peak_rss_mib"]["optimize"], 1) > 0  # shown to 0.1 MiB


def results(test_scores, with_new_fields=True, seconds=10.0, prompt_tokens=400) -> dict:
    """A results.json of the shape `optimas run` writes (an older revision's: without engine and RSS)."""
    timed = {"seconds": seconds, "runs": 1.0}
    if with_new_fields:
        timed |= {"peak_rss_mib_so_far": 900.0,
                  "engine": {"prefill_tokens": 400, "prefill_seconds": 2.0, "decode_tokens": 30, "decode_seconds": 3.0}}
    usage = {"calls": 8, "cache_hits": 3, "prompt_tokens": prompt_tokens, "completion_tokens": 35}
    return {"ledger": {"by_phase": {"validation": timed, "search_sample": {"seconds": 0.0}},
                       "lm": {"by_phase": {"validation": usage}, "total": usage}, "compute_by_kind": {}},
            "validation": {"per_example": [1.0]}, "test": {"per_example": test_scores},
            "history": [{"component": "a", "accepted": True, "val_candidate": 0.5}], "best_config": {"a": 1}}


def test_a_phase_row_holds_calls_cache_hits_tokens_throughput_and_running_peak():
    row = bench.phase_rows(results([1.0, 0.0]))["validation"]
    assert row == {"seconds": 10.0, "calls": 8, "cache_hits": 3, "prompt_tokens": 400, "completion_tokens": 35,
                   "prefill_tok_s": 200.0, "decode_tok_s": 10.0, "peak_rss_mib": 900.0}
    assert bench.phase_rows(results([1.0]))["search_sample"]["calls"] is None  # no LM usage recorded there


def test_ratios_are_rev_over_now_and_missing_fields_show_a_dash_not_a_crash():
    old = bench.record(results([1.0, 0.0], with_new_fields=False, seconds=30.0, prompt_tokens=800), 60.0, 2048.0)
    now = bench.record(results([1.0, 0.0]), 20.0, 1024.0)
    assert bench.ratio(30.0, 10.0) == 3.0 and bench.ratio(1.0, 0) is None and bench.ratio(None, 1.0) is None
    console = Console(record=True, width=200)
    bench.show(console, "amazon", now, old, "main")
    text = console.export_text()
    validation = next(line for line in text.splitlines() if "validation" in line and "3.00" in line)
    assert "2.00" in validation and bench.MISSING in validation  # seconds, prompt tokens; RSS unknown on REV
    run = next(line for line in text.splitlines() if line.strip("│ ").startswith("run") and "3.00" in line)
    assert "2.00" in run  # the whole process's peak RSS, measured from outside for both
    assert "amazon: results the same as main" in text


def test_a_changed_score_is_reported_as_a_different_result():
    before, now = bench.record(results([1.0, 0.0]), 1.0, 1.0), bench.record(results([1.0, 1.0]), 1.0, 1.0)
    assert bench.differences(before["outcome"], now["outcome"]) == ["test"]
    assert bench.differences(before["outcome"], bench.record(results([1.0, 0.0]), 2.0, 3.0)["outcome"]) == []


def test_the_make_run_slice_is_the_makefiles_run_command_with_a_smaller_budget():
    makefile = (ROOT / "Makefile").read_text()
    run = re.search(r"^run:.*\n\t\$\(BIN\)/optimas run (.*)$", makefile, re.M).group(1).split()
    assert bench.SLICES["make-run"][: len(run)] == run
    assert re.search(r"^bench:.*\n\t.*bench_phases\.py \$\(BENCH_ARGS\)$", makefile, re.M)


def test_an_unknown_revision_is_one_line_naming_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)
    with pytest.raises(SystemExit, match="unknown revision 'no-such-rev': give a commit, branch or tag"):
        bench.compare("no-such-rev", ["amazon"], tmp_path, False, Console())
