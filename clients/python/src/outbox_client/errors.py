"""Outbox's errors as exceptions: one class per error code, one table.

The same table maps the SQL functions' errors (by SQLSTATE and constraint)
and the HTTP API's answers (``{"error": {"code", "field", "message"}}``), so
``except KeyReusedError`` catches a key reused over SQL and over HTTP alike.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .intent import Intent


class OutboxError(Exception):
    """An error of outbox's, with its stable ``code`` (``invalid_args``,
    ``not_found``, ...), the ``field`` at fault when there is one, and for
    HTTP answers the ``status``."""

    #: The code a subclass stands for; an instance may carry another (a
    #: code this version of the package does not know).
    default_code = "outbox_error"

    def __init__(self, message: str = "", *, code: str | None = None, field: str | None = None,
                 status: int | None = None):
        self.code = code or self.default_code
        self.field = field or None
        self.message = message
        self.status = status
        super().__init__(self._text())

    def _text(self) -> str:
        parts = [self.code]
        if self.field:
            parts.append(self.field)
        if self.message:
            parts.append(self.message)
        return ": ".join(parts)


class KeyReusedError(OutboxError):
    """The key was first used for another action (another effect or other
    args). ``existing`` is that first intent (over HTTP, read after the
    refusal; None when the read failed)."""

    default_code = "idempotency_key_reused"

    def __init__(self, message: str = "", *, existing: Intent | None = None, **kw: Any):
        self.existing = existing
        if not message and existing is not None:
            message = f"{existing.key!r} was first used for another action (effect {existing.effect})"
        super().__init__(message, **kw)


class KeyRequiredError(OutboxError):
    """A mutating HTTP call without an Idempotency-Key."""
    default_code = "idempotency_key_required"


class InvalidKeyError(OutboxError):
    """A key or namespace that is not 1 to 255 printable ASCII characters."""
    default_code = "invalid_key"


class InvalidArgsError(OutboxError):
    """Arguments the effect's schema (or the database) refuses; ``field``
    names the argument (``args.amount``)."""
    default_code = "invalid_args"


class InvalidJSONError(OutboxError):
    """A request body that is not JSON of the expected shape."""
    default_code = "invalid_json"


class UnknownEffectError(OutboxError):
    """An effect that is not enabled (or not a valid effect name)."""
    default_code = "unknown_effect"


class ApprovalMismatchError(OutboxError):
    """An approval or denial naming arguments (args_sha256) other than the
    intent's."""
    default_code = "approval_mismatch"


class NotAwaitingApprovalError(OutboxError):
    """An approval or denial of an intent that does not await approval."""
    default_code = "not_awaiting_approval"


class NotCancellableError(OutboxError):
    """A cancel of an intent that may already have reached its provider."""
    default_code = "not_cancellable"


class CancelRequestedError(OutboxError):
    """A cancel passed to the provider that holds the intent's work as a task
    (an MCP upstream's): the intent ends by what the provider reports."""
    default_code = "cancel_requested"


class NotFoundError(OutboxError):
    """No intent with this key in the namespace."""
    default_code = "not_found"


class NotUnknownError(OutboxError):
    """A resolve of an intent that is not ``unknown``."""
    default_code = "not_unknown"


class PossibleDuplicateError(OutboxError):
    """A model's fresh key for an action recorded moments before under
    another key (``Idempotency-Key-Source: model``)."""
    default_code = "possible_duplicate"


class RateLimitedError(OutboxError):
    """The token's enqueue rate (OUTBOX_RATE_LIMIT) is exceeded."""
    default_code = "rate_limited"


class ForbiddenError(OutboxError):
    """The token's role, or the database role, may not do this."""
    default_code = "forbidden"


class UnauthorizedError(OutboxError):
    """A missing or unknown bearer token."""
    default_code = "unauthorized"


class BodyTooLargeError(OutboxError):
    """A request body over the API's 1 MiB."""
    default_code = "body_too_large"


class InternalError(OutboxError):
    """A failure of the server's; its log has the details."""
    default_code = "internal_error"


#: ERRORS is the one table: error code -> exception class, for SQL errors
#: and HTTP answers alike. A code not in it raises a plain OutboxError
#: carrying the code.
ERRORS: dict[str, type[OutboxError]] = {
    cls.default_code: cls
    for cls in (
        ApprovalMismatchError, BodyTooLargeError, ForbiddenError, InternalError, InvalidArgsError,
        InvalidJSONError, InvalidKeyError, KeyRequiredError, KeyReusedError, NotAwaitingApprovalError,
        NotCancellableError, CancelRequestedError, NotFoundError, NotUnknownError, PossibleDuplicateError, RateLimitedError,
        UnauthorizedError, UnknownEffectError,
    )
}

# What the database raises, as outbox codes. The constraints are the intent
# table's row checks (migrations/008_checks_in_trigger.up.sql), which name
# the input at fault.
_CONSTRAINTS = {
    "outbox_intent_key_check": ("invalid_key", "key"),
    "outbox_intent_namespace_check": ("invalid_key", "namespace"),
    "outbox_intent_effect_check": ("unknown_effect", "effect"),
    "outbox_intent_args_check": ("invalid_args", "args"),
    "outbox_intent_requested_by_check": ("invalid_args", "requested_by"),
}


def error_for(code: str, message: str = "", *, field: str | None = None, status: int | None = None,
              **kw: Any) -> OutboxError:
    """The exception for an outbox error code, from the table."""
    cls = ERRORS.get(code, OutboxError)
    return cls(message, code=code, field=field, status=status, **kw)


def from_http(status: int, body: Any) -> OutboxError:
    """The exception for an HTTP API error answer."""
    err = body.get("error") if isinstance(body, dict) else None
    if not isinstance(err, dict):
        code = "internal_error" if status >= 500 else "http_%d" % status
        return error_for(code, str(body)[:500], status=status)
    return error_for(str(err.get("code") or "http_%d" % status), str(err.get("message") or ""),
                     field=err.get("field"), status=status)


def from_database(exc: BaseException) -> OutboxError | None:
    """The outbox error a database error stands for (psycopg's and, through
    SQLAlchemy's ``orig``, any DB-API driver's), or None for one that is not
    the caller's input (a lost connection, say), which is re-raised as is."""
    orig = getattr(exc, "orig", None) or exc
    sqlstate = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    if not sqlstate:
        return None
    diag = getattr(orig, "diag", None)
    primary = getattr(diag, "message_primary", None) or str(orig).splitlines()[0]
    if sqlstate == "OB001":
        return KeyReusedError(primary)
    if sqlstate == "23514":
        constraint = getattr(diag, "constraint_name", None)
        code, field = _CONSTRAINTS.get(constraint, ("invalid_args", None))
        return error_for(code, f"refused by constraint {constraint}", field=field)
    if sqlstate == "42501":
        return ForbiddenError(primary)
    # Class 22 (a data exception: jsonb refused a value) and 54001
    # (statement_too_complex: nesting too deep) are the input's fault.
    if sqlstate.startswith("22") or sqlstate == "54001":
        return InvalidArgsError("refused by the database: " + primary, field="args")
    return None
