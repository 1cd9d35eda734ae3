"""atheris harness: JSON or CBOR values through ``parse_object`` and the whole check pipeline.

Run by `make fuzz` (see fuzz/README.md); the property is in fuzz/targets.py.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["app"]):
    from fuzz import targets

from fuzz.harness import run


def one(data: bytes) -> None:
    targets.handoff_bytes(data)


if __name__ == "__main__":
    run(one)
