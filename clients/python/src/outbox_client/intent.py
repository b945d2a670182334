"""The intent, as the HTTP API and the SQL functions answer it."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

#: States in which no worker will touch the intent again.
TERMINAL_STATES = frozenset({"succeeded", "failed", "unknown", "cancelled"})


@dataclass(frozen=True)
class Intent:
    """One logical action, identified by (namespace, key). Fields are the
    HTTP API's intent JSON (docs/agents.md); those an enqueue in SQL cannot
    know (enqueued_by, job_id) are None there."""

    id: int
    namespace: str
    key: str
    effect: str
    args: dict[str, Any]
    state: str
    attempts: int = 0
    args_sha256: str = ""
    result: Any = None
    error: dict[str, Any] | None = None
    provider_key: str = ""
    requested_by: str | None = None
    key_source: str = "explicit"
    created_at: datetime | None = None
    updated_at: datetime | None = None
    completed_at: datetime | None = None
    enqueued_by: str | None = None
    resolved_by: str | None = None
    resolution_note: str | None = None
    resolved_at: datetime | None = None
    approval_rule: str | None = None
    approved_by: str | None = None
    approved_at: datetime | None = None
    denied_by: str | None = None
    denied_at: datetime | None = None
    approval_note: str | None = None
    job_id: int | None = None
    #: Fields of a newer server this version does not name.
    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    @property
    def terminal(self) -> bool:
        """Whether no worker will touch the intent again."""
        return self.state in TERMINAL_STATES

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> Intent:
        """The intent of an HTTP answer (its ``duplicate`` is left out)."""
        names = {f.name for f in dataclasses.fields(cls)} - {"extra"}
        kw: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for k, v in obj.items():
            if k in names:
                kw[k] = _parse_time(v) if k.endswith("_at") else v
            elif k != "duplicate":
                extra[k] = v
        if not kw.get("args_sha256") and "args" in kw:
            kw["args_sha256"] = args_sha256(kw["args"])
        return cls(**kw, extra=extra)

    def to_json(self) -> dict[str, Any]:
        """The intent as the HTTP API writes it."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            if f.name == "extra":
                continue
            v = getattr(self, f.name)
            out[f.name] = v.isoformat() if isinstance(v, datetime) else v
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class EnqueueResult:
    """What an enqueue answered: the intent, and whether the key was already
    recorded for the same action (then ``intent`` is the first one, in
    whatever state it is)."""

    intent: Intent
    duplicate: bool


def _parse_time(v: Any) -> Any:
    if isinstance(v, str):
        try:
            return datetime.fromisoformat(v.replace("Z", "+00:00"))
        except ValueError:
            return v
    return v


def canonical_json(value: Any) -> str:
    """RFC 8785 (JCS) canonical JSON of value: object members sorted by
    their UTF-16 code units, no white space, numbers as ECMAScript prints
    them. Its SHA-256 is an intent's args_sha256."""
    if value is None or isinstance(value, bool):
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _es_number(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, dict):
        items = sorted(value.items(), key=lambda kv: kv[0].encode("utf-16-be"))
        return "{" + ",".join(json.dumps(k, ensure_ascii=False) + ":" + canonical_json(v) for k, v in items) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(canonical_json(v) for v in value) + "]"
    raise TypeError(f"not a JSON value: {type(value).__name__}")


def _es_number(x: float) -> str:
    """x as ECMAScript's Number::toString prints it (RFC 8785, 3.2.2.3)."""
    if math.isnan(x) or math.isinf(x):
        raise ValueError("NaN and Infinity are not JSON")
    if x == 0:
        return "0"
    if x.is_integer() and abs(x) < 1e21:
        return str(int(x))
    r = repr(x)  # the shortest text that reads back as x, as ECMAScript's
    if "e" not in r:
        return r
    mantissa, exp = r.split("e")
    mantissa = mantissa.removesuffix(".0")
    e = int(exp)
    digits = mantissa.replace("-", "").replace(".", "")
    point = e + 1  # position of the decimal point after the first digit
    sign = "-" if x < 0 else ""
    if 0 < point <= 21:
        if len(digits) <= point:
            return sign + digits + "0" * (point - len(digits))
        return sign + digits[:point] + "." + digits[point:]
    if -6 < point <= 0:
        return sign + "0." + "0" * (-point) + digits
    return sign + mantissa + "e" + ("+" if e > 0 else "-") + str(abs(e))


def args_sha256(args: Any) -> str:
    """The hex SHA-256 of args' canonical JSON: what an approval names."""
    return hashlib.sha256(canonical_json(args).encode("utf-8")).hexdigest()
