"""What every atheris harness shares: instrument the project's code, then run libFuzzer on
one target with the command line's libFuzzer flags (``-max_total_time``, corpus folders)."""

from __future__ import annotations

import sys
from collections.abc import Callable

import atheris


def run(one: Callable[[bytes], None]) -> None:
    atheris.Setup(sys.argv, one)
    atheris.Fuzz()
