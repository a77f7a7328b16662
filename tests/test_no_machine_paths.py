"""No machine paths in what the repository shows: the docs and the committed results name files relative to
their run folder (or by the setting that chose them: `../shared/data`, `$OPTIMAS_CACHE_DIR`), never where
they happened to sit on the machine that made them (/work/..., /tmp/..., /home/..., /root/...)."""
import gzip
import json
import re
from pathlib import Path

from optimas_cli.report.run_archive import SUFFIX, unpacked
from optimas_cli.system.results_file import BULK

ROOT = Path(__file__).resolve().parents[1]
TEXT_SUFFIXES = {".md", ".json", ".jsonl", ".csv", ".yaml", ".yml", ".log", ".txt"}
# An absolute path under a home, scratch or work root: not preceded by a path character, so `~/x`,
# `$SITE/x` and `../shared/data` pass and `/work/main/x` does not.
MACHINE_PATH = re.compile(r"(?<![\w.~$/-])/(?:work|tmp|home|root|Users)/\S*")
def machine_paths(text: str) -> list[str]:
    return MACHINE_PATH.findall(text)


def shown_files() -> dict[str, Path]:
    """name -> file: the README, the docs' text files and runs' bulk files, those packed in a run archive
    (<folder>.runs.tar.xz) included, named <archive>/<member>."""
    def shown(folder: Path) -> list[Path]:
        return [p for p in sorted(folder.rglob("*")) if p.is_file() and (p.suffix in TEXT_SUFFIXES or p.name == BULK)]

    files = {p.relative_to(ROOT).as_posix(): p for p in [ROOT / "README.md", *shown(ROOT / "docs")]}
    for archive in sorted((ROOT / "docs").rglob(f"*{SUFFIX}")):
        copy = unpacked(archive)
        files |= {f"{archive.relative_to(ROOT).as_posix()}/{p.relative_to(copy).as_posix()}": p for p in shown(copy)}
    return files


def text_of(path: Path) -> str:
    """The file's text; a run's results.bulk.json.gz (the rest of its results.json) unpacked."""
    data = gzip.decompress(path.read_bytes()) if path.name == BULK else path.read_bytes()
    return data.decode(errors="replace")


def test_docs_and_committed_results_hold_no_machine_paths():
    found = {}
    files = shown_files()
    assert any(SUFFIX in name for name in files)  # the packed runs are read too
    for name, path in files.items():
        hits = machine_paths(text_of(path))
        if hits:
            found[name] = hits[:3]
    assert found == {}, f"machine paths (write them relative to the run folder): {found}"


def test_the_pattern_tells_machine_paths_from_relative_ones():
    assert machine_paths('"proposal": "/work/main/outputs/amazon-cpu/run/adapters/x"')
    assert machine_paths("converting into /root/.cache/optimas/models (once)")
    assert machine_paths("data_dir: /tmp/data")
    assert not machine_paths("data_dir: ../shared/data · $OPTIMAS_CACHE_DIR/models · ~/my_project/conf")
    assert not machine_paths("a private `/tmp` and adapters/candidate_profiler-x")


def test_a_report_names_run_folders_as_it_was_given_them(tmp_path, monkeypatch):
    """`optimas report docs/results/x/runs` writes `docs/results/x/runs/<run>` into its tables, not the
    checkout's absolute path; the same folder named twice is still one run."""
    from optimas_cli.report.runs import find_run_folders

    (tmp_path / "runs" / "a").mkdir(parents=True)
    (tmp_path / "runs" / "a" / "results.json").write_text("{}")
    monkeypatch.chdir(tmp_path)
    assert find_run_folders(["runs", str(tmp_path / "runs" / "a")]) == [Path("runs/a")]


def test_run_files_name_what_is_inside_the_run_folder_relative_to_it(tmp_path):
    """What a run writes (results.json, checkpoints, best_config.json) names its adapters `adapters/...`;
    a path outside the folder (the data) is left as the user gave it, and the adapters are found again."""
    from optimas_cli.system import SystemConfig
    from optimas_cli.system.run_folder import RunFolder, adapters_found_in

    folder = RunFolder(tmp_path / "run")
    adapter = folder.path.resolve() / "adapters" / "profiler-1"
    adapter.mkdir(parents=True)
    folder.write_json("results.json", {"history": [{"proposal": str(adapter)}], "best": {"profiler": adapter},
                                       "data_dir": "/data/shared"})
    saved = json.loads(folder.file("results.json").read_text())
    assert saved == {"history": [{"proposal": "adapters/profiler-1"}], "best": {"profiler": "adapters/profiler-1"},
                     "data_dir": "/data/shared"}
    SystemConfig({"profiler": str(adapter), "decider": "Answer with the index."}).save(folder.file("best_config.json"))
    best = json.loads(folder.file("best_config.json").read_text())
    assert best == {"profiler": "adapters/profiler-1", "decider": "Answer with the index."}
    assert adapters_found_in(best, folder.path)["profiler"] == str(folder.path / "adapters" / "profiler-1")


def test_a_matched_run_logs_its_reference_beside_it_not_where_the_machine_keeps_it(tmp_path, caplog):
    from tests.test_matched_cost import composed, matched, reference

    cfg = composed("pipeline=toy_hint", "method=dspy", "budget.max_runs_from=optimas")
    reference(tmp_path, "0-toy_hint-optimas", cfg)
    with caplog.at_level("INFO", logger="optimas"):
        assert matched(cfg, tmp_path) == 50.0
    line = next(r.getMessage() for r in caplog.records if "spent optimizing" in r.getMessage())
    assert line.endswith("(../0-toy_hint-optimas)") and not machine_paths(line)
