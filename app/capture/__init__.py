"""Capture files and streams -> payloads (``formats``, one reader per format) -> carried
handoff objects (``carriers``)."""
