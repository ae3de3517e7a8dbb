"""``/openapi.json``, ``/docs`` (Swagger UI) and ``/redoc``: the API document, behind the same read access as
the query API (``create_app`` attaches the guard), so a closed service does not describe itself to anyone.

With token reads a browser cannot open ``/docs`` by itself (it sends no bearer token when navigating): fetch
the document with a read token (``curl -H 'Authorization: Bearer ...' .../openapi.json``), or open the pages
through a loopback service with open reads.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

router = APIRouter(include_in_schema=False)
OPENAPI_PATH = "/openapi.json"


def _document_url(request: Request) -> str:
    root: Any = request.scope.get("root_path", "")
    return f"{root}{OPENAPI_PATH}"


@router.get(OPENAPI_PATH)
async def openapi_document(request: Request) -> JSONResponse:
    return JSONResponse(request.app.openapi())


@router.get("/docs")
async def swagger_ui(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(openapi_url=_document_url(request), title=f"{request.app.title} - Swagger UI")


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(openapi_url=_document_url(request), title=f"{request.app.title} - ReDoc")
