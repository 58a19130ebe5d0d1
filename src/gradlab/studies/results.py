"""Writing a study's results into its experiments/ folder: JSON, markdown, and the README's
generated section, so no figure in a study's README is ever typed by hand."""

from __future__ import annotations

import json
from pathlib import Path

from gradlab.training.record import json_safe


def rewrite_section(readme: Path, text: str, section: str = "results") -> None:
    """Replace what stands between ``<!-- {section}:start -->`` and ``<!-- {section}:end -->``."""
    start, end = f"<!-- {section}:start -->", f"<!-- {section}:end -->"
    head, found, rest = readme.read_text().partition(start)
    if not found or end not in rest:
        raise ValueError(f"{readme} has no {start} ... {end} section to rewrite")
    readme.write_text(f"{head}{start}\n{text.rstrip()}\n{end}{rest.split(end, 1)[1]}")


def write_results(folder: Path, stem: str, result: dict, markdown: str) -> None:
    """``stem``.json and ``stem``.md in ``folder``, and the README's section named after stem
    ('_' -> '-': results, results-cuda)."""
    (folder / f"{stem}.json").write_text(json.dumps(json_safe(result), indent=2) + "\n")
    (folder / f"{stem}.md").write_text(markdown + "\n")
    rewrite_section(folder / "README.md", markdown, stem.replace("_", "-"))
