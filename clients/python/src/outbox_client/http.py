"""OutboxClient: outbox's HTTP API (docs/agents.md, "HTTP API")."""

from __future__ import annotations

import json
import random
import time
import urllib.parse
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import KeyReusedError, OutboxError, from_http
from .intent import EnqueueResult, Intent

#: Statuses after which a request that is safe to repeat is sent again: the
#: server did not process it (429, 503) or a proxy lost the answer (502, 504).
RETRY_STATUSES = frozenset({429, 502, 503, 504})
#: The longest ?wait= the API accepts.
WAIT_MAX_SECONDS = 60


class OutboxClient:
    """A client of outbox's HTTP API for one bearer token (which picks the
    namespace and role).

    Requests that are safe to repeat are retried, with backoff, on a lost
    connection, a timeout, 429, 502, 503 and 504, up to ``retries`` times:
    reads (get, wait, list), and enqueue, because it carries its
    Idempotency-Key, so that a repeat of an enqueue that did reach the server
    is answered as a duplicate (the answer, never an error). cancel, resolve,
    approve and deny are sent once: their repeat would be answered with an
    error (not_cancellable, not_awaiting_approval) although the first one
    took effect.
    """

    def __init__(self, url: str = "http://127.0.0.1:8080", token: str | None = None, *, timeout: float = 10.0,
                 retries: int = 3, backoff: float = 0.2, session: Any = None):
        import requests

        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout
        self.retries = retries
        self.backoff = backoff
        self.session = session or requests.Session()

    # --- plumbing

    def _request(self, method: str, path: str, *, body: Any = None, params: Mapping[str, Any] | None = None,
                 headers: Mapping[str, str] | None = None, retry: bool, timeout: float | None = None) -> tuple[int, Any]:
        import requests

        h = {"Accept": "application/json"}
        if self.token:
            h["Authorization"] = "Bearer " + self.token
        data = None
        if body is not None:
            h["Content-Type"] = "application/json"
            data = json.dumps(body, allow_nan=False, separators=(",", ":"))
        h.update(headers or {})
        attempt = 0
        while True:
            try:
                res = self.session.request(method, self.url + path, data=data, params=params, headers=h,
                                           timeout=timeout or self.timeout)
            except (requests.ConnectionError, requests.Timeout):
                if not retry or attempt >= self.retries:
                    raise
                self._sleep(attempt, None)
                attempt += 1
                continue
            if retry and res.status_code in RETRY_STATUSES and attempt < self.retries:
                self._sleep(attempt, res.headers.get("Retry-After"))
                attempt += 1
                continue
            try:
                payload = res.json()
            except ValueError:
                payload = res.text
            return res.status_code, payload

    def _sleep(self, attempt: int, retry_after: str | None) -> None:
        delay = self.backoff * (2 ** attempt) * (0.5 + random.random())
        if retry_after:
            try:
                delay = max(delay, min(float(retry_after), 30.0))
            except ValueError:
                pass
        time.sleep(delay)

    @staticmethod
    def _path(key: str, action: str = "") -> str:
        return "/v1/intents/" + urllib.parse.quote(key, safe="") + action

    def _intent(self, status: int, payload: Any, ok: tuple[int, ...] = (200,)) -> Intent:
        if status not in ok:
            raise from_http(status, payload)
        return Intent.from_json(payload)

    # --- the API

    def enqueue(self, *, key: str, effect: str, args: Mapping[str, Any], requested_by: str | None = None,
                require_approval: bool = False, key_source: str | None = None,
                new_action: bool = False) -> EnqueueResult:
        """POST /v1/intents under the Idempotency-Key key. Answers the new
        intent, or the first one with ``duplicate=True``; raises
        ``KeyReusedError`` (with the existing intent, read after the refusal)
        for another action under the key. ``key_source="model"`` says the key
        came from a model (the server then guards it: PossibleDuplicateError).
        """
        body: dict[str, Any] = {"effect": effect, "args": dict(args)}
        if requested_by is not None:
            body["requested_by"] = requested_by
        if require_approval:
            body["require_approval"] = True
        if new_action:
            body["new_action"] = True
        headers = {"Idempotency-Key": key}
        if key_source:
            headers["Idempotency-Key-Source"] = key_source
        status, payload = self._request("POST", "/v1/intents", body=body, headers=headers, retry=True)
        if status in (200, 201):
            return EnqueueResult(intent=Intent.from_json(payload), duplicate=bool(payload.get("duplicate")))
        err = from_http(status, payload)
        if isinstance(err, KeyReusedError):
            try:
                err.existing = self.get(key)
            except OutboxError:
                pass
        raise err

    def get(self, key: str) -> Intent:
        """GET /v1/intents/{key}: the intent now."""
        return self._intent(*self._request("GET", self._path(key), retry=True))

    def wait(self, key: str, timeout: float = 30.0) -> Intent:
        """The intent once it is terminal, or as it is after timeout seconds
        (check ``intent.terminal``). Long polls of at most 60 s each
        (``?wait=``); an intent awaiting approval waits for a person."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            wait = max(0, min(WAIT_MAX_SECONDS, int(left)))
            status, payload = self._request("GET", self._path(key), params={"wait": f"{wait}s"}, retry=True,
                                            timeout=wait + self.timeout)
            intent = self._intent(status, payload)
            if intent.terminal or time.monotonic() >= deadline - 0.5:
                return intent

    def list(self, *, state: str | list[str] | None = None, effect: str | None = None,
             limit: int = 100) -> Iterator[Intent]:
        """GET /v1/intents, newest first, every page: an iterator that
        follows ``next_cursor``."""
        params: dict[str, Any] = {"limit": limit}
        if state:
            params["state"] = [state] if isinstance(state, str) else list(state)
        if effect:
            params["effect"] = effect
        while True:
            status, payload = self._request("GET", "/v1/intents", params=params, retry=True)
            if status != 200:
                raise from_http(status, payload)
            for obj in payload.get("intents") or []:
                yield Intent.from_json(obj)
            cursor = payload.get("next_cursor")
            if not cursor:
                return
            params["cursor"] = cursor

    def cancel(self, key: str, *, note: str = "") -> Intent:
        """POST /v1/intents/{key}/cancel (refused once an attempt may have
        reached the provider: NotCancellableError)."""
        body = {"note": note} if note else None
        return self._intent(*self._request("POST", self._path(key, "/cancel"), body=body, retry=False))

    def resolve(self, key: str, outcome: str, *, note: str = "") -> Intent:
        """POST /v1/intents/{key}/resolve: an operator's decision on an
        ``unknown`` intent (``succeeded``, ``failed`` or ``retry``)."""
        return self._intent(*self._request("POST", self._path(key, "/resolve"),
                                           body={"outcome": outcome, "note": note}, retry=False))

    def approve(self, key: str, args_sha256: str, *, note: str = "") -> Intent:
        """POST /v1/intents/{key}/approve, naming the args shown to the
        person by their args_sha256 (ApprovalMismatchError otherwise)."""
        return self._intent(*self._request("POST", self._path(key, "/approve"),
                                           body={"args_sha256": args_sha256, "note": note}, retry=False))

    def deny(self, key: str, args_sha256: str, *, note: str = "") -> Intent:
        """POST /v1/intents/{key}/deny: the intent ends ``cancelled``."""
        return self._intent(*self._request("POST", self._path(key, "/deny"),
                                           body={"args_sha256": args_sha256, "note": note}, retry=False))

    def effects(self) -> Any:
        """GET /v1/effects: the enabled effects and their args schemas."""
        status, payload = self._request("GET", "/v1/effects", retry=True)
        if status != 200:
            raise from_http(status, payload)
        return payload
