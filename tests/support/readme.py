"""The README's examples, read by the tests that check them."""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_yaml(after: str) -> str:
    """The first ```yaml block of the README after the heading `after`."""
    text = README.read_text(encoding="utf-8")
    start = text.index("```yaml\n", text.index(after)) + len("```yaml\n")
    return text[start : text.index("```", start)]


def readme_blocks(language: str) -> list[tuple[str, str]]:
    """Every ```language block of the README, with the `## ` heading it is under: (heading, text)."""
    text = README.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(rf"^```{re.escape(language)}\n(.*?)^```$", text, re.MULTILINE | re.DOTALL):
        headings = re.findall(r"^## (.+)$", text[: match.start()], re.MULTILINE)
        blocks.append((headings[-1] if headings else "", match.group(1)))
    return blocks
