"""The published test vectors of handoff-context (README.md in this folder lists them).

The vector files ship inside the package so that an installed library can check itself, or
another implementation (``python -m handoff_context.conformance``), without a checkout.
``generate.py`` beside them wrote them; it is a script, not part of the API.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["DIRECTORY", "stored_vectors"]

# The files are installed as ordinary files (the wheel is never imported zipped), so the
# folder is a real directory and can be handed to other programs by path.
DIRECTORY = Path(str(resources.files(__name__)))


def stored_vectors(directory: Path = DIRECTORY) -> list[Path]:
    """Every vector file (``valid/*.json`` and ``invalid/*.json``), sorted by path."""
    return sorted([*directory.glob("valid/*.json"), *directory.glob("invalid/*.json")])
