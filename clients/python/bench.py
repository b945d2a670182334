"""The overhead of outbox_client.enqueue against the raw SQL call.

One enqueue per transaction, N of each, on one connection to DATABASE_URL
(a migrated database; intents it writes are in namespace bench-<random>,
deleted at the end). Prints the mean per transaction and the ratios.

    DATABASE_URL=postgresql://postgres@127.0.0.1:5432/outbox_bench python3 clients/python/bench.py [N]
"""

import json
import os
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "src"))

import psycopg  # noqa: E402

import outbox_client as ob  # noqa: E402

N = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
ns = "bench-" + secrets.token_hex(4)
args = {"amount": 1999, "currency": "eur", "customer": "cus_bench"}
RAW = "SELECT (intent).id, (intent).state, duplicate FROM outbox.enqueue(%s, %s, %s, %s::jsonb, %s)"


def run(name, fn, conn):
    for i in range(200):  # warm up: prepared statements, caches
        with conn.transaction():
            fn(conn, f"{name}-warm-{i}")
    start = time.perf_counter()
    for i in range(N):
        with conn.transaction():
            fn(conn, f"{name}-{i}")
    return (time.perf_counter() - start) / N * 1e6


def raw(conn, key):
    conn.execute(RAW, (ns, key, "noop", json.dumps(args), None), prepare=True).fetchone()


def raw_savepoint(conn, key):
    # What a caller of outbox.enqueue needs to survive a conflict: a
    # savepoint around it (two more round trips).
    with conn.transaction():
        raw(conn, key)


def package(conn, key):
    ob.enqueue(conn, namespace=ns, key=key, effect="noop", args=args)


def sqlalchemy_session(session, key):
    ob.enqueue(session, namespace=ns, key=key, effect="noop", args=args)


with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    results = {"raw outbox.enqueue (psycopg)": run("raw", raw, conn),
               "raw outbox.enqueue in a SAVEPOINT (psycopg)": run("rawsp", raw_savepoint, conn),
               "outbox_client.enqueue (psycopg)": run("pkg", package, conn)}
    try:
        import sqlalchemy
        from sqlalchemy.orm import Session

        engine = sqlalchemy.create_engine(os.environ["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg2://", 1))
        with Session(engine) as session:
            for i in range(200):
                with session.begin():
                    sqlalchemy_session(session, f"sa-warm-{i}")
            start = time.perf_counter()
            for i in range(N):
                with session.begin():
                    sqlalchemy_session(session, f"sa-{i}")
            results["outbox_client.enqueue (SQLAlchemy Session, psycopg2)"] = (time.perf_counter() - start) / N * 1e6
        engine.dispose()
    except ImportError:
        pass
    base = results["raw outbox.enqueue (psycopg)"]
    for name, us in results.items():
        print(f"{name:55s} {us:8.0f} us/transaction  x{us / base:.2f}")
    conn.execute("DELETE FROM outbox.outbox_intent WHERE namespace = %s", (ns,))
