"""Imports point down: the command line sits on top, so no module below it may import it (a flow that
imported `optimas_cli.cli` made a circle, cli -> flows -> cli). Read from the source, no import needed."""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "optimas_cli"
ENTRY_POINTS = {"cli.py", "api.py"}  # the two tops: the command line and the Python API built on its checks


def imported_modules(source: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(source.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
    return names


def test_no_module_below_the_command_line_imports_it():
    offenders = [str(path.relative_to(PACKAGE)) for path in sorted(PACKAGE.rglob("*.py"))
                 if path.relative_to(PACKAGE).as_posix() not in ENTRY_POINTS
                 and "optimas_cli.cli" in imported_modules(path)]
    assert offenders == [], f"these import optimas_cli.cli from below it: {offenders}"
