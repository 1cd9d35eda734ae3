"""OpenTelemetry both ways (issue 23, docs/otlp.md): verified hops out as OTLP spans
(``spans``, ``export``), handoff elements in from OTLP spans (``receive``).

The ids are derived, not stored (``ids``): any instance exports the same span for the same
hop, and a re-export changes nothing at the receiver. What the spans say is read through
``app.store.otlp``; what arrives is judged by the one ingest pipeline.
"""
