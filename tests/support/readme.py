"""The README's examples, read by the tests that check them."""

from __future__ import annotations

from pathlib import Path

README = Path(__file__).resolve().parents[2] / "README.md"


def readme_yaml(after: str) -> str:
    """The first ```yaml block of the README after the heading `after`."""
    text = README.read_text(encoding="utf-8")
    start = text.index("```yaml\n", text.index(after)) + len("```yaml\n")
    return text[start : text.index("```", start)]
