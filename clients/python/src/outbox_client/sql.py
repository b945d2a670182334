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
from .intent import EnqueueResult, Intent

#: SCHEMA_DEFAULT is the schema of outbox's tables and functions
#: (OUTBOX_SCHEMA of outboxd).
SCHEMA_DEFAULT = "outbox"
#: NAMESPACE_DEFAULT is the namespace of an enqueue that names none.
NAMESPACE_DEFAULT = "default"

_PRINTABLE = re.compile(r"[!-~]+")
_EFFECT = re.compile(r"[a-z][a-z0-9_]{0,63}")
_SCHEMA = re.compile(r"[A-Za-z_][A-Za-z0-9_$]{0,62}")

# The intent as the HTTP API writes it, built by the server as one jsonb
# value: one column to load rather than 25 (psycopg's loaders cost more per
# column than json.loads does), and the same answer from every driver
# (psycopg, psycopg2 and others each have their own jsonb and time types).
_INTENT = """jsonb_build_object(
    'id', (r.intent).id, 'namespace', (r.intent).namespace, 'key', (r.intent).key, 'effect', (r.intent).effect,
    'args', (r.intent).args, 'state', (r.intent).state, 'attempts', (r.intent).attempt, 'result', (r.intent).result,
    'error', (r.intent).error, 'provider_key', (r.intent).provider_key, 'requested_by', (r.intent).requested_by,
    'key_source', (r.intent).key_source, 'created_at', (r.intent).created_at, 'updated_at', (r.intent).updated_at,
    'completed_at', (r.intent).completed_at, 'resolved_by', (r.intent).resolved_by,
    'resolution_note', (r.intent).resolution_note, 'resolved_at', (r.intent).resolved_at,
    'approval_rule', (r.intent).approval_rule, 'approved_by', (r.intent).approved_by,
    'approved_at', (r.intent).approved_at, 'denied_by', (r.intent).denied_by, 'denied_at', (r.intent).denied_at,
    'approval_note', (r.intent).approval_note, 'job_id', (r.intent).job_id)::text"""

_NAMES = ("namespace", "key", "effect", "args", "requested_by", "require_approval")
_TYPES = ("text", "text", "text", "jsonb", "text", "boolean")


def _statement(schema: str, style: str, single: bool) -> str:
    """The enqueue statement: outbox_enqueue_many's arrays as array
    parameters, or, for one intent, built from scalar parameters (cheaper to
    encode)."""
    if not _SCHEMA.fullmatch(schema):
        raise ValueError(f"schema {schema!r} is not a plain SQL identifier")
    if style == "pyformat":
        binds = [f"%({n})s" for n in _NAMES]
    else:  # SQLAlchemy's text(): named binds, and CAST because of ':'.
        binds = [f":{n}" for n in _NAMES]
    if single:
        params = [f"ARRAY[CAST({b} AS {t})]" for b, t in zip(binds, _TYPES)]
    else:
        params = [f"CAST({b} AS {t}[])" for b, t in zip(binds, _TYPES)]
    # key_source: always explicit here, as for outbox.enqueue.
    params.insert(5, "ARRAY['explicit']" if single else
                  ("CAST(%(key_source)s AS text[])" if style == "pyformat" else "CAST(:key_source AS text[])"))
    return (f'SELECT r.ord, {_INTENT} AS intent, r.duplicate, r.conflict '
            f'FROM "{schema}".outbox_enqueue_many({", ".join(params)}) r ORDER BY r.ord')


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


def _params(items: list[Mapping[str, Any]], namespace: str) -> dict[str, Any]:
    """The statement's parameters: lists, or for one intent its scalars."""
    out: dict[str, list[Any]] = {n: [] for n in _NAMES}
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
        out["require_approval"].append(bool(item.get("require_approval", False)))
    if len(items) == 1:
        return {n: v[0] for n, v in out.items()}
    return {**out, "key_source": ["explicit"] * len(items)}


def _answer(rows: Iterable[Any], n: int) -> list[EnqueueResult]:
    results: list[EnqueueResult | None] = [None] * n
    for ord_, intent_json, duplicate, conflict in rows:
        intent = Intent.from_json(json.loads(intent_json))
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

        statement = text(_statement(schema, "named", len(items) == 1))
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
    statement = _statement(schema, "pyformat", len(items) == 1)
    params = _params(items, namespace)
    try:
        # Never prepared by name, whatever the connection's
        # prepare_threshold: a named statement stays on the server
        # connection that prepared it, which a transaction pooler (PgBouncer
        # before 1.21) lends to another client, or does not give this one
        # next time ("prepared statement "_pg3_0" already exists").
        cur = conn.execute(statement, params, prepare=False)
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
    statement = _statement(schema, "pyformat", len(items) == 1)
    params = _params(items, namespace)
    try:
        # Never prepared by name (see enqueue_many).
        cur = await conn.execute(statement, params, prepare=False)
        rows = await cur.fetchall()
    except psycopg.Error as e:
        mapped = from_database(e)
        if mapped is None:
            raise
        raise mapped from e
    return _answer(rows, len(items))
