"""handoff-context: sign, carry and check Signed Handoff Context elements."""

__version__ = "0.1.0"
