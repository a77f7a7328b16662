"""Every interval the README quotes beside a link to a results folder is one that folder's generated
report.md prints, digit for digit: an interval copied by hand from an older report, or from another
computation (the example bootstrap where the seed-level t interval is meant), fails here."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LINK = re.compile(r"\]\((?:\./)?docs/results/([\w./-]+)/[\w.-]+\)")  # the folder of the linked file
INTERVAL = re.compile(r"\[[-+−]?\d+\.\d+, [-+−]?\d+\.\d+\]")
SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z\[*`])")


def units(text: str) -> list[str]:
    """Table rows, and the sentences of each paragraph (a sentence may span lines); fenced code is skipped."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    out = []
    for block in re.split(r"\n\s*\n", text):
        lines = block.splitlines()
        out += [line for line in lines if line.startswith("|")]
        prose = " ".join(line.strip() for line in lines if not line.startswith("|"))
        out += SENTENCE_END.split(prose)
    return out


def quoted_intervals(text: str) -> list[tuple[str, str]]:
    """(folder, interval) for each interval in a row or sentence that links a results folder, the interval
    given to the nearest such link; the typographic minus is read as '-' (the report prints '-')."""
    found = []
    for unit in units(text):
        links = [(m.start(), m.end(), m[1]) for m in LINK.finditer(unit)]
        if not links:
            continue
        for m in INTERVAL.finditer(unit):
            folder = min(links, key=lambda link: max(link[0] - m.end(), m.start() - link[1], 0))[2]
            found.append((folder, m[0].replace("−", "-")))
    return found


def test_units_attribute_each_interval_to_its_nearest_results_link():
    text = ("| a | 0.1 (3 seeds; [0.0016, 0.1164]) | [x](docs/results/one/README.md) |\n\n"
            "See [x](docs/results/two/README.md) for more. On [y](docs/results/three/README.md), it is\n"
            "[−0.0938, +0.2352] across seeds. An unlinked [0.5, 0.6] stays unchecked.\n\n"
            "```sh\noptimas report [docs/results/four/README.md] [0.1, 0.2]\n```\n")
    assert quoted_intervals(text) == [("one", "[0.0016, 0.1164]"), ("three", "[-0.0938, +0.2352]")]


def test_readme_intervals_are_the_ones_their_results_folder_reports():
    quoted = quoted_intervals((ROOT / "README.md").read_text())
    assert len(quoted) >= 3, f"the README's results table quotes intervals beside its folders; found {quoted}"
    wrong = []
    for folder, interval in quoted:
        # its report.md, or report/report.md (phase-map-2), or the README a generator writes (label-quality)
        where = ROOT / "docs" / "results" / folder
        report = next((r for r in (where / "report.md", where / "report" / "report.md") if r.is_file()),
                      where / "README.md")
        if not report.is_file() or interval not in report.read_text():
            wrong.append(f"{interval} ({report.relative_to(ROOT)} does not print it)")
    assert not wrong, ("README intervals that are not their results folder's: " + "; ".join(wrong)
                       + ". Quote report.md's numbers as printed (rebuild it with the command in the folder's README).")
