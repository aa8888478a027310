"""A hint for a config key nothing knows: the closest known key at its place ("did you mean"), or, for a key
written one level too high (`chaosMode:` at the top of the file), the block it belongs under."""

from __future__ import annotations

import difflib
from collections.abc import Sequence
from typing import Any, get_args, get_origin

from pydantic import BaseModel
from pydantic.alias_generators import to_camel


def unknown_key_hint(root: type[BaseModel], loc: Sequence[int | str]) -> str:
    """' (did you mean chaosMode?)', ' (a key of modelRouting: write it under modelRouting:)' or ''."""
    *path, key = loc
    model = _model_at(root, path)
    if model is None or not isinstance(key, str):
        return ""
    if not path:
        for name, field in root.model_fields.items():
            inner = field.annotation
            if isinstance(inner, type) and issubclass(inner, BaseModel) and key in _keys(inner):
                block = to_camel(name)
                return f" (a key of {block}: write it under {block}:)"
    close = difflib.get_close_matches(key, _keys(model), n=1)
    return f" (did you mean {close[0]}?)" if close else ""


def _keys(model: type[BaseModel]) -> list[str]:
    return [to_camel(name) for name in model.model_fields]


def _model_at(root: type[BaseModel], path: Sequence[int | str]) -> type[BaseModel] | None:
    """The model whose keys are those at `path` (through mappings of models: `models.<name>`), if any."""
    at: Any = root
    for part in path:
        if isinstance(at, type) and issubclass(at, BaseModel):
            fields = {to_camel(name): field for name, field in at.model_fields.items()}
            field = fields.get(str(part)) or at.model_fields.get(str(part))
            if field is None:
                return None
            at = field.annotation
        elif get_origin(at) is dict:
            at = get_args(at)[1]  # a mapping's entry: its values' type
        else:
            return None
    return at if isinstance(at, type) and issubclass(at, BaseModel) else None
