"""The log key file (``HANDOFF_TRACE_LOG_KEY_FILE``): one ``PRIVATE+KEY+...`` line
(``app.log.note``), readable by the service's user only. Nothing here prints it."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from app.log.errors import LogKeyError
from app.log.note import Signer, check_name

DEFAULT_NAME = "handoff-trace.localhost/log"


def load_signer(path: Path) -> Signer:
    """Read the log key. Raises LogKeyError for a missing or malformed file, or one that
    other users may read (the key signs the deployment's history)."""
    try:
        st = path.stat()
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        detail = exc.strerror if isinstance(exc, OSError) else "not UTF-8"
        raise LogKeyError(f"cannot read the log key file {path}: {detail}") from None
    if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise LogKeyError(f"the log key file {path} is readable by others: chmod 600 {path}")
    return Signer.parse(text)


def write_key(path: Path, name: str) -> Signer:
    """Generate a key named ``name`` into a new file (mode 600). Raises LogKeyError when the
    file exists (a key is never overwritten)."""
    signer = Signer.generate(check_name(name))
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        raise LogKeyError(f"{path} exists; a log key is never overwritten") from None
    except OSError as exc:
        raise LogKeyError(f"cannot write {path}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(signer.private_text() + "\n")
    return signer


def demo_key(path: Path) -> Signer:
    """The demo's key (``run-demo``): the file's, or a new one when there is none."""
    return load_signer(path) if path.exists() else write_key(path, DEFAULT_NAME)
