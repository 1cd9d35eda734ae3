"""Capture payloads -> verdicts and stored rows: the ingest pipeline, the verify command's
inputs, envelope items and rederive."""
