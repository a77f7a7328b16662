"""Every command the README shows runs as written: each `make` target exists in the Makefile, each
`optimas` subcommand exists, and the overrides of `optimas run|plan|headroom|collect|train-lrf|eval` name
real config groups, options and keys (the config is composed and checked as `optimas` does before a run,
nothing is run). The docs' command blocks are held to the same rule."""
import os
import re
import shlex
import sys
from pathlib import Path

import pytest

from optimas_cli.cli import HELP
from optimas_cli.conf import search_path
from optimas_cli.errors import UserError
from optimas_cli.overrides import check_overrides

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
COMPOSED = {"run", "plan", "headroom", "collect", "train-lrf", "eval"}  # subcommands taking Hydra overrides
# A placeholder the reader fills in: <run>, <run folder>, <hotpotqa|pubmedqa>, ...
PLACEHOLDER = re.compile(r"<[^<>]*>")
# Where a command is meant to be typed, when it is not the repository root: the own-pipeline example's folder.
WORKING_DIR = {"qa_chain": ROOT / "examples" / "own_pipeline"}


def shell_lines(text: str) -> list[str]:
    """Commands in fenced sh/bash/console blocks and in indented (4-space) blocks, comments dropped and
    backslash continuations joined."""
    lines, fenced = [], False
    for raw in text.splitlines():
        if raw.startswith("```"):
            fenced = not fenced and raw.strip("`").strip() in ("sh", "bash", "shell", "console")
            continue
        if fenced or raw.startswith("    "):
            lines.append(raw.strip())
    joined, out = "", []
    for line in lines:
        joined += line.removesuffix("\\") + " " if line.endswith("\\") else line
        if not line.endswith("\\"):
            out.append(joined)
            joined = ""
    return [c for c in (strip_comment(c) for c in out) if c.startswith(("optimas ", "make ", ".venv/bin/optimas "))]


def strip_comment(line: str) -> str:
    return re.split(r"\s+#\s", line, maxsplit=1)[0].strip()


def inline_commands(text: str) -> list[str]:
    """Commands quoted in running text (`optimas run pipeline=...`); an elided one (`...`) is not whole."""
    return [c for c in re.findall(r"`((?:optimas|make) [^`]+)`", text) if "..." not in c]


def documented_commands() -> list[tuple[str, str]]:
    return [(doc.relative_to(ROOT).as_posix(), cmd) for doc in DOCS
            for cmd in dict.fromkeys([*shell_lines(doc.read_text()), *inline_commands(doc.read_text())])]


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w-]*):", (ROOT / "Makefile").read_text(), re.M))


def subcommands() -> set[str]:
    return set(re.findall(r"^  optimas ([\w-]+)", HELP, re.M))


def problem(command: str) -> str | None:
    """Why the command would not run as written (None: it would)."""
    # A placeholder standing alone (<same overrides>) or as a whole value (pipeline=<p>) is the reader's to
    # fill in; inside a value (config_file=<run>/best_config.json) it gets a stand-in, as the key must exist.
    command = re.sub(r"(^|\s)[\w.+~/-]*=?" + PLACEHOLDER.pattern + r"(?=\s|$)", " ", command)
    command = re.sub(r"(^|\s)\[[^]]*\](?=\s|$)", " ", command)  # [--optional flags]
    words = shlex.split(PLACEHOLDER.sub("x", command.removeprefix(".venv/bin/")))
    if words[0] == "make":
        missing = [t for t in words[1:] if "=" not in t and t not in make_targets()]
        return f"no make target {missing}" if missing else None
    if len(words) < 2 or words[1] not in subcommands():
        return f"no optimas subcommand {words[1:2]}"
    if words[1] not in COMPOSED:
        return None
    args = [w for w in words[2:] if w not in ("-m", "--multirun", "--dry-run")]
    cwd = next((d for flag, d in WORKING_DIR.items() if flag in command), ROOT)
    here = os.getcwd()
    sys.path.insert(0, str(cwd))  # as `optimas` does: a user's pipeline module beside their config imports
    try:
        os.chdir(cwd)
        found = search_path(args)
        check_overrides(found.args, found)
    except UserError as err:
        return str(err)
    finally:
        os.chdir(here)
        sys.path.remove(str(cwd))
    return None


def test_the_readme_shows_commands_to_check():
    readme = [cmd for doc, cmd in documented_commands() if doc == "README.md"]
    assert any(c.startswith("make run") for c in readme) and any(" run " in f" {c} " for c in readme)


@pytest.mark.parametrize(("doc", "command"), documented_commands())
def test_documented_command_runs_as_written(doc, command, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert problem(command) is None, f"{doc}: `{command}`: {problem(command)}"


@pytest.mark.parametrize("command", [
    "make deploy",                                  # no such target
    "optimas optimise pipeline=hotpotqa",           # no such subcommand
    "optimas run pipeline=hotpot",                  # no such pipeline
    "optimas plan pipeline=hotpotqa budget.iteratons=3",  # no such key
])
def test_a_command_that_would_not_run_is_caught(command):
    assert problem(command) is not None


def test_the_readme_lists_every_config_group_and_option_there_is():
    """The README's config-group table is the current truth: each group of conf/ with exactly its options
    (`name_*` stands for every option with that prefix)."""
    from optimas_cli.conf import GROUPS, options

    rows = re.findall(r"^\| `(\w+)` \| (.+) \|$", (ROOT / "README.md").read_text(), re.M)
    listed = {group: re.findall(r"`([\w*]+)`", cells) for group, cells in rows if group in GROUPS}
    assert set(listed) == set(GROUPS)
    for group, names in listed.items():
        wild = tuple(n.removesuffix("*") for n in names if n.endswith("*"))
        exact = {n for n in names if not n.endswith("*")}
        actual = set(options(group))
        assert exact <= actual, f"{group}: the README lists options that do not exist: {sorted(exact - actual)}"
        unlisted = {o for o in actual - exact if not (wild and o.startswith(wild))}
        assert not unlisted, f"{group}: options missing from the README's table: {sorted(unlisted)}"
