"""atheris harness: capture bodies to ``POST /api/v1/ingest`` and ``POST /api/v1/verify``
of the real app (TestClient, SQLite): never a 5xx. The first byte picks the content type.

Run by `make fuzz` (see fuzz/README.md); the property is in fuzz/targets.py.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["app"]):
    from fuzz import targets

from fuzz.harness import run


def one(data: bytes) -> None:
    content_type, rest = targets.pick(data, targets.CONTENT_TYPES)
    targets.http_capture(rest, content_type)


if __name__ == "__main__":
    run(one)
