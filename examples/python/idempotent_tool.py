"""A Python agent's mutating tool, made idempotent with outbox.

`idempotent_tool` wraps a tool so that calling it records an intent over
outbox's HTTP API under a key the orchestrator derives from the logical
action, and waits for the outcome. A retry (a timeout, a framework's
auto-retry, the model calling the tool again) sends the same key and gets
the first call's intent back: the side effect happens once.

Only `requests` is needed. Run it against `outboxd serve`:

    OUTBOX_URL=http://127.0.0.1:8080 python3 idempotent_tool.py
"""

import functools
import json
import os
import time
import urllib.parse

import requests

OUTBOX_URL = os.environ.get("OUTBOX_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("OUTBOX_TOKEN")


def _headers(extra=None):
    headers = {"Content-Type": "application/json"}
    if TOKEN:
        headers["Authorization"] = "Bearer " + TOKEN
    headers.update(extra or {})
    return headers


class OutboxError(Exception):
    """An answer of outbox's API that is not the intent: its code says why."""

    def __init__(self, status, body):
        error = body.get("error", {}) if isinstance(body, dict) else {}
        self.status = status
        self.code = error.get("code", "unknown")
        super().__init__(f"{status} {self.code}: {error.get('message', body)}")


def wait_for(key, wait_seconds=30):
    """The intent under key once it is final, or after wait_seconds. A wait
    that begins on an intent awaiting approval returns when a person has
    decided."""
    path = "/v1/intents/" + urllib.parse.quote(key, safe="") + f"?wait={wait_seconds}s"
    res = requests.get(OUTBOX_URL + path, headers=_headers(), timeout=wait_seconds + 10)
    if res.status_code != 200:
        raise OutboxError(res.status_code, res.json())
    return res.json()


def idempotent_tool(effect, key_from, wait_seconds=30, require_approval=False):
    """Makes a function that builds an effect's arguments into a tool that
    records the effect once per logical action.

    key_from(*args, **kwargs) names the logical action: the same on every
    retry of it, a new one for a new action. With require_approval, no
    worker runs the action before an operator approves it (a rule in
    OUTBOX_APPROVAL does the same for every caller).
    """

    def decorate(build_args):
        @functools.wraps(build_args)
        def tool(*args, **kwargs):
            key = key_from(*args, **kwargs)
            body = {"effect": effect, "args": build_args(*args, **kwargs), "requested_by": "python-agent"}
            if require_approval:
                body["require_approval"] = True
            res = requests.post(OUTBOX_URL + "/v1/intents", headers=_headers({"Idempotency-Key": key}),
                                data=json.dumps(body), timeout=10)
            if res.status_code not in (200, 201):
                raise OutboxError(res.status_code, res.json())
            recorded = res.json()
            if recorded["state"] == "awaiting_approval":
                # A person must act: answer at once (a wait would last until
                # they do), so that the model can say so, and knows that
                # calling again, under this key or another, will not hurry it.
                return recorded
            intent = wait_for(key, wait_seconds)
            intent["duplicate"] = recorded["duplicate"]
            return intent

        return tool

    return decorate


def approve(key, args_sha256, note):
    """What an operator's approval screen does once a person said yes: it
    releases exactly the action it showed, named by its args_sha256 (an
    approval of other arguments is refused with 409 approval_mismatch). It
    needs the operator role: OUTBOX_OPERATOR_TOKEN, never the agent's."""
    headers = _headers()
    operator = os.environ.get("OUTBOX_OPERATOR_TOKEN")
    if operator:
        headers["Authorization"] = "Bearer " + operator
    res = requests.post(OUTBOX_URL + "/v1/intents/" + urllib.parse.quote(key, safe="") + "/approve",
                        headers=headers, data=json.dumps({"args_sha256": args_sha256, "note": note}), timeout=10)
    if res.status_code != 200:
        raise OutboxError(res.status_code, res.json())
    return res.json()


RUN = os.environ.get("EXAMPLE_RUN") or str(int(time.time()))


@idempotent_tool("charge", key_from=lambda order_id, **_: f"order-{RUN}-{order_id}/charge")
def charge_card(order_id, customer, amount, currency="eur"):
    return {"customer": customer, "amount": amount, "currency": currency, "payment_method": "pm_card_visa"}


@idempotent_tool("charge", key_from=lambda order_id, **_: f"order-{RUN}-{order_id}/charge", require_approval=True)
def charge_card_with_approval(order_id, customer, amount, currency="eur"):
    return {"customer": customer, "amount": amount, "currency": currency, "payment_method": "pm_card_visa"}


if __name__ == "__main__":
    # The agent charges order 42, and charges it again: the framework
    # retried after a timeout, or the model called the tool twice.
    answers = [charge_card(42, customer="cus_example", amount=1999) for _ in range(2)]

    # A large charge waits for a person. The agent learns it at once, and
    # asking again answers the same.
    waiting = [charge_card_with_approval(43, customer="cus_example", amount=250000) for _ in range(2)]
    # The person approves what the screen showed; then the charge runs, once.
    approve(waiting[0]["key"], waiting[0]["args_sha256"], note="checked with the customer")
    approved = wait_for(waiting[0]["key"])

    print(json.dumps({
        "example": "python",
        "intent_ids": [a["id"] for a in answers],
        "duplicates": [a["duplicate"] for a in answers],
        "state": answers[-1]["state"],
        "result": answers[-1]["result"],
        "approval": {
            "intent_ids": [w["id"] for w in waiting],
            "states": [w["state"] for w in waiting] + [approved["state"]],
            "approved_by": approved.get("approved_by"),
        },
    }))
