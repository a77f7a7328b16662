"""The report counts the capped quantity beside each cap (optimization runs, not the test): SysDPO s0 on Amazon
read as 1,320.67 runs under a cap of 617 (a 2x overshoot) where it spent 666.67 optimizing (8% over)."""
from __future__ import annotations

from optimas_cli.report.cap_tables import cap_table, stopped_lines
from optimas_cli.report.caps import ended_by_cap
from optimas_cli.report.paper_tables import table2
from tests.test_report import traced_run

# Amazon sysdpo-s0's ledger, as committed (docs/results/amazon-cpu/runs/amazon-sysdpo-s0/results.json)
SYSDPO = {"runs": 1320.6667, "paper_runs": 960.6667, "calls": 0, "tokens": 0, "caps": {"max_runs": 617.0},
          "by_phase": {"test": {"runs": 297.0}, "test_initial": {"runs": 297.0}, "final_validation": {"runs": 60.0},
                       "validation": {"runs": 80.0}, "local_optimization": {"runs": 586.6667}}}


def test_the_cap_table_sets_what_was_spent_optimizing_beside_the_cap(tmp_path):
    sysdpo = traced_run(tmp_path / "s", "sysdpo", [1.0, 0.0], ledger=SYSDPO, stopped="max_runs")
    within = traced_run(tmp_path / "d", "dspy", [0.0, 0.0],
                        ledger={"runs": 400.0, "caps": {"max_runs": 617.0}, "by_phase": {"test": {"runs": 100.0}}})
    free = traced_run(tmp_path / "o", "optimas", [1.0, 1.0])
    table = cap_table([sysdpo, within, free], "src")
    rows = {r[1]: r[3:] for r in table.rows}
    assert rows == {"SysDPO": ["budget.max_runs", "617", "666.6667", "49.6667 (+8.0%)"],
                    "DSPy": ["budget.max_runs", "617", "300", "—"]}
    assert [ended_by_cap(r) for r in (sysdpo, within, free)] == [True, False, False]
    stopped = "\n".join(stopped_lines([sysdpo]))
    assert f"| {tmp_path / 's'} | budget.max_runs | 617 | 666.6667 | 1320.67 |" in stopped


def test_table2_marks_the_cells_a_cap_ended(tmp_path):
    sysdpo = traced_run(tmp_path / "s", "sysdpo", [1.0, 0.0], ledger=SYSDPO, stopped="max_runs")
    free = traced_run(tmp_path / "o", "optimas", [1.0, 1.0])
    cells = table2([sysdpo, free], "src").rows[0]
    assert sum("‡" in c for c in cells) == 1 and "‡" in next(c for c in cells if c.startswith("0.5000"))


def test_table2_marks_the_cells_whose_router_selects_among_outputs_at_test(tmp_path):
    """A {"route": "lrf"} router runs every value at test and keeps the output r_k scores best: a selection its
    test score includes (on the synthetic routers' sampled drafts, a best-of-n), so the cell says so; a router that
    runs one value ({"route": "lrf_pre"}) or a fixed value does not select."""
    routed = traced_run(tmp_path / "o", "optimas", [1.0, 1.0], best_config={"a": "x", "r": {"route": "lrf"}})
    pre = traced_run(tmp_path / "n", "optimas_no_adapt", [1.0, 0.0], best_config={"a": "x", "r": {"route": "lrf_pre"}})
    plain = traced_run(tmp_path / "t", "tpe", [0.0, 0.0], best_config={"a": "x", "r": "m"})
    table = table2([routed, pre, plain], "src")
    marked = [c for c in table.rows[0] if "§" in c]
    assert len(marked) == 1 and marked[0].startswith("1.0000")
    assert '§: a run of the cell routes by r_k after running every value' in table.footnote
