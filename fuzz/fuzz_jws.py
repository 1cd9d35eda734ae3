"""atheris harness: compact JWS octets through ``jws.parse`` and the signature check.

Run by `make fuzz` (see fuzz/README.md); the property is in fuzz/targets.py.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["app"]):
    from fuzz import targets

from fuzz.harness import run


def one(data: bytes) -> None:
    targets.jws_element(data)


if __name__ == "__main__":
    run(one)
