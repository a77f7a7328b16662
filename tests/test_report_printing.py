"""`optimas report` prints every number whole: rich shrinks a table wider than the console until its cells
read '0.…', so a pipe gets the Markdown as report.md holds it and a narrow terminal gets a too-wide table as
Markdown lines."""
from __future__ import annotations

import io
import re
from collections import Counter
from pathlib import Path

import pytest
from rich.console import Console
from rich.markdown import Markdown

from optimas_cli.cli import main as cli_main
from optimas_cli.report.cli import print_report
from tests.test_report_seeds import write_run

NUMBER = re.compile(r"[-+]?\d[\d,]*(?:\.\d+)?%?")


@pytest.fixture
def report(tmp_path: Path) -> tuple[Path, Path]:
    """Two seeds of Unoptimized and Optimas: Table 2 and its 11-column paired table, far wider than 80."""
    runs = tmp_path / "runs"
    for seed in (0, 1):
        base = [0.0, 1.0, 0.0, 0.0, 1.0, 0.0, 0.25, 0.5]
        write_run(runs / f"unoptimized-s{seed}", method="unoptimized", seed=seed, scores=base)
        write_run(runs / f"optimas-s{seed}", method="optimas", seed=seed,
                  scores=[min(1.0, s + 0.125 * (seed + 1)) for s in base], initial=base)
    return runs, tmp_path / "out"


def assert_whole(markdown: str, printed: str) -> None:
    missing = Counter(NUMBER.findall(markdown)) - Counter(NUMBER.findall(printed))
    assert not missing, f"numbers of report.md cut or missing from the printed report: {sorted(missing)}"


def test_a_pipe_gets_report_md_as_it_is(report, capsys, monkeypatch):
    for forcing in ("FORCE_COLOR", "TTY_COMPATIBLE"):  # either would make rich treat the capture as a terminal
        monkeypatch.delenv(forcing, raising=False)
    runs, out = report
    assert cli_main(["report", str(runs), "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    text = (out / "report.md").read_text()
    assert text in printed
    assert_whole(text, printed)


def test_an_80_column_terminal_gets_every_number_whole(report):
    runs, out = report
    assert cli_main(["report", str(runs), "--out", str(out)]) == 0
    text = (out / "report.md").read_text()

    def terminal() -> Console:
        return Console(file=io.StringIO(), width=80, force_terminal=True, color_system=None, soft_wrap=True)

    shrunk = terminal()
    shrunk.print(Markdown(text))
    assert "…" in shrunk.file.getvalue()  # the fixture's tables are wide enough to be cut when rich renders them

    console = terminal()
    print_report(console, text)
    printed = console.file.getvalue()
    assert "…" not in printed
    assert_whole(text, printed)
