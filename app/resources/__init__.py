"""The files the service reads at run time: the dashboard's templates and static assets and
the Alembic migrations, found with ``importlib.resources``.

They are kept at the repository's top level (templates/, static/, alembic/), where people
edit them. This package holds a relative symbolic link to each, so that setuptools copies
them into the wheel as this package's data (see ``package-data`` in pyproject.toml) and an
editable install reads the checkout's files through the same links. Either way the code
asks this package for them and never looks relative to its own source file, which after a
real install would point into site-packages (tests/test_wheel.py installs the wheels to
hold that).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

__all__ = ["migrations", "static", "templates"]


def _directory(name: str) -> Path:
    """Raises RuntimeError when the installation lacks the directory."""
    # Jinja2's loader, Starlette's StaticFiles and Alembic all want a real directory; pip
    # always unpacks a wheel, so anything else is a broken installation, not bad input.
    found = resources.files(__name__).joinpath(name)
    if not isinstance(found, Path) or not found.is_dir():
        raise RuntimeError(f"handoff-trace is installed without its {name}/ directory")
    return found


def templates() -> Path:
    """The Jinja2 templates of the dashboard (the repository's templates/)."""
    return _directory("templates")


def static() -> Path:
    """The dashboard's scripts, styles and icons, served under /static (static/)."""
    return _directory("static")


def migrations() -> Path:
    """Alembic's script directory: env.py and versions/ (the repository's alembic/)."""
    return _directory("migrations")
