"""The ``handoff-trace`` command line: verify captures, make keys, sign bundles.

Exit status: 0 when no verdict is ``reject``, 1 when any is, 2 for a usage or configuration
error (one line on stderr, never a traceback).
"""

from __future__ import annotations

from collections.abc import Sequence


def main(argv: Sequence[str] | None = None) -> int:
    """The ``handoff-trace`` entry point. Imports only what the chosen command needs."""
    from app.cli.root import main as run

    return run(argv)
