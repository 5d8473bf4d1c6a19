"""Keep the code shown in the docs equal to the files that the tests run.

A Markdown file quotes a file of the repository between two comments:

    <!-- snippet: examples/tune_api/train_math.py -->
    ```python
    ...the file, verbatim...
    ```
    <!-- /snippet -->

`<!-- snippet: kernel/src/astuner/templates/math/NAME.yaml name=demo -->`
quotes a project template as `astuner init demo` writes it (`${name}` filled
in by the same function).

`python docs/snippets.py` rewrites every such block from its file (README.md
and docs/*.md); `python docs/snippets.py --check` only reports blocks that
differ, and tests/docs runs that check, so a quoted file cannot drift from
the one that is tested.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
BLOCK = re.compile(
    r"(?P<open><!-- snippet: (?P<path>\S+)(?: name=(?P<name>\w+))? -->\n)"
    r"(?P<body>.*?)(?P<close><!-- /snippet -->)",
    re.DOTALL,
)
LANGUAGES = {".py": "python", ".yaml": "yaml", ".yml": "yaml", ".sh": "bash", ".json": "json"}


def documents(root: Path = REPO) -> list[Path]:
    """The Markdown files that may quote snippets."""
    return [root / "README.md", *sorted((root / "docs").glob("*.md"))]


def fenced(path: Path, name: str | None = None) -> str:
    """The file as a fenced code block (four backticks when it holds three); a template filled for `name`."""
    if name is None:
        text = path.read_text(encoding="utf-8")
    else:
        from astuner.scaffold import render as render_template

        text = render_template(path, name).decode("utf-8")
    fence = "````" if "```" in text else "```"
    return f"{fence}{LANGUAGES.get(path.suffix, '')}\n{text.rstrip()}\n{fence}\n"


def render(markdown: str, root: Path = REPO) -> str:
    """`markdown` with every snippet block refilled from its file (paths relative to `root`)."""

    def refill(match: re.Match[str]) -> str:
        source = root / match["path"]
        if not source.is_file():
            raise FileNotFoundError(f"snippet source {match['path']} does not exist")
        return match["open"] + fenced(source, match["name"]) + match["close"]

    return BLOCK.sub(refill, markdown)


def stale(root: Path = REPO) -> list[Path]:
    """The documents whose snippet blocks differ from their files."""
    out = []
    for doc in documents(root):
        text = doc.read_text(encoding="utf-8")
        if render(text, root) != text:
            out.append(doc)
    return out


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--check", action="store_true", help="Report stale documents; change nothing.")
    args = parser.parse_args()
    outdated = stale()
    if args.check:
        for doc in outdated:
            print(f"{doc.relative_to(REPO)}: snippets differ from their files; run python docs/snippets.py")
        return 1 if outdated else 0
    for doc in outdated:
        doc.write_text(render(doc.read_text(encoding="utf-8")), encoding="utf-8")
        print(f"updated {doc.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
