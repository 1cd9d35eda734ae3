"""handoff-trace: verify, store and triage signed handoffs between AI agents."""

__version__ = "0.1.0"
