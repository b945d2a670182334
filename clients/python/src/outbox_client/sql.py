"""Enqueue in the caller's own database transaction.

An enqueue writes only the intent row, in the transaction of the connection
it is given: if the caller rolls back, nothing is left; if it commits,
outboxd's dispatcher runs the intent. No outboxd call, no River client.

It goes through outbox's SQL function ``outbox_enqueue_many`` (the batch
form of ``outbox.enqueue``, same rules, granted to the same roles by
``outboxd migrate print-grants``), in one statement and one round trip.
That function answers a key reused for another action with the existing
intent instead of raising, and undoes its own writes in a subtransaction
of its own: so ``KeyReusedError`` carries the existing intent and the
caller's transaction stays usable, without a SAVEPOINT round trip of ours.
Input the database would refuse (a bad key, args that are not an object) is
checked here first, for the same reason: a refusal by the database aborts
the caller's transaction.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from .errors import InvalidArgsError, InvalidKeyError, KeyReusedError, UnknownEffectError, from_database
from .intent import EnqueueResult, Intent, args_sha256

#: SCHEMA_DEFAULT is the schema of outbox's tables and functions
#: (OUTBOX_SCHEMA of outboxd).
SCHEMA_DEFAULT = "outbox"
#: NAMESPACE_DEFAULT is the namespace of an enqueue that names none.
NAMESPACE_DEFAULT = "default"

_PRINTABLE = re.compile(r"[!-~]+")
_EFFECT = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")

# The intent's columns, as the HTTP API names them. The JSON columns come as
# text, so that every driver answers the same (psycopg, psycopg2 and others
# each have their own jsonb decoding).
_COLUMNS = """(r.intent).id, (r.intent).namespace, (r.intent).key, (r.intent).effect, (r.intent).args::text,
    (r.intent).state, (r.intent).attempt, (r.intent).result::text, (r.intent).error::text,
    (r.intent).provider_key, (r.intent).requested_by, (r.intent).key_source,
    (r.intent).created_at, (r.intent).updated_at, (r.intent).completed_at,
    (r.intent).resolved_by, (r.intent).resolution_note, (r.intent).resolved_at,
    (r.intent).approval_rule, (r.intent).approved_by, (r.intent).approved_at,
    (r.intent).denied_by, (r.intent).denied_at, (r.intent).approval_note, (r.intent).job_id,
    r.ord, r.duplicate, r.conflict"""
_NAMES = ("id", "namespace", "key", "effect", "args", "state", "attempts", "result", "error", "provider_key",
          "requested_by", "key_source", "created_at", "updated_at", "completed_at", "resolved_by",
          "resolution_note", "resolved_at", "approval_rule", "approved_by", "approved_at", "denied_by",
          "denied_at", "approval_note", "job_id")


def _statement(schema: str, style: str) -> str:
    if not _SCHEMA.fullmatch(schema):
        raise ValueError(f"schema {schema!r} is not a plain SQL identifier")
    names = ("namespace", "key", "effect", "args", "requested_by", "key_source", "require_approval")
    types = ("text[]", "text[]", "text[]", "jsonb[]", "text[]", "text[]", "boolean[]")
    if style == "pyformat":
        params = ", ".join(f"%({n})s::{t}" for n, t in zip(names, types))
    else:  # SQLAlchemy's text(): named binds, and CAST because of ':'.
        params = ", ".join(f"CAST(:{n} AS {t})" for n, t in zip(names, types))
    return (f'SELECT {_COLUMNS} FROM "{schema}".outbox_enqueue_many({params}) r ORDER BY r.ord')


def _check(namespace: str, key: str, effect: str, args: Any, requested_by: str | None) -> str:
    """Checks one intent's input as the database would, and returns its args
    as JSON text. ``key_from``'s mistakes surface here, before anything is
    sent."""
    if not isinstance(namespace, str) or len(namespace) > 64 or not _PRINTABLE.fullmatch(namespace):
        raise InvalidKeyError("must be 1 to 64 printable ASCII characters (0x21 to 0x7E)", field="namespace")
    if not isinstance(key, str) or len(key) > 255 or not _PRINTABLE.fullmatch(key):
        raise InvalidKeyError("must be 1 to 255 printable ASCII characters (0x21 to 0x7E)", field="key")
    if not isinstance(effect, str) or not _EFFECT.fullmatch(effect):
        raise UnknownEffectError(f"effect {effect!r} is not a valid effect name", field="effect")
    if not isinstance(args, Mapping):
        raise InvalidArgsError("must be a JSON object (a dict)", field="args")
    try:
        text = json.dumps(args, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise InvalidArgsError(f"not JSON: {e}", field="args") from None
    if "\\u0000" in text:
        # jsonb refuses the NUL character.
        raise InvalidArgsError("must not contain the NUL character (\\u0000)", field="args")
    if requested_by is not None:
        if not isinstance(requested_by, str) or len(requested_by) > 255 or "\x00" in requested_by:
            raise InvalidArgsError("must be a string of at most 255 characters without NUL", field="requested_by")
    return text


def _params(items: list[Mapping[str, Any]], namespace: str) -> dict[str, list[Any]]:
    out: dict[str, list[Any]] = {n: [] for n in ("namespace", "key", "effect", "args", "requested_by",
                                                 "key_source", "require_approval")}
    for i, item in enumerate(items):
        unknown = set(item) - {"namespace", "key", "effect", "args", "requested_by", "require_approval"}
        if unknown:
            raise TypeError(f"item {i}: unexpected fields {sorted(unknown)}")
        ns = item.get("namespace") or namespace
        try:
            args = _check(ns, item.get("key"), item.get("effect"), item.get("args"), item.get("requested_by"))
        except (InvalidKeyError, InvalidArgsError, UnknownEffectError) as e:
            if len(items) > 1 and e.field:
                e.field = f"[{i}].{e.field}"
            raise
        out["namespace"].append(ns)
        out["key"].append(item["key"])
        out["effect"].append(item["effect"])
        out["args"].append(args)
        out["requested_by"].append(item.get("requested_by"))
        out["key_source"].append("explicit")
        out["require_approval"].append(bool(item.get("require_approval", False)))
    return out


def _answer(rows: Iterable[Any], n: int) -> list[EnqueueResult]:
    results: list[EnqueueResult | None] = [None] * n
    for row in rows:
        row = tuple(row)
        kw = dict(zip(_NAMES, row[:len(_NAMES)]))
        for k in ("args", "result", "error"):
            kw[k] = json.loads(kw[k]) if kw[k] is not None else None
        kw["args_sha256"] = args_sha256(kw["args"])
        intent = Intent(**kw)
        ord_, duplicate, conflict = row[len(_NAMES):]
        if conflict:
            # The function wrote nothing of the batch, and answered only
            # with the intent first recorded under the key.
            raise KeyReusedError(existing=intent, field="key" if n == 1 else f"[{ord_}].key")
        results[ord_] = EnqueueResult(intent=intent, duplicate=bool(duplicate))
    if any(r is None for r in results):
        raise RuntimeError("outbox: the enqueue answered for fewer intents than it was given")
    return results  # type: ignore[return-value]


def _is_sqlalchemy(conn: Any) -> bool:
    return type(conn).__module__.startswith("sqlalchemy")


def enqueue(conn: Any, *, namespace: str = NAMESPACE_DEFAULT, key: str, effect: str, args: Mapping[str, Any],
            requested_by: str | None = None, require_approval: bool = False,
            schema: str = SCHEMA_DEFAULT) -> EnqueueResult:
    """Records one intent in conn's current transaction, with one statement.

    conn is a psycopg 3 ``Connection`` (or cursor), or a SQLAlchemy
    ``Connection`` or ``Session``. A new key answers the new intent; the same
    key for the same action (effect and args equal as jsonb) answers the
    first intent with ``duplicate=True``, whatever its state; the same key for
    another action raises ``KeyReusedError`` carrying the first intent, and
    leaves the transaction usable. Approval rules (OUTBOX_APPROVAL) hold for
    it as for every enqueue; ``require_approval`` adds a brake, never lifts
    one.
    """
    item = {"namespace": namespace, "key": key, "effect": effect, "args": args, "requested_by": requested_by,
            "require_approval": require_approval}
    return enqueue_many(conn, [item], schema=schema)[0]


def enqueue_many(conn: Any, items: Iterable[Mapping[str, Any]], *, namespace: str = NAMESPACE_DEFAULT,
                 schema: str = SCHEMA_DEFAULT) -> list[EnqueueResult]:
    """Records many intents in conn's current transaction, with one statement,
    atomically: every item is recorded (new or duplicate), or, when one key
    was used for another action, none is and ``KeyReusedError`` names it.
    Each item is a mapping with ``key``, ``effect``, ``args`` and optionally
    ``namespace`` (else the ``namespace`` argument), ``requested_by`` and
    ``require_approval``. Results are in the items' order."""
    items = list(items)
    if not items:
        return []
    if _is_sqlalchemy(conn):
        from sqlalchemy import text

        statement = text(_statement(schema, "named"))
        params = _params(items, namespace)
        try:
            rows = conn.execute(statement, params).fetchall()
        except Exception as e:
            mapped = from_database(e)
            if mapped is None:
                raise
            raise mapped from e
        return _answer(rows, len(items))

    import psycopg

    if isinstance(conn, psycopg.AsyncConnection) or isinstance(conn, psycopg.AsyncCursor):
        raise TypeError("an async connection: use enqueue_async / enqueue_many_async")
    statement = _statement(schema, "pyformat")
    params = _params(items, namespace)
    try:
        # Prepared once per connection: the statement is the same every time.
        cur = conn.execute(statement, params, prepare=True) if isinstance(conn, psycopg.Connection) \
            else conn.execute(statement, params)
        rows = cur.fetchall()
    except psycopg.Error as e:
        mapped = from_database(e)
        if mapped is None:
            raise
        raise mapped from e
    return _answer(rows, len(items))


