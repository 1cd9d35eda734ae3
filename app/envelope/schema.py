"""The handoff envelope's JSON Schema (``handoff-v2.schema.json``, JSON Schema 2020-12).

Validation names the first few violations, each with where it is (a JSON pointer-like
path), so that a refused envelope says why in one line per problem.
"""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import ValidationError

SCHEMA_FILE = "handoff-v2.schema.json"
MAX_ERRORS = 3  # violations named per message


@functools.cache
def validator() -> Draft202012Validator:
    """The envelope validator (the schema is checked against the metaschema once)."""
    text = resources.files(__package__).joinpath(SCHEMA_FILE).read_text(encoding="utf-8")
    schema = json.loads(text)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema)


def schema_errors(envelope: Any) -> tuple[str, ...]:
    """The first ``MAX_ERRORS`` violations of the envelope, in document order; empty when
    it is valid."""
    if plainly_valid(envelope):
        return ()
    errors = sorted(validator().iter_errors(envelope), key=_order)
    return tuple(_describe(e) for e in errors[:MAX_ERRORS])


def _order(error: ValidationError) -> tuple[str, ...]:
    return tuple(str(p) for p in error.absolute_path)


def _describe(error: ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"{where or '(envelope)'}: {message}"


# --- the fast path ------------------------------------------------------------------------
#
# Walking the schema with jsonschema cost more than everything else of reading an envelope
# item. ``plainly_valid`` checks the schema's rules directly, and only ever answers True for
# an envelope the schema accepts (exact types only, and the integral floats A2A 1.0's
# protobuf Structs make of every number: anything unusual goes to jsonschema, which also
# names the violations). tests/envelope/test_schema.py
# holds the two to that on generated envelopes.

_MEMBERS = frozenset(
    {
        "version",
        "case_id",
        "handoff_id",
        "from_agent",
        "epoch",
        "goal",
        "done",
        "remaining",
        "facts",
        "open_questions",
        "constraints",
        "summary",
    }
)
_FACT_MEMBERS = frozenset({"key", "value", "source", "verified"})
_MAX_EPOCH = 9007199254740991
_MAX_ITEMS = 500


def plainly_valid(envelope: Any) -> bool:
    """True when the envelope plainly satisfies the schema; False when it may not."""
    if type(envelope) is not dict or envelope.keys() != _MEMBERS:
        return False
    epoch, version = envelope["epoch"], envelope["version"]
    return (
        type(version) in (int, float)
        and version == 2
        and all(_text(envelope[k], 1, 2048) for k in ("case_id", "handoff_id", "from_agent"))
        and (type(epoch) is int or (type(epoch) is float and epoch.is_integer()))
        and 0 <= epoch <= _MAX_EPOCH
        and _text(envelope["goal"], 1, 2000)
        and all(_steps(envelope[k]) for k in ("done", "remaining", "open_questions"))
        and type(envelope["facts"]) is list
        and len(envelope["facts"]) <= _MAX_ITEMS
        and all(_fact(f) for f in envelope["facts"])
        and type(envelope["constraints"]) is dict
        and _text(envelope["summary"], 0, 2000)
    )


def _text(value: Any, shortest: int, longest: int) -> bool:
    return type(value) is str and shortest <= len(value) <= longest


def _steps(value: Any) -> bool:
    return (
        type(value) is list
        and len(value) <= _MAX_ITEMS
        and all(_text(step, 0, 2000) for step in value)
    )


def _fact(fact: Any) -> bool:
    if type(fact) is not dict or not fact.keys() <= _FACT_MEMBERS:
        return False
    source = fact.get("source")
    return (
        "value" in fact
        and type(fact.get("verified")) is bool
        and _text(fact.get("key"), 1, 256)
        and (source is None or _text(source, 0, 2048))
    )
