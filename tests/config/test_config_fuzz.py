"""Fuzzing `load_config` (issue 13): whatever the file holds, a valid config or one `ConfigError` line that
says where (the key, or the line and column of a syntax error), never another exception, never a hang.

Three sources of files: documents shaped like the real `modelRouting` block with any value anywhere
(JSON and YAML), the README's example with random edits, and random bytes.
"""

from __future__ import annotations

import json
import re
import signal
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from io import StringIO
from pathlib import Path
from types import FrameType
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from ruamel.yaml import YAML

from chaos_mode.config.file import load_config
from chaos_mode.config.schema import ConfigError, ConfigFile, ModelRouting, key_step
from support.readme import readme_yaml

HANG_SECONDS = 5  # one load never takes this long; a FIFO-like block or a runaway parse would
# Messages that are about the file as a whole, not about one key.
FILE_LEVEL = (
    "not valid YAML",
    "not valid JSON",
    "not UTF-8",
    "over ",
    "more than ",
    "the top level must be",
    "empty, ",
)
FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _keys(model: type[BaseModel]) -> set[str]:
    """Every key the schema knows, as files spell them (camelCase), nested models included."""
    found: set[str] = set()
    for name, field in model.model_fields.items():
        found.add(field.alias or name)
        for kind in (field.annotation, *getattr(field.annotation, "__args__", ())):
            if isinstance(kind, type) and issubclass(kind, BaseModel):
                found |= _keys(kind)
    return found


KEYS = sorted(_keys(ConfigFile) | {"glm-4.7", "glm-4.5-x", "tier", "maxConcurrency", "opus"})
WORDS = ["HEAVY", "MEDIUM", "LIGHT", "heavy", "light", "least-loaded", "round-robin", "glm-4.7", ""]

leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(10**6), max_value=10**6),
    st.integers(min_value=10**15, max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(WORDS),
    st.text(max_size=12),
)
keys = st.one_of(st.sampled_from(KEYS), st.text(max_size=8))
values = st.recursive(
    leaves,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=5),
    max_leaves=25,
)
# Mostly the real shape, so validation gets past the top level and into every block.
routing_blocks = st.dictionaries(st.sampled_from(sorted(_keys(ModelRouting))), values, max_size=6)
documents = st.one_of(
    st.fixed_dictionaries({"modelRouting": routing_blocks}),
    st.dictionaries(keys, values, max_size=3),
    values,
)


@contextmanager
def _bounded(seconds: int) -> Iterator[None]:
    """Raise TimeoutError in this thread if the block runs longer than `seconds` (a hang fails the test)."""

    def alarm(signum: int, frame: FrameType | None) -> None:
        raise TimeoutError(f"load_config took over {seconds} s")

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


def _load(content: bytes, suffix: str) -> tuple[ModelRouting | None, str | None]:
    """(config, None) or (None, the error's text after the file name)."""
    with tempfile.TemporaryDirectory(prefix="chaos-config-fuzz-") as folder:
        path = Path(folder) / f"chaos{suffix}"
        path.write_bytes(content)
        try:
            with _bounded(HANG_SECONDS):
                return load_config(path), None
        except ConfigError as exc:
            message = str(exc)
            assert "\n" not in message and "\r" not in message, message
            assert message.startswith(f"{path}: "), message
            return None, message[len(f"{path}: ") :]


def _names_a_key(message: str, document: Any) -> bool:
    """The error names the key it is about: a path whose first step is a key of the document."""
    if not isinstance(document, dict):
        return False
    return any(re.match(rf"{re.escape(key_step(key))}[.:]", message) for key in document)


def _yaml(document: Any) -> bytes:
    out = StringIO()
    YAML(typ="safe", pure=True).dump(document, out)
    return out.getvalue().encode("utf-8", "surrogatepass")


@FUZZ
@given(document=documents, as_json=st.booleans())
@example(document={"  ": []}, as_json=False)  # a key of two spaces is named as two spaces, not one
def test_any_document_is_a_config_or_one_line_naming_the_key(document: Any, as_json: bool) -> None:
    content = json.dumps(document).encode("utf-8", "surrogatepass") if as_json else _yaml(document)
    config, error = _load(content, ".json" if as_json else ".yaml")
    if error is None:
        assert isinstance(config, ModelRouting)
        json.dumps(config.model_dump(mode="json"), allow_nan=False)  # every value finite, served as JSON
        return
    if error.startswith(FILE_LEVEL):
        return
    # ruamel's dumper may write a key YAML reads back otherwise (NEL inside quotes is a line break,
    # folded to a space): the error names the key as the file says it.
    written = document if as_json else YAML(typ="safe", pure=True).load(content)
    assert _names_a_key(error, written), error


edits = st.lists(
    st.tuples(st.integers(min_value=0, max_value=4000), st.integers(0, 12), st.text(max_size=6)),
    min_size=1,
    max_size=4,
)


@FUZZ
@given(edits=edits)
def test_the_readme_example_with_random_edits_is_a_config_or_one_line(
    edits: list[tuple[int, int, str]],
) -> None:
    text = readme_yaml("## Configuration")
    for at, cut, insert in edits:
        at %= len(text) + 1
        text = text[:at] + insert + text[at + cut :]
    config, error = _load(text.encode("utf-8", "surrogatepass"), ".yaml")
    assert config is not None or (error and re.match(r"^\S", error)), error


@FUZZ
@given(content=st.binary(max_size=300), suffix=st.sampled_from([".yaml", ".json"]))
def test_random_bytes_are_a_config_or_one_line(content: bytes, suffix: str) -> None:
    config, error = _load(content, suffix)
    assert config is not None or error, error
