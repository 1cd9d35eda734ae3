"""The evidence log's errors: each carries a machine ``reason`` and one line for people."""

from __future__ import annotations

from app.errors import HandoffTraceError


class LogError(HandoffTraceError):
    """Something about the evidence log is wrong (the base of the others)."""

    reason = "log-error"


class LogKeyError(LogError):
    """The log key (``HANDOFF_TRACE_LOG_KEY_FILE``) is missing, malformed or unsafe."""

    reason = "log-key"


class FormatError(LogError):
    """A leaf, a checkpoint, a note, a tile path or a proof file does not parse."""

    reason = "log-format"


class SignatureError(LogError):
    """A checkpoint or receipt signature does not verify under the given key."""

    reason = "log-signature"


class ProofError(LogError):
    """An inclusion or consistency proof does not hold."""

    reason = "log-proof"


class NotInLog(LogError):
    """The element is stored but not yet in the log (the sequencer has not reached it), or
    not stored at all."""

    reason = "not-in-log"
