"""OutboxClient and idempotent_tool against a real outboxd serve."""

from __future__ import annotations

import http.server
import threading

import pytest
import requests

import outbox_client as ob


def test_enqueue_duplicate_wait_and_errors(env, key):
    first = env.agent.enqueue(key=key, effect="noop", args={"amount": 5}, requested_by="pytest")
    again = env.agent.enqueue(key=key, effect="noop", args={"amount": 5.0})
    assert not first.duplicate and again.duplicate and first.intent.id == again.intent.id
    assert env.agent.wait(key).state == "succeeded"
    with pytest.raises(ob.UnknownEffectError) as e:
        env.agent.enqueue(key=key + "-x", effect="no_such_effect", args={})
    assert e.value.field == "effect" and e.value.status == 400
    with pytest.raises(ob.InvalidArgsError) as e:
        env.agent.enqueue(key=key + "-x", effect="charge", args={"amount": 1})
    assert e.value.field.startswith("args.")
    with pytest.raises(ob.InvalidKeyError):
        env.agent.enqueue(key="has space", effect="noop", args={"amount": 1})
    with pytest.raises(ob.UnauthorizedError):
        ob.OutboxClient(env.url, "not-a-token-0123456789").get(key)
    with pytest.raises(ob.NotFoundError):
        env.agent.get(key + "-missing")


def test_list_follows_the_cursor(env, key):
    for i in range(5):
        env.agent.enqueue(key=f"{key}-{i}", effect="noop", args={"amount": 20000 + i})
    held = [i for i in env.agent.list(state="awaiting_approval", effect="noop", limit=2) if i.key.startswith(key)]
    assert sorted(i.key for i in held) == [f"{key}-{i}" for i in range(5)]
    # Cancel one: it never ran.
    cancelled = env.agent.cancel(f"{key}-0", note="changed my mind")
    assert cancelled.state == "cancelled"
    with pytest.raises(ob.NotCancellableError):
        env.agent.enqueue(key=f"{key}-done", effect="noop", args={"amount": 1})
        env.agent.wait(f"{key}-done")
        env.agent.cancel(f"{key}-done")
    with pytest.raises(ob.NotUnknownError):
        env.operator.resolve(f"{key}-done", "succeeded", note="x")


class _Flaky(http.server.BaseHTTPRequestHandler):
    """Answers 503 to the first two requests, then forwards to serve: a
    proxy in front of outboxd that is briefly unavailable."""

    upstream = ""
    seen: list[str] = []

    def _any(self):
        _Flaky.seen.append(self.command + " " + self.path)
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        if len(_Flaky.seen) <= 2:
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")}
        res = requests.request(self.command, _Flaky.upstream + self.path, data=body or None, headers=headers)
        self.send_response(res.status_code)
        self.send_header("Content-Type", res.headers.get("Content-Type", "application/json"))
        self.send_header("Content-Length", str(len(res.content)))
        self.end_headers()
        self.wfile.write(res.content)

    do_GET = do_POST = _any

    def log_message(self, *args):
        pass


def test_retries_only_what_is_safe(env, key):
    _Flaky.upstream, _Flaky.seen = env.url, []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        client = ob.OutboxClient(f"http://127.0.0.1:{srv.server_port}", env.agent.token, backoff=0.01)
        r = client.enqueue(key=key, effect="noop", args={"amount": 20001})
        assert not r.duplicate and len(_Flaky.seen) == 3, "enqueue (with its key) was sent again"
        _Flaky.seen = []
        with pytest.raises(ob.OutboxError) as e:
            client.cancel(key)
        assert e.value.status == 503 and len(_Flaky.seen) == 1, "cancel is sent once"
    finally:
        srv.shutdown()


def test_idempotent_tool(env, key):
    @ob.idempotent_tool(env.agent, "noop", key_from=lambda order_id, **_: f"{key}-order-{order_id}/charge")
    def charge(order_id, amount):
        """Charges the order."""
        return {"amount": amount, "order": order_id}

    answers = [charge(42, amount=1999) for _ in range(2)]
    assert [a["duplicate"] for a in answers] == [False, True]
    assert answers[0]["id"] == answers[1]["id"]
    assert answers[1]["state"] == "succeeded"
    assert charge.__name__ == "charge" and charge.__doc__ == "Charges the order."

    @ob.idempotent_tool(env.agent, "noop", key_from=lambda order_id, **_: f"{key}-big-{order_id}")
    def big(order_id, amount):
        return {"amount": amount}

    held = big(1, amount=50000)
    assert held["state"] == "awaiting_approval", "answered at once, not waited on"

    @ob.idempotent_tool(env.agent, "noop", key_from=lambda idempotency_key, **_: idempotency_key, key_origin="model")
    def from_model(idempotency_key, amount):
        return {"amount": amount}

    assert from_model(f"{key}-model", amount=3)["state"] == "succeeded"
    # The model re-emits the call with a fresh key: the server's guard
    # refuses it, naming the earlier key.
    with pytest.raises(ob.PossibleDuplicateError):
        from_model(f"{key}-model-2", amount=3)
    with pytest.raises(ValueError):
        ob.idempotent_tool(env.agent, "noop", key_from=str, key_origin="llm")
