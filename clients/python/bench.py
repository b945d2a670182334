"""The overhead of outbox_client.enqueue against the raw SQL call.

One enqueue per transaction, N of each in 5 interleaved rounds (the median
round counts: the machine is shared), on one connection to DATABASE_URL
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


ROUNDS = 5


def time_all(variants):
    """The median round's mean per transaction, of each variant: (fn, conn),
    wall time and this process's CPU time (what the client itself spends,
    which the machine's other load disturbs less)."""
    n = -(-N // ROUNDS)
    rounds = {name: [] for name in variants}
    cpu = {name: [] for name in variants}
    for name, (fn, conn) in variants.items():
        for i in range(200):  # warm up: prepared statements, caches
            with conn.begin() if hasattr(conn, "begin") else conn.transaction():
                fn(conn, f"v{list(variants).index(name)}-warm-{i}")
    for r in range(ROUNDS):
        for name, (fn, conn) in variants.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            for i in range(n):
                with conn.begin() if hasattr(conn, "begin") else conn.transaction():
                    fn(conn, f"v{list(variants).index(name)}-{r}-{i}")
            rounds[name].append((time.perf_counter() - start) / n * 1e6)
            cpu[name].append((time.process_time() - start_cpu) / n * 1e6)
    return {name: (sorted(rounds[name])[ROUNDS // 2], sorted(cpu[name])[ROUNDS // 2]) for name in variants}


def raw(conn, key):
    conn.execute(RAW, (ns, key, "noop", json.dumps(args), None), prepare=True).fetchone()


def raw_savepoint(conn, key):
    # What a caller of outbox.enqueue needs to survive a conflict: a
    # savepoint around it (two more round trips).
    with conn.transaction():
        raw(conn, key)


def package(conn, key):
    ob.enqueue(conn, namespace=ns, key=key, effect="noop", args=args)


with psycopg.connect(os.environ["DATABASE_URL"], autocommit=True) as conn:
    variants = {"raw outbox.enqueue (psycopg)": (raw, conn),
                "raw outbox.enqueue in a SAVEPOINT (psycopg)": (raw_savepoint, conn),
                "outbox_client.enqueue (psycopg)": (package, conn)}
    engine = None
    try:
        import sqlalchemy
        from sqlalchemy.orm import Session

        engine = sqlalchemy.create_engine(os.environ["DATABASE_URL"].replace("postgresql://", "postgresql+psycopg2://", 1))
        session = Session(engine)
        variants["outbox_client.enqueue (SQLAlchemy Session, psycopg2)"] = (package, session)
    except ImportError:
        pass
    results = time_all(variants)
    if engine is not None:
        session.close()
        engine.dispose()
    base, base_cpu = results["raw outbox.enqueue (psycopg)"]
    for name, (us, cpu_us) in results.items():
        print(f"{name:55s} {us:6.0f} us/transaction x{us / base:.2f}   client CPU {cpu_us:5.0f} us x{cpu_us / base_cpu:.2f}")
    conn.execute("DELETE FROM outbox.outbox_intent WHERE namespace = %s", (ns,))
