"""Where the Hydra configs live, what each config group offers, and the user's own config folders.

Besides conf/, Hydra's own ways add config folders: `--config-dir DIR`, `hydra.searchpath=[DIR, ...]`,
and (an optimas shorthand) a group set to a YAML file by path, `pipeline=path/to/qa_chain.yaml`.
"""
from __future__ import annotations

import hashlib
import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from optimas_cli.errors import UserError

# The bundled config tree: optimas_cli/configs, a symlink to the repository's conf/ in a checkout (editable
# install) and conf/'s copy inside an installed wheel (pyproject's package-data), so one path serves both.
# OPTIMAS_CONF_DIR replaces the whole tree; --config-dir and hydra.searchpath add to it.
CONF_DIR = Path(os.environ.get("OPTIMAS_CONF_DIR") or Path(__file__).resolve().parent / "configs").resolve()
GROUPS = ("pipeline", "method", "lm", "lrf", "budget", "tracking", "experiment")
CONFIG_DIR_FLAGS = ("--config-dir", "-cd")
SEARCHPATH = "hydra.searchpath"


def options(group: str, roots: tuple[Path, ...] = ()) -> list[str]:
    """The names a group accepts, e.g. options('pipeline') -> ['amazon', 'hotpotqa', ...], with those
    the extra config folders `roots` add."""
    names = set()
    for root in (CONF_DIR, *roots):
        folder = root / group
        names |= {p.stem for p in folder.glob("*.yaml")} if folder.is_dir() else set()
    return sorted(names)


@dataclass
class SearchPath:
    """The user's config folders on the command line, and the arguments rewritten for Hydra: a
    `group=file.yaml` becomes `group=file` with the file's folder on hydra.searchpath."""

    args: list[str]
    config_dirs: list[Path] = field(default_factory=list)  # --config-dir: Hydra adds them itself
    searched: list[Path] = field(default_factory=list)  # hydra.searchpath and the staged YAML files
    packages: list[str] = field(default_factory=list)  # pkg:// entries: passed on to Hydra as they are

    @property
    def roots(self) -> tuple[Path, ...]:
        return tuple(dict.fromkeys([*self.config_dirs, *self.searched]))

    def override(self, every_root: bool = False) -> list[str]:
        """The one hydra.searchpath override naming the extra folders (with --config-dir's too for
        `every_root`, where no Hydra app reads the flag); none when there are none."""
        roots = self.roots if every_root else tuple(dict.fromkeys(self.searched))
        entries = [*(f"file://{root}" for root in roots), *self.packages]
        return [f"{SEARCHPATH}=[{','.join(entries)}]"] if entries else []


def search_path(args: list[str]) -> SearchPath:
    """Collect --config-dir and hydra.searchpath folders, and turn group=<file.yaml> into a group option."""
    found = SearchPath([])
    out: list[str] = []
    i = 0
    while i < len(args):
        flag, eq, value = args[i].partition("=")
        if flag in CONFIG_DIR_FLAGS:
            if not eq:  # `--config-dir DIR`: the folder is the next argument
                value = args[i + 1] if i + 1 < len(args) else ""
                out.append(args[i])
                i += 1
            found.config_dirs.append(_folder(value, flag))
            out.append(args[i])
        elif flag.lstrip("+") == SEARCHPATH:  # re-added below, merged, as absolute paths
            for entry in _listed(value):
                if entry.startswith("pkg://"):
                    found.packages.append(entry)
                else:
                    found.searched.append(_folder(entry, SEARCHPATH))
        else:
            out.append(_yaml_option(args[i], found.searched))
        i += 1
    found.args = with_overrides(out, found.override())
    return found


def with_overrides(args: list[str], extra: list[str]) -> list[str]:
    """`args` with `extra` overrides among its own: Hydra's parser takes the overrides as one run of
    positional arguments, so one placed after a flag (`--cfg job`) would be refused."""
    at = next((i for i, a in enumerate(args) if "=" in a and not a.startswith("-")), 0)
    return [*args[:at], *extra, *args[at:]]


def _listed(value: str) -> list[str]:
    inner = value.strip()
    if inner.startswith("[") and inner.endswith("]"):
        inner = inner[1:-1]
    return [v.strip().strip("'\"") for v in inner.split(",") if v.strip()]


def _folder(value: str, where: str) -> Path:
    path = Path(value.removeprefix("file://")).expanduser()
    if not path.is_dir():
        raise UserError(f"{where} {value!r} is not a folder", "pass a folder holding group folders, e.g. conf/pipeline/my.yaml")
    return path.resolve()


def _yaml_option(arg: str, roots: list[Path]) -> str:
    """`pipeline=path/to/qa.yaml` -> `pipeline=qa`, with a folder holding pipeline/qa.yaml added to roots:
    the file's grandparent when the file already sits in a folder named for its group, else a staging
    folder (under the temp dir, named by the file's path) that links to it."""
    key, eq, value = arg.partition("=")
    group = key.lstrip("+~")
    if not eq or group not in GROUPS or "," in value or not value.endswith((".yaml", ".yml")):
        return arg
    path = Path(value).expanduser()
    if not path.is_file():
        raise UserError(f"{group}={value}: no such file", f"pass a {group} YAML file, or one of `optimas list`'s {group}s")
    path = path.resolve()
    if path.parent.name == group:
        roots.append(path.parent.parent)
    else:
        digest = hashlib.sha1(str(path).encode()).hexdigest()[:12]
        stage = Path(tempfile.gettempdir()) / f"optimas-conf-{digest}"
        link = stage / group / f"{path.stem}.yaml"
        link.parent.mkdir(parents=True, exist_ok=True)
        if not (link.is_symlink() and link.resolve() == path):
            link.unlink(missing_ok=True)
            link.symlink_to(path)
        roots.append(stage)
    return f"{key}={path.stem}"


def refuse_sweep(args: list[str], fix: str) -> None:
    """A comma list or range (`pipeline=a,b`) is a sweep, which only `-m` runs: without it Hydra would stop
    with a five-line error (`run`) or quietly use the first value (`plan`). One line instead, with `fix`."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        parsed = OverridesParser.create().parse_overrides(overrides)
    except HydraException:
        return  # check_overrides reports the malformed override
    sweep = next((o.input_line for o in parsed if o.is_sweep_override()), None)
    if sweep is not None:
        raise UserError(f"{sweep} is a sweep over several values", fix)
