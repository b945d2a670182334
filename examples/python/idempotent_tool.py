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


def idempotent_tool(effect, key_from, wait_seconds=30):
    """Makes a function that builds an effect's arguments into a tool that
    records the effect once per logical action.

    key_from(*args, **kwargs) names the logical action: the same on every
    retry of it, a new one for a new action.
    """

    def decorate(build_args):
        @functools.wraps(build_args)
        def tool(*args, **kwargs):
            key = key_from(*args, **kwargs)
            body = {"effect": effect, "args": build_args(*args, **kwargs), "requested_by": "python-agent"}
            res = requests.post(OUTBOX_URL + "/v1/intents", headers=_headers({"Idempotency-Key": key}),
                                data=json.dumps(body), timeout=10)
            if res.status_code not in (200, 201):
                raise OutboxError(res.status_code, res.json())
            recorded = res.json()
            # Wait for the outcome: the answer comes as soon as it is final.
            path = "/v1/intents/" + urllib.parse.quote(key, safe="") + f"?wait={wait_seconds}s"
            res = requests.get(OUTBOX_URL + path, headers=_headers(), timeout=wait_seconds + 10)
            if res.status_code != 200:
                raise OutboxError(res.status_code, res.json())
            intent = res.json()
            intent["duplicate"] = recorded["duplicate"]
            return intent

        return tool

    return decorate


RUN = os.environ.get("EXAMPLE_RUN") or str(int(time.time()))


@idempotent_tool("charge", key_from=lambda order_id, **_: f"order-{RUN}-{order_id}/charge")
def charge_card(order_id, customer, amount, currency="eur"):
    return {"customer": customer, "amount": amount, "currency": currency, "payment_method": "pm_card_visa"}


if __name__ == "__main__":
    # The agent charges order 42, and charges it again: the framework
    # retried after a timeout, or the model called the tool twice.
    answers = [charge_card(42, customer="cus_example", amount=1999) for _ in range(2)]
    print(json.dumps({
        "example": "python",
        "intent_ids": [a["id"] for a in answers],
        "duplicates": [a["duplicate"] for a in answers],
        "state": answers[-1]["state"],
        "result": answers[-1]["result"],
    }))
