"""Annotated dependencies: the app's state, settings, engine and clock, and the three kinds of auth.

- Ingest: ``Authorization: Bearer <collector token>``; 401 when missing, unknown or revoked, 403 for a read
  token (it authenticates, but may not write).
- Read (query API, ``/metrics``, ``/openapi.json``, ``/docs``, ``/redoc``): attached by ``create_app`` only
  when the read mode in force (``settings.read_mode``) is ``token``, the default on a non-loopback address.
- Alertmanager: bearer or basic auth, as Alertmanager's ``http_config`` sends them.

In development mode a kind of auth with no credentials configured lets everything through.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, HTTPException, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBasic, HTTPBasicCredentials, HTTPBearer
from sqlalchemy import Engine

from fleet.clock import Clock
from phasefit.service.settings import ServiceSettings
from phasefit.service.state import ServiceState
from phasefit.service.tokens import Token

# Security scheme declarations (stateless; they only shape the OpenAPI document and parse the header).
_bearer = HTTPBearer(auto_error=False, description="A token from the service's token file.")
_basic = HTTPBasic(auto_error=False, description="Alertmanager http_config.basic_auth.")
_DEV_TOKEN = Token("dev", "")


async def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.phasefit
    return state


StateDep = Annotated[ServiceState, Depends(get_state)]


async def get_settings(state: StateDep) -> ServiceSettings:
    return state.settings


async def get_engine(state: StateDep) -> Engine:
    return state.engine


async def get_clock(state: StateDep) -> Clock:
    return state.clock


SettingsDep = Annotated[ServiceSettings, Depends(get_settings)]
EngineDep = Annotated[Engine, Depends(get_engine)]
ClockDep = Annotated[Clock, Depends(get_clock)]
BearerDep = Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
BasicDep = Annotated[HTTPBasicCredentials | None, Depends(_basic)]


def _unauthorized(
    state: ServiceState, area: str, reason: str, message: str, scheme: str = "Bearer"
) -> HTTPException:
    state.metrics.auth_failures.labels(area, reason).inc()
    return HTTPException(401, message, headers={"WWW-Authenticate": scheme})


async def require_ingest_token(state: StateDep, credentials: BearerDep) -> Token:
    """The collector token of the request (401 missing/unknown/revoked, 403 a read-only token)."""
    if state.settings.dev and not state.ingest_tokens.configured:
        return _DEV_TOKEN
    if credentials is None:
        raise _unauthorized(
            state, "ingest", "missing", "missing bearer token (Authorization: Bearer <token>)"
        )
    token = state.ingest_tokens.lookup(credentials.credentials)
    if token is not None:
        return token
    if state.read_tokens.lookup(credentials.credentials) is not None:
        state.metrics.auth_failures.labels("ingest", "read_only").inc()
        raise HTTPException(403, "this token may read but not ingest")
    raise _unauthorized(state, "ingest", "unknown", "unknown or revoked token")


async def require_read_token(state: StateDep, credentials: BearerDep) -> None:
    """Read access when it is token-guarded (attached by ``create_app`` only in that case)."""
    if state.settings.dev and not state.read_tokens.configured:
        return
    if credentials is None:
        raise _unauthorized(state, "read", "missing", "missing bearer token (Authorization: Bearer <token>)")
    if state.read_tokens.lookup(credentials.credentials) is not None:
        return
    if state.ingest_tokens.lookup(credentials.credentials) is not None:
        state.metrics.auth_failures.labels("read", "ingest_only").inc()
        raise HTTPException(403, "this token may ingest but not read")
    raise _unauthorized(state, "read", "unknown", "unknown or revoked token")


async def require_alertmanager(state: StateDep, bearer: BearerDep, basic: BasicDep) -> None:
    """Alertmanager's credentials: a bearer token or basic auth, whichever is configured."""
    if not state.alertmanager_configured:
        if state.settings.dev:
            return
        raise _unauthorized(
            state, "alertmanager", "unconfigured",
            "the Alertmanager receiver has no credentials configured (PHASEFIT_ALERTMANAGER_TOKENS_FILE or "
            "PHASEFIT_ALERTMANAGER_USERNAME/PASSWORD)",
        )  # fmt: skip
    if bearer is not None and state.alertmanager_tokens.lookup(bearer.credentials) is not None:
        return
    basic_ok = state.alertmanager_basic is not None and basic is not None
    if basic_ok and state.alertmanager_basic.matches(basic.username, basic.password):  # type: ignore[union-attr]
        return
    reason = "missing" if bearer is None and basic is None else "unknown"
    scheme = (
        "Basic"
        if state.alertmanager_basic is not None and not state.alertmanager_tokens.configured
        else "Bearer"
    )
    raise _unauthorized(state, "alertmanager", reason, "missing or wrong Alertmanager credentials", scheme)


IngestToken = Annotated[Token, Depends(require_ingest_token)]
AlertmanagerAuth = Depends(require_alertmanager)
ReadAuth = Depends(require_read_token)
