"""Progress of long phases: one line per phase off a terminal, a live bar (nested phases) on one."""
from __future__ import annotations

from optimas_cli import progress


class CountingLM:
    """Stands in for the run's LM client: its usage grows as the phase spends."""

    def __init__(self):
        self.tokens, self.cost = 0, 0.0

    def usage(self):
        return {"total": {"tokens": self.tokens, "cost": self.cost}}


def test_off_a_terminal_each_phase_is_one_line_with_count_time_tokens_and_dollars(capsys, monkeypatch):
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    lm = CountingLM()
    for _ in progress.track(range(3), "test · 4 examples", lm=lm):
        lm.tokens += 500
        lm.cost += 0.001
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("test · 4 examples: 3/3 in ") and "1,500 tokens" in lines[0] and "$0.0030" in lines[0]


def test_a_phase_without_steps_or_spending_says_only_its_time(capsys, monkeypatch):
    monkeypatch.setattr(progress, "on_terminal", lambda: False)
    with progress.phase("iteration 1 · validation", lm=CountingLM()):
        pass
    line = capsys.readouterr().out.strip()
    assert line.startswith("iteration 1 · validation: in ") and line.endswith(" s")


def test_on_a_terminal_nested_phases_share_one_live_display(monkeypatch):
    monkeypatch.setattr(progress, "on_terminal", lambda: True)
    with progress.phase("outer", total=2) as outer:
        bar = progress._live["bar"]
        with progress.phase("inner", total=1) as inner:  # rich allows one live display: the same one
            assert progress._live["bar"] is bar and progress._live["open"] == 2
            inner()
        outer(2)
        assert progress._live["open"] == 1
    assert progress._live["bar"] is None and progress._live["open"] == 0
