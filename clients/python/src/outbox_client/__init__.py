"""outbox_client: outbox from Python.

- ``enqueue`` / ``enqueue_many`` (and ``enqueue_async``): record intents in
  your own database transaction (psycopg 3, SQLAlchemy), through outbox's
  SQL function;
- ``OutboxClient``: the HTTP API;
- ``idempotent_tool``: an agent's tool that records its effect once per
  logical action;
- exceptions, one per error code (``ERRORS``).

Only what you use is imported: the HTTP part needs requests, enqueue needs
psycopg or SQLAlchemy.
"""

from .errors import (
    ERRORS,
    ApprovalMismatchError,
    BodyTooLargeError,
    ForbiddenError,
    InternalError,
    InvalidArgsError,
    InvalidJSONError,
    InvalidKeyError,
    KeyRequiredError,
    KeyReusedError,
    NotAwaitingApprovalError,
    NotCancellableError,
    CancelRequestedError,
    NotFoundError,
    NotUnknownError,
    OutboxError,
    PossibleDuplicateError,
    RateLimitedError,
    UnauthorizedError,
    UnknownEffectError,
)
from .http import OutboxClient
from .intent import TERMINAL_STATES, EnqueueResult, Intent, args_sha256, canonical_json
from .sql import NAMESPACE_DEFAULT, SCHEMA_DEFAULT, enqueue, enqueue_async, enqueue_many, enqueue_many_async
from .tool import KEY_ORIGINS, idempotent_tool

__version__ = "0.1.0"

__all__ = [
    "ERRORS", "KEY_ORIGINS", "NAMESPACE_DEFAULT", "SCHEMA_DEFAULT", "TERMINAL_STATES",
    "ApprovalMismatchError", "BodyTooLargeError", "EnqueueResult", "ForbiddenError", "Intent", "InternalError",
    "InvalidArgsError", "InvalidJSONError", "InvalidKeyError", "KeyRequiredError", "KeyReusedError",
    "NotAwaitingApprovalError", "NotCancellableError", "CancelRequestedError", "NotFoundError", "NotUnknownError", "OutboxClient",
    "OutboxError", "PossibleDuplicateError", "RateLimitedError", "UnauthorizedError", "UnknownEffectError",
    "args_sha256", "canonical_json", "enqueue", "enqueue_async", "enqueue_many", "enqueue_many_async",
    "idempotent_tool",
]
