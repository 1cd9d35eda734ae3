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
    errors = sorted(validator().iter_errors(envelope), key=_order)
    return tuple(_describe(e) for e in errors[:MAX_ERRORS])


def _order(error: ValidationError) -> tuple[str, ...]:
    return tuple(str(p) for p in error.absolute_path)


def _describe(error: ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path)
    message = error.message if len(error.message) <= 200 else error.message[:197] + "..."
    return f"{where or '(envelope)'}: {message}"
