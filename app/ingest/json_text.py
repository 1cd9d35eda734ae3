"""``json.dumps(value, indent=2)``, the same text, in a fraction of the time.

``verify --json`` prints its verdicts as one indented JSON array, and other tools parse that
text, so its bytes must not change. The standard library only has a C encoder for compact
output: with ``indent`` it runs its pure-Python encoder, a generator per container and a
``write`` per token, which cost ``verify`` as much as all its checks (issue 13). This writer
builds the same text with string joins, reusing the C string escaper and caching what
repeats across verdicts: each key's encoding and the text of small flat objects (the checks
of one verdict are the same few objects again and again).

Only what ``json.dumps`` would write with its defaults is handled here (``ensure_ascii``,
``allow_nan``, insertion order): strings, numbers, booleans, None, lists, tuples and dicts
with string keys. Anything else (a non-string key, a type the encoder does not know) makes
the value fall back to ``json.dumps`` itself, so the answer is the standard library's in
every case, including its errors. ``tests/cli/test_json_text.py`` pins the equality.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterable, Iterator
from json.encoder import encode_basestring_ascii
from typing import Any, TypeVar

from app.errors import HandoffTraceError

T = TypeVar("T")

_INDENT = "  "
_FLAT_CACHE_LIMIT = 4096  # distinct small objects remembered; a run reuses a few dozen
_FLAT_MAX = 4  # members of an object whose text is remembered (a check has at most 4)


class _Unsupported(HandoffTraceError):
    """A value this writer does not encode exactly as ``json.dumps`` does. Never leaves
    this module: the value is handed to ``json.dumps`` instead."""

    reason = "json-fallback"

    def __init__(self) -> None:
        super().__init__("a value left to json.dumps")


def _float(value: float) -> str:
    # json.encoder's floatstr with allow_nan=True.
    if value != value:
        return "NaN"
    if value == float("inf"):
        return "Infinity"
    if value == -float("inf"):
        return "-Infinity"
    return float.__repr__(value)


def _scalar(value: object) -> str | None:
    """The JSON text of a scalar, or None for a container (or what is not JSON)."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)  # type: ignore[arg-type]
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        return _float(value)  # type: ignore[arg-type]
    # Subclasses (a StrEnum member, an IntEnum) are written as json.dumps writes them.
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        return _float(value)
    return None


class IndentedWriter:
    """Writes JSON values as ``json.dumps(value, indent=2)`` would, at any depth."""

    def __init__(self) -> None:
        self._keys: dict[str, str] = {}
        self._flat: dict[tuple[int, tuple[tuple[str, object], ...]], str] = {}
        self._pads: list[str] = ["\n"]

    def _pad(self, level: int) -> str:
        while len(self._pads) <= level:
            self._pads.append(self._pads[-1] + _INDENT)
        return self._pads[level]

    def _key(self, key: object) -> str:
        if not isinstance(key, str) or type(key) is not str:
            raise _Unsupported  # json.dumps converts or refuses other keys: let it
        text = self._keys.get(key)
        if text is None:
            text = self._keys[key] = encode_basestring_ascii(key) + ": "
        return text

    def text(self, value: object, level: int = 0) -> str:
        """The text of ``value`` as it appears at nesting ``level`` (0: the document)."""
        parts: list[str] = []
        self._value(value, level, parts.append)
        return "".join(parts)

    def _value(self, value: object, level: int, out: Callable[[str], None]) -> None:
        kind = type(value)
        if kind is dict:
            self._dict(value, level, out)  # type: ignore[arg-type]
            return
        if kind is list:
            self._list(value, level, out)  # type: ignore[arg-type]
            return
        scalar = _scalar(value)
        if scalar is not None:
            out(scalar)
        elif isinstance(value, dict):
            self._dict(value, level, out)
        elif isinstance(value, list | tuple):
            self._list(value, level, out)
        else:
            raise _Unsupported

    def _list(
        self, items: list[Any] | tuple[Any, ...], level: int, out: Callable[[str], None]
    ) -> None:
        if not items:
            out("[]")
            return
        inner = self._pad(level + 1)
        separator = "[" + inner
        for item in items:
            out(separator)
            separator = "," + inner
            if type(item) is dict:
                self._dict(item, level + 1, out)
            else:
                self._value(item, level + 1, out)
        out(self._pad(level) + "]")

    def _dict(self, mapping: dict[Any, Any], level: int, out: Callable[[str], None]) -> None:
        if not mapping:
            out("{}")
            return
        if len(mapping) <= _FLAT_MAX:
            flat = self._flat_text(mapping, level)
            if flat is not None:
                out(flat)
                return
        inner = self._pad(level + 1)
        separator = "{" + inner
        keys = self._keys
        for key, item in mapping.items():
            name = keys.get(key) if type(key) is str else None
            if name is None:
                name = self._key(key)
            # Strings and None are most of a verdict: written here without a call.
            kind = type(item)
            if kind is str:
                out(separator + name + encode_basestring_ascii(item))
            elif item is None:
                out(separator + name + "null")
            else:
                out(separator + name)
                self._value(item, level + 1, out)
            separator = "," + inner
        out(self._pad(level) + "}")

    def _flat_text(self, mapping: dict[Any, Any], level: int) -> str | None:
        """A small object of strings and None only (a check, a ref report) is written once
        per run and its text reused; None for any other object."""
        items = tuple(mapping.items())
        for _key, item in items:
            if item is not None and type(item) is not str:
                return None
        memo = (level, items)
        text = self._flat.get(memo)
        if text is None:
            inner = self._pad(level + 1)
            body = ("," + inner).join(self._key(k) + _scalar_text(v) for k, v in items)
            text = "{" + inner + body + self._pad(level) + "}"
            if len(self._flat) < _FLAT_CACHE_LIMIT:
                self._flat[memo] = text
        return text


def _scalar_text(value: str | None) -> str:
    return "null" if value is None else encode_basestring_ascii(value)


def dumps(value: object) -> str:
    """Exactly ``json.dumps(value, indent=2)``."""
    try:
        return IndentedWriter().text(value)
    except _Unsupported:
        return json.dumps(value, indent=2)


def indented(value: object, writer: IndentedWriter, level: int = 1) -> str:
    """The text of ``value`` at ``level`` (as an element of a top-level array at 1)."""
    try:
        return writer.text(value, level)
    except _Unsupported:
        # The standard library's own text, moved in: JSON text has no raw newline inside
        # a string, so every line break is an indentation point.
        return json.dumps(value, indent=2).replace("\n", "\n" + _INDENT * level)


def array_chunks(
    values: Iterable[T],
    *,
    per_chunk: int = 256,
    text_of: Callable[[T], str] | None = None,
) -> Iterator[str]:
    """The text of ``json.dumps(list(values), indent=2)``, in pieces of ``per_chunk``
    elements, so the array can be written as it is produced and never held whole twice.
    ``text_of`` gives an element's text at level 1 (default: ``indented``); it lets a
    caller write its own objects without building their JSON values first."""
    if text_of is None:
        writer = IndentedWriter()
        text_of = functools.partial(indented, writer=writer)
    pending: list[str] = []
    opened = False
    for value in values:
        text = text_of(value)
        pending.append(("[\n" + _INDENT if not opened else ",\n" + _INDENT) + text)
        opened = True
        if len(pending) >= per_chunk:
            yield "".join(pending)
            pending = []
    if not opened:
        yield "[]"
        return
    pending.append("\n]")
    yield "".join(pending)
