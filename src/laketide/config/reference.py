"""The configuration reference, made from the configuration model (``laketide.config``): every key with its
type, default and description, section by section, as Markdown. The documentation's configuration page is
this (``docs/hooks/reference.py``), so it says what the model does and cannot drift from it.

A key's description is its field's docstring in the model; a key without one is an error here, so the suite
fails on an undocumented key rather than the reference leaving it out.
"""

from __future__ import annotations

import inspect
import re
import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel
from pydantic.fields import FieldInfo

from laketide.config import JobConfig
from laketide.config.types import parse_size


@dataclass(frozen=True)
class Key:
    """One key of the configuration: its dotted name, type, default (as TOML) and description (Markdown)."""

    name: str
    type: str
    default: str
    description: str


@dataclass(frozen=True)
class Section:
    """A ``[section]`` of the configuration, what it is for and its keys."""

    name: str
    about: str
    keys: list[Key]


class Undocumented(ValueError):
    """A configuration key whose field has no docstring."""


def sections(model: type[BaseModel] = JobConfig, prefix: str = "", about: str | None = None) -> Iterator[Section]:
    """Every section of ``model`` (the job's by default), depth first, each with its own keys. A table of
    sections (``[tables.<name>]``) is a section of the keys its value model adds to those it inherits."""
    keys, nested = [], []
    own = inspect.get_annotations(model)
    # a subclass's own keys first: ``table.path`` before the keys every ``[tables.<name>]`` shares
    for name, field in sorted(model.model_fields.items(), key=lambda item: item[0] not in own):
        key = f"{prefix}{field.alias or name}"
        if (section := _section_model(field.annotation)) is not None:
            nested.append((key, section, None))
        elif (values := _mapping_of_sections(field.annotation)) is not None:
            nested.append((f"{key}.<name>", values, _described(key, field)))
        elif about is None or name in own:
            keys.append(Key(key, _type_of(field), _default(field), _described(key, field)))
    if keys:
        yield Section(prefix.rstrip("."), about or _about(model), keys)
    for key, section, described in nested:
        yield from sections(section, key + ".", described)


def reference_markdown() -> str:
    """The reference as Markdown: a heading and a table for each section."""
    out = []
    for section in sections():
        out += [f"### `[{section.name}]`", ""] if section.name else []
        out += [section.about, ""] if section.about else []
        out += ["| key | type | default | description |", "|---|---|---|---|"]
        out += [f"| `{k.name}` | {k.type} | {k.default} | {k.description} |" for k in section.keys]
        out.append("")
    return "\n".join(out)


def _section_model(annotation: Any) -> type[BaseModel] | None:
    return annotation if isinstance(annotation, type) and issubclass(annotation, BaseModel) else None


def _mapping_of_sections(annotation: Any) -> type[BaseModel] | None:
    """``V`` of a ``dict[str, V]`` whose values are sections (``tables``), else ``None``."""
    if typing.get_origin(annotation) is dict:
        return _section_model(typing.get_args(annotation)[1])
    return None


def _described(key: str, field: FieldInfo) -> str:
    if not field.description:
        raise Undocumented(f"configuration key {key} has no description: give its field a docstring in laketide.config")
    return _markdown(field.description)


def _type_of(field: FieldInfo) -> str:
    """How a key's values are written: a size, the choices of a ``Literal``, or the TOML type."""
    return "size" if _is_size(field.metadata) else _type_name(field.annotation)


def _type_name(annotation: Any) -> str:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType) and len(args) == 1:
        return _type_name(args[0])
    if origin is Literal:
        return " \\| ".join(f'`"{a}"`' for a in args)
    if origin is list:
        return f"list of {_type_name(args[0])}s"
    if origin is dict:
        return "table of strings"
    return {str: "string", int: "integer", float: "number", bool: "boolean"}.get(annotation, str(annotation))


def _is_size(metadata: list[Any]) -> bool:
    return any(getattr(m, "func", None) is parse_size for m in metadata)


def _default(field: FieldInfo) -> str:
    if field.is_required():
        return "required"
    value = field.default_factory() if field.default_factory is not None else field.default  # type: ignore[call-arg]
    if value is None:
        return "unset"
    if _is_size(field.metadata) and isinstance(value, int):
        return f"`{_size(value)}`"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, BaseModel | dict | list) and not value:
        return "empty"
    return f"`{value}`"


def _size(value: int) -> str:
    for unit, scale in (("GB", 2**30), ("MB", 2**20), ("KB", 2**10)):
        if value >= scale and value % scale == 0:
            return f'"{value // scale}{unit}"'
    return str(value)


def _about(model: type[BaseModel]) -> str:
    """A section's docstring, its first paragraph, as Markdown."""
    doc = (model.__doc__ or "").strip().split("\n\n")[0]
    return _markdown(doc)


def _markdown(text: str) -> str:
    """A docstring as one Markdown table cell: reStructuredText's double backticks single, one line, pipes escaped."""
    text = re.sub(r"``(.+?)``", r"`\1`", " ".join(text.split()))
    return text.replace("|", "\\|")
