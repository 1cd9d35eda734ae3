"""Bearer tokens and the role matrix.

| permission | what                           | roles                   |
|------------|--------------------------------|-------------------------|
| ingest     | POST /ingest                   | ingest, admin           |
| verify     | POST /verify                   | ingest, operator, admin |
| read       | every GET except the probes    | read, operator, admin   |
| triage     | PATCH /flags/{id}              | operator, admin         |
| metrics    | GET /metrics                   | every role              |

``/healthz`` and ``/readyz`` are anonymous (they say up or down and nothing else), and so is
the OpenAPI document (it describes the API, which is public, not the data). A missing or
unknown, expired or revoked token is 401 with ``WWW-Authenticate: Bearer``; a valid token
without the role is 403. Expiry and revocation are read from the database on every request,
against the wall clock (the store's clock may be pinned to a capture's time; a token's
lifetime is real time). Routes take the principal through the ``Annotated`` aliases at the
bottom.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from enum import StrEnum
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from app.store.tokens import Principal, Role, authenticate
from app.web.errors import ApiError
from app.web.service import Service, current_service


class Permission(StrEnum):
    INGEST = "ingest"
    VERIFY = "verify"
    READ = "read"
    TRIAGE = "triage"
    METRICS = "metrics"
    TRUST = "trust"


GRANTS: dict[Permission, frozenset[Role]] = {
    Permission.INGEST: frozenset({Role.INGEST, Role.ADMIN}),
    Permission.VERIFY: frozenset({Role.INGEST, Role.OPERATOR, Role.ADMIN}),
    Permission.READ: frozenset({Role.READ, Role.OPERATOR, Role.ADMIN}),
    Permission.TRIAGE: frozenset({Role.OPERATOR, Role.ADMIN}),
    # Counters and gauges, no stored data: any token may scrape them (README, SECURITY.md).
    Permission.METRICS: frozenset(Role),
    # Revoking a key changes what every verdict rests on: administrators only.
    Permission.TRUST: frozenset({Role.ADMIN}),
}

_bearer = HTTPBearer(
    auto_error=False,
    scheme_name="token",
    description="A token made with `handoff-trace tokens create --role ROLE --name NAME`.",
)


def _unauthorized(message: str, *, invalid: bool) -> ApiError:
    # RFC 6750 section 3: name the scheme, and say invalid_token when one was sent.
    challenge = 'Bearer error="invalid_token"' if invalid else "Bearer"
    return ApiError(401, message, headers={"WWW-Authenticate": challenge})


def requires(permission: Permission) -> Callable[..., Principal]:
    """A dependency that answers 401/403 unless the request's token grants ``permission``."""

    def dependency(
        request: Request,
        service: Annotated[Service, Depends(current_service)],
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> Principal:
        if credentials is None:
            raise _unauthorized(
                "a bearer token is needed (Authorization: Bearer TOKEN)", invalid=False
            )
        with service.reading() as session:
            principal = authenticate(session, credentials.credentials, now=int(time.time()))
        if principal is None:
            raise _unauthorized("the bearer token is unknown, expired or revoked", invalid=True)
        if principal.role not in GRANTS[permission]:
            raise ApiError(
                403,
                f"role {principal.role.value!r} may not {permission.value}; "
                f"roles that may: {', '.join(sorted(GRANTS[permission]))}",
            )
        request.state.principal = principal
        return principal

    return dependency


Ingester = Annotated[Principal, Depends(requires(Permission.INGEST))]
# The bearer credentials as sent, for a route that checks them itself (the metrics).
Credentials = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
VerifyCaller = Annotated[Principal, Depends(requires(Permission.VERIFY))]
Reader = Annotated[Principal, Depends(requires(Permission.READ))]
CurrentOperator = Annotated[Principal, Depends(requires(Permission.TRIAGE))]
TrustAdmin = Annotated[Principal, Depends(requires(Permission.TRUST))]
