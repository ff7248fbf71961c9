"""Errors on the wire as OpenAI sends them: ``{"error": {"message", "type", "param", "code"}}``.

Status codes follow OpenAI (and vLLM): 400 for a request that is malformed, out of bounds, uses a
field this server does not support, or can never be served (longer than the context or the KV
pool); 404 for an unknown model or route; 413 for a body over the size limit; 429 (with
``Retry-After``) when the queue is full; 503 while draining; 500 for a server fault. The official
SDK turns these into ``BadRequestError``, ``NotFoundError``, ``RateLimitError``, and so on.

``reason`` is what the request's record and span carry as ``error_type`` when the refusal is
recorded (see ``refusals``): a short CamelCase name such as ``QueueFull`` or ``InvalidRequest``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import Any

from aiohttp import web

__all__ = ["PREPARED", "InvalidRequest", "error_middleware", "request_key"]


def request_key(name: str) -> Any:
    """A typed request-storage key (``web.RequestKey``, aiohttp >= 3.13), else the plain name."""
    make = getattr(web, "RequestKey", None)
    return make(name, bool) if make is not None else name


PREPARED = request_key("fleetwatch.prepared")
"""Key set on an ``aiohttp`` request once its response headers were sent."""

_log = logging.getLogger(__name__)

_TYPES = {
    400: "invalid_request_error",
    404: "invalid_request_error",
    405: "invalid_request_error",
    413: "invalid_request_error",
    429: "rate_limit_exceeded",
}
_CODES = {
    404: "model_not_found",
    405: "method_not_allowed",
    413: "request_too_large",
    429: "rate_limit_exceeded",
    500: "internal_error",
    503: "service_unavailable",
}
_REASONS = {
    400: "InvalidRequest",
    404: "ModelNotFound",
    405: "MethodNotAllowed",
    413: "RequestTooLarge",
    429: "QueueFull",
    500: "ServerError",
    503: "Draining",
}


class InvalidRequest(Exception):
    """A request the server refuses: HTTP ``status``, a message, the offending field (``param``),
    OpenAI's ``code`` (a short string, defaulted from the status) and the ``reason`` recorded."""

    def __init__(
        self,
        status: int,
        message: str,
        param: str | None = None,
        *,
        code: str | None = None,
        reason: str | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.param = param
        self.code = code if code is not None else _CODES.get(status)
        self.reason = reason if reason is not None else _REASONS.get(status, "InvalidRequest")

    @property
    def kind(self) -> str:
        """OpenAI's error ``type``."""
        return _TYPES.get(
            self.status, "server_error" if self.status >= 500 else "invalid_request_error"
        )

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.code,
            }
        }


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def error_middleware(
    count: Callable[[int], None],
    on_crash: Callable[[web.Request, BaseException], None] | None = None,
) -> Any:
    """An aiohttp middleware that answers every error as an OpenAI error object.

    aiohttp's own 4xx (no such route, wrong method, body too large) become JSON with the same
    status; an unexpected exception becomes a JSON 500, counted with ``count`` and handed to
    ``on_crash`` (which records it) — never aiohttp's plain-text 500.
    """

    @web.middleware
    async def middleware(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPException as exc:
            if exc.status < 400:
                raise
            if exc.status == 404:
                msg = f"no route {request.method} {request.path}"
                err = InvalidRequest(404, msg, code="unknown_url", reason="UnknownRoute")
            else:
                err = InvalidRequest(exc.status, exc.reason or f"HTTP {exc.status}")
            count(err.status)
            return web.json_response(err.body(), status=err.status, headers=_allow(exc))
        except Exception as exc:
            if request.get(PREPARED):
                raise  # headers are out: aiohttp closes the connection, the stream ends short
            _log.exception("unhandled error serving %s %s", request.method, request.path)
            if on_crash is not None:
                on_crash(request, exc)
            err = InvalidRequest(500, f"internal server error ({type(exc).__name__})")
            count(500)
            return web.json_response(err.body(), status=500)

    return middleware


def _allow(exc: web.HTTPException) -> dict[str, str] | None:
    allow = exc.headers.get("Allow")
    return {"Allow": allow} if allow else None
