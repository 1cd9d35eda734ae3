"""atheris harness: ``POST /v1/traces`` bodies through the OTLP receiver's reading
(``app.otlp.receive``: content coding, protobuf or OTLP/JSON, the spans' handoff attributes):
only the documented 4xx refusal. The first byte picks the content type and coding.

Run by `make fuzz` (see fuzz/README.md); the property is in fuzz/targets.py.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["app"]):
    from fuzz import targets

from fuzz.harness import run


def one(data: bytes) -> None:
    shape, rest = targets.pick(data, targets.OTLP_SHAPES)
    targets.otlp_body(rest, shape)


if __name__ == "__main__":
    run(one)
