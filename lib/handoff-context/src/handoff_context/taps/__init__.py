"""Zero-code taps that feed a ``Reporter`` from an agent's own traffic: an ASGI middleware
for A2A and MCP servers (``taps.asgi``) and httpx event hooks for their clients
(``taps.httpx``). Neither delays nor changes a byte of what passes through."""
