"""atheris harness: capture files through ``read_capture`` (carrier extraction) and
``extract`` on every decoded payload; the first byte picks the content type.

Run by `make fuzz` (see fuzz/README.md); the property is in fuzz/targets.py.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["app"]):
    from fuzz import targets

from fuzz.harness import run


def one(data: bytes) -> None:
    content_type, rest = targets.pick(data, targets.CONTENT_TYPES)
    targets.capture_carriers(rest, content_type)
    for value in targets.decoded_values(rest):
        targets.carried_value(value)


if __name__ == "__main__":
    run(one)
