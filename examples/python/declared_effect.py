"""A declared effect, enqueued from Python.

examples/effects.yaml declares support_ticket, a Zendesk ticket, in a file:
no Go. An agent's tool records it over outbox's HTTP API like any built-in
effect, under a key naming the logical action; the retry gets the first
call's intent back, and one ticket is opened.

    OUTBOX_URL=http://127.0.0.1:8080 python3 declared_effect.py
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

from outbox_client import OutboxClient

client = OutboxClient(os.environ.get("OUTBOX_URL", "http://127.0.0.1:8080"), token=os.environ.get("OUTBOX_TOKEN"))


def open_ticket(key, subject, body):
    """Records the ticket as an intent; every retry sends the same key."""
    return client.enqueue(key=key, effect="support_ticket", args={"subject": subject, "body": body},
                          requested_by="python-declared")


def main():
    key = "ticket-" + os.environ.get("EXAMPLE_RUN", str(time.time()))
    answers = [open_ticket(key, "Refund for order 42", "The customer asks for a refund.") for _ in range(2)]
    final = client.wait(key, timeout=30)
    print(json.dumps({
        "example": "python-declared",
        "intent_ids": [a.intent.id for a in answers],
        "duplicates": [a.duplicate for a in answers],
        "state": final.state,
        "result": final.result,
    }))


if __name__ == "__main__":
    main()
