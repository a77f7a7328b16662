"""The layering is a contract, written once in .importlinter: imports point down, no module imports itself back
through others, optimas_pipelines uses the public API only. `make lint` runs it too; CI runs only this."""
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

from tests.import_contracts import AcyclicModulesContract

ROOT = Path(__file__).resolve().parents[1]


def test_the_import_contracts_hold(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)  # lint-imports reads ./.importlinter and imports tests.import_contracts from here
    status = lint_imports(no_cache=True, no_logo=True)
    assert status == 0, capsys.readouterr().out


def circles_in(tmp_path, monkeypatch, files: dict[str, str]) -> list:
    for name, source in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(source)
    monkeypatch.syspath_prepend(str(tmp_path))
    contract = AcyclicModulesContract(name="no circles", session_options={}, contract_options={})
    return contract.check(grimp.build_graph("pkg", cache_dir=None), verbose=False).metadata["circles"]


def test_a_circle_through_a_package_and_a_function_local_import_is_found(tmp_path, monkeypatch):
    circles = circles_in(tmp_path, monkeypatch, {
        "pkg/__init__.py": "def dispatch():\n    from pkg import a\n",  # hidden inside a function
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "import pkg\n",  # back to the package's __init__: no sibling check sees this one
        "pkg/c.py": "import pkg.a\n",  # imports the circle, is not in it
    })
    assert circles == [[("pkg", "pkg.a", [2]), ("pkg.a", "pkg.b", [1]), ("pkg.b", "pkg", [1])]]


def test_imports_that_only_point_down_make_no_circle(tmp_path, monkeypatch):
    assert circles_in(tmp_path, monkeypatch, {
        "pkg/__init__.py": "from pkg import a\n",
        "pkg/a.py": "from pkg import b\n",
        "pkg/b.py": "import json\n",
    }) == []
