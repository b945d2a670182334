"""A Python agent's mutating tool, made idempotent with outbox.

`outbox_client.idempotent_tool` wraps a tool so that calling it records an
intent over outbox's HTTP API under a key the orchestrator derives from the
logical action, and waits for the outcome. A retry (a timeout, a
framework's auto-retry, the model calling the tool again) sends the same key
and gets the first call's intent back: the side effect happens once.

It needs the outbox_client package (pip install ./clients/python; see its
README) and requests. Run it against `outboxd serve`:

    OUTBOX_URL=http://127.0.0.1:8080 python3 idempotent_tool.py
"""

import json
import os
import sys
import time
from pathlib import Path

try:
    import outbox_client
except ImportError:  # not installed: the package of this repository
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "clients" / "python" / "src"))
    import outbox_client

from outbox_client import OutboxClient, idempotent_tool

client = OutboxClient(os.environ.get("OUTBOX_URL", "http://127.0.0.1:8080"), token=os.environ.get("OUTBOX_TOKEN"))
# An operator's screen approves with the operator role: its own token, never
# the agent's.
operator = OutboxClient(client.url, token=os.environ.get("OUTBOX_OPERATOR_TOKEN") or client.token)

RUN = os.environ.get("EXAMPLE_RUN") or str(int(time.time()))


# The key names the logical action (charging this order), so the orchestrator
# derives it, the same on every retry: key_origin="orchestrator".
@idempotent_tool(client, "charge", key_from=lambda order_id, **_: f"order-{RUN}-{order_id}/charge",
                 requested_by="python-agent")
def charge_card(order_id, customer, amount, currency="eur"):
    """Charges the customer for the order."""
    return {"customer": customer, "amount": amount, "currency": currency, "payment_method": "pm_card_visa"}


# A large charge asks for a person (a rule in OUTBOX_APPROVAL would do the
# same for every caller): the tool answers at once with the intent
# awaiting_approval, so the model can say so.
@idempotent_tool(client, "charge", key_from=lambda order_id, **_: f"order-{RUN}-{order_id}/charge",
                 requested_by="python-agent", require_approval=True)
def charge_card_with_approval(order_id, customer, amount, currency="eur"):
    """Charges the customer for the order, once a person approved."""
    return {"customer": customer, "amount": amount, "currency": currency, "payment_method": "pm_card_visa"}


if __name__ == "__main__":
    # The agent charges order 42, and charges it again: the framework
    # retried after a timeout, or the model called the tool twice.
    answers = [charge_card(42, customer="cus_example", amount=1999) for _ in range(2)]

    # A large charge waits for a person. The agent learns it at once, and
    # asking again answers the same.
    waiting = [charge_card_with_approval(43, customer="cus_example", amount=250000) for _ in range(2)]
    # The person approves what the screen showed (its args_sha256, so that
    # only that exact action is released); then the charge runs, once.
    operator.approve(waiting[0]["key"], waiting[0]["args_sha256"], note="checked with the customer")
    approved = client.wait(waiting[0]["key"])

    print(json.dumps({
        "example": "python",
        "intent_ids": [a["id"] for a in answers],
        "duplicates": [a["duplicate"] for a in answers],
        "state": answers[-1]["state"],
        "result": answers[-1]["result"],
        "approval": {
            "intent_ids": [w["id"] for w in waiting],
            "states": [w["state"] for w in waiting] + [approved.state],
            "approved_by": approved.approved_by,
        },
    }))
