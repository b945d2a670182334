"""Enqueues COUNT webhook intents through the client package's enqueue,
each in a transaction of its own, alternating between two connections: on a
transaction pooler the two then share server connections, where a
statement one prepared by name is already there for the other.

    python3 enqueue.py URL SCHEMA NAMESPACE COUNT

Prints one line per acknowledged key; exits 1 at the first error."""

import sys

import psycopg

from outbox_client import enqueue

url, schema, namespace, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
conns = [psycopg.connect(url), psycopg.connect(url)]
for i in range(count):
    conn = conns[i % 2]
    key = f"{namespace}-{i:04d}"
    with conn.transaction():
        enqueue(conn, namespace=namespace, key=key, effect="webhook",
                args={"endpoint": "hook", "payload": {"key": key}}, schema=schema)
    print(key, flush=True)
for conn in conns:
    conn.close()