async def enqueue_async(conn: Any, *, namespace: str = NAMESPACE_DEFAULT, key: str, effect: str,
                        args: Mapping[str, Any], requested_by: str | None = None, require_approval: bool = False,
                        schema: str = SCHEMA_DEFAULT) -> EnqueueResult:
    """enqueue for a psycopg 3 ``AsyncConnection`` (or async cursor)."""
    item = {"namespace": namespace, "key": key, "effect": effect, "args": args, "requested_by": requested_by,
            "require_approval": require_approval}
    return (await enqueue_many_async(conn, [item], schema=schema))[0]


async def enqueue_many_async(conn: Any, items: Iterable[Mapping[str, Any]], *, namespace: str = NAMESPACE_DEFAULT,
                             schema: str = SCHEMA_DEFAULT) -> list[EnqueueResult]:
    """enqueue_many for a psycopg 3 ``AsyncConnection`` (or async cursor)."""
    import psycopg

    items = list(items)
    if not items:
        return []
    statement = _statement(schema, "pyformat")
    params = _params(items, namespace)
    try:
        if isinstance(conn, psycopg.AsyncConnection):
            cur = await conn.execute(statement, params, prepare=True)
        else:
            cur = await conn.execute(statement, params)
        rows = await cur.fetchall()
    except psycopg.Error as e:
        mapped = from_database(e)
        if mapped is None:
            raise
        raise mapped from e
    return _answer(rows, len(items))
