"""atheris harness: capture files (JSON, JSON Lines, HAR, CBOR sequence; the first byte
picks) through ``app.capture.formats.read_items``.

Run by `make fuzz` (see fuzz/README.md); the property is in fuzz/targets.py.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["app"]):
    from fuzz import targets

from fuzz.harness import run


def one(data: bytes) -> None:
    fmt, rest = targets.pick(data, tuple(targets.CaptureFormat))
    targets.capture_file(rest, fmt)


if __name__ == "__main__":
    run(one)
