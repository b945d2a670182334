"""A declared effect, enqueued from Python.

examples/effects.yaml declares support_ticket, a Zendesk ticket, in a file:
no Go. An agent's tool records it over outbox's HTTP API like any built-in
effect, under a key naming the logical action; the retry gets the first
call's intent back, and one ticket is opened.

    OUTBOX_URL=http://127.0.0.1:8080 python3 declared_effect.py
"""

import json
import os
import time
import urllib.parse

import requests

OUTBOX_URL = os.environ.get("OUTBOX_URL", "http://127.0.0.1:8080")
TOKEN = os.environ.get("OUTBOX_TOKEN")


def headers(extra=None):
    h = {"Content-Type": "application/json"}
    if TOKEN:
        h["Authorization"] = "Bearer " + TOKEN
    h.update(extra or {})
    return h


def open_ticket(key, subject, body):
    """Records the ticket as an intent; every retry sends the same key."""
    res = requests.post(
        OUTBOX_URL + "/v1/intents",
        headers=headers({"Idempotency-Key": key}),
        data=json.dumps({"effect": "support_ticket", "args": {"subject": subject, "body": body}, "requested_by": "python-declared"}),
        timeout=10,
    )
    res.raise_for_status()
    return res.json()


def main():
    key = "ticket-" + os.environ.get("EXAMPLE_RUN", str(time.time()))
    answers = [open_ticket(key, "Refund for order 42", "The customer asks for a refund.") for _ in range(2)]
    final = requests.get(
        OUTBOX_URL + "/v1/intents/" + urllib.parse.quote(key, safe="") + "?wait=30s", headers=headers(), timeout=40
    ).json()
    print(json.dumps({
        "example": "python-declared",
        "intent_ids": [a["id"] for a in answers],
        "duplicates": [a.get("duplicate", False) for a in answers],
        "state": final["state"],
        "result": final.get("result"),
    }))


if __name__ == "__main__":
    main()
