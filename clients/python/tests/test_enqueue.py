"""enqueue in the caller's transaction, against a real database and a real
outboxd serve (conftest.py)."""

from __future__ import annotations

import asyncio
import json

import psycopg
import pytest

import outbox_client as ob


def test_rolled_back_intent_does_not_exist(env, key):
    with env.connect() as conn:
        r = ob.enqueue(conn, key=key, effect="noop", args={"amount": 1})
        assert not r.duplicate and r.intent.state == "pending"
        conn.rollback()
    with pytest.raises(ob.NotFoundError) as e:
        env.agent.get(key)
    assert e.value.status == 404
    with env.connect() as conn:
        assert conn.execute("SELECT count(*) FROM outbox.outbox_intent WHERE key = %s", (key,)).fetchone()[0] == 0


def test_committed_intent_runs_once(env, key):
    with env.connect() as conn:
        with conn.transaction():
            conn.execute("CREATE TEMP TABLE orders (id text) ON COMMIT DROP")
            conn.execute("INSERT INTO orders VALUES ('order-1')")
            r = ob.enqueue(conn, key=key, effect="noop", args={"amount": 1999}, requested_by="pytest")
    assert r.intent.requested_by == "pytest" and r.intent.provider_key.startswith("obx_")
    done = env.agent.wait(key, timeout=30)
    assert done.state == "succeeded", done
    assert done.id == r.intent.id
    assert done.args_sha256 == r.intent.args_sha256, "the package's args_sha256 is the server's"
    assert env.effects_at_provider(done.provider_key) == 1


def test_one_key_from_python_go_and_http_is_one_intent(env, key):
    args = {"amount": 42, "note": "same action"}
    with env.connect() as conn:
        first = ob.enqueue(conn, key=key, effect="noop", args=args)
        conn.commit()
    # Go: outboxd's command line, through the Go library. Key order and
    # 42 vs 42.0 do not matter: jsonb equality.
    cli = env.cli("enqueue", "--key", key, "--effect", "noop", "--args", '{"note": "same action", "amount": 42.0}')
    assert cli.returncode == 0, cli.stderr
    from_go = json.loads(cli.stdout)
    http = env.agent.enqueue(key=key, effect="noop", args=args)
    with env.connect() as conn:
        again = ob.enqueue(conn, key=key, effect="noop", args=args)
        conn.commit()
    assert not first.duplicate
    assert from_go["duplicate"] and http.duplicate and again.duplicate
    assert first.intent.id == from_go["id"] == http.intent.id == again.intent.id
    assert env.agent.wait(key).state == "succeeded"
    assert env.effects_at_provider(first.intent.provider_key) == 1


def test_key_reused_leaves_the_transaction_usable(env, key):
    with env.connect() as conn:
        first = ob.enqueue(conn, key=key, effect="noop", args={"amount": 1})
        conn.commit()
        conn.execute("CREATE TEMP TABLE audit (what text)")
        with pytest.raises(ob.KeyReusedError) as e:
            ob.enqueue(conn, key=key, effect="noop", args={"amount": 2})
        assert e.value.code == "idempotency_key_reused"
        assert e.value.existing is not None
        assert e.value.existing.id == first.intent.id
        assert e.value.existing.args == {"amount": 1}
        # The transaction goes on: a write after the refusal commits.
        conn.execute("INSERT INTO audit VALUES ('after the conflict')")
        ob.enqueue(conn, key=key + "-next", effect="noop", args={"amount": 3})
        conn.commit()
        assert conn.execute("SELECT count(*) FROM audit").fetchone()[0] == 1
    assert env.agent.get(key + "-next").effect == "noop"
    # Over HTTP: the same exception, with the existing intent read back.
    with pytest.raises(ob.KeyReusedError) as e:
        env.agent.enqueue(key=key, effect="noop", args={"amount": 2})
    assert e.value.status == 422 and e.value.existing.id == first.intent.id


def test_bad_input_is_refused_before_the_database(env, key):
    with env.connect() as conn:
        for kw, exc, field in [
            (dict(key="has space", effect="noop", args={}), ob.InvalidKeyError, "key"),
            (dict(key="", effect="noop", args={}), ob.InvalidKeyError, "key"),
            (dict(key=key, namespace="x" * 65, effect="noop", args={}), ob.InvalidKeyError, "namespace"),
            (dict(key=key, effect="Noop", args={}), ob.UnknownEffectError, "effect"),
            (dict(key=key, effect="noop", args=[1]), ob.InvalidArgsError, "args"),
            (dict(key=key, effect="noop", args={"x": "\x00"}), ob.InvalidArgsError, "args"),
            (dict(key=key, effect="noop", args={"x": float("nan")}), ob.InvalidArgsError, "args"),
        ]:
            with pytest.raises(exc) as e:
                ob.enqueue(conn, **kw)
            assert e.value.field == field
        # Nothing reached the database: the transaction is usable.
        assert ob.enqueue(conn, key=key, effect="noop", args={"amount": 1}).duplicate is False
        conn.rollback()


def test_approval_rule_holds(env, key):
    with env.connect() as conn:
        r = ob.enqueue(conn, key=key, effect="noop", args={"amount": 25000})
        conn.commit()
    assert r.intent.state == "awaiting_approval"
    assert r.intent.approval_rule == "noop:amount>=10000"
    # Nothing runs, and an agent's token may not approve.
    assert env.agent.wait(key, timeout=1).state == "awaiting_approval"
    with pytest.raises(ob.ForbiddenError):
        env.agent.approve(key, r.intent.args_sha256)
    with pytest.raises(ob.ApprovalMismatchError):
        env.operator.approve(key, ob.args_sha256({"amount": 1}))
    approved = env.operator.approve(key, r.intent.args_sha256, note="checked")
    assert approved.approved_by
    assert env.agent.wait(key).state == "succeeded"


def test_require_approval_and_deny(env, key):
    with env.connect() as conn:
        r = ob.enqueue(conn, key=key, effect="noop", args={"amount": 1}, require_approval=True)
        conn.commit()
    assert r.intent.state == "awaiting_approval" and r.intent.approval_rule == "requested"
    denied = env.operator.deny(key, r.intent.args_sha256, note="no")
    assert denied.state == "cancelled" and denied.denied_by
    with pytest.raises(ob.NotAwaitingApprovalError):
        env.operator.approve(key, r.intent.args_sha256)


def test_enqueue_many_is_atomic(env, key):
    with env.connect() as conn:
        ob.enqueue(conn, key=key + "-0", effect="noop", args={"amount": 1})
        rs = ob.enqueue_many(conn, [
            {"key": key + "-0", "effect": "noop", "args": {"amount": 1}},
            {"key": key + "-1", "effect": "noop", "args": {"amount": 2}, "requested_by": "batch"},
        ])
        assert [r.duplicate for r in rs] == [True, False]
        assert rs[1].intent.requested_by == "batch"
        with pytest.raises(ob.KeyReusedError) as e:
            ob.enqueue_many(conn, [
                {"key": key + "-2", "effect": "noop", "args": {"amount": 3}},
                {"key": key + "-1", "effect": "noop", "args": {"amount": 99}},
            ])
        assert e.value.existing.key == key + "-1" and e.value.field == "[1].key"
        conn.commit()
    with pytest.raises(ob.NotFoundError):
        env.agent.get(key + "-2")
    assert ob.enqueue_many(None, []) == []


def test_async(env, key):
    async def run():
        async with await psycopg.AsyncConnection.connect(env.database_url) as conn:
            r = await ob.enqueue_async(conn, key=key, effect="noop", args={"amount": 7})
            with pytest.raises(ob.KeyReusedError):
                await ob.enqueue_async(conn, key=key, effect="noop", args={"amount": 8})
            rs = await ob.enqueue_many_async(conn, [{"key": key, "effect": "noop", "args": {"amount": 7}}])
            await conn.commit()
            return r, rs

    r, rs = asyncio.run(run())
    assert not r.duplicate and rs[0].duplicate and rs[0].intent.id == r.intent.id
    assert env.agent.wait(key).state == "succeeded"
    with env.connect() as conn, pytest.raises(TypeError):
        asyncio.run(_async_conn_in_sync(env))


async def _async_conn_in_sync(env):
    async with await psycopg.AsyncConnection.connect(env.database_url) as conn:
        ob.enqueue(conn, key="k", effect="noop", args={})


def _sqlalchemy_engine(env):
    sqlalchemy = pytest.importorskip("sqlalchemy")
    url = env.database_url.replace("postgresql://", "postgresql+{}://", 1)
    for driver in ("psycopg", "psycopg2"):
        try:
            return sqlalchemy.create_engine(url.format(driver))
        except Exception:  # a dialect this SQLAlchemy lacks, or its driver
            continue
    pytest.skip("no SQLAlchemy PostgreSQL driver (psycopg with SQLAlchemy 2, or psycopg2)")


def test_sqlalchemy_connection_and_session(env, key):
    from sqlalchemy import text
    from sqlalchemy.orm import Session

    engine = _sqlalchemy_engine(env)
    try:
        # A Connection: rolled back, then committed.
        with engine.connect() as conn:
            with conn.begin() as tx:
                ob.enqueue(conn, key=key + "-rb", effect="noop", args={"amount": 1})
                tx.rollback()
            with conn.begin():
                r = ob.enqueue(conn, key=key, effect="noop", args={"amount": 1})
        with pytest.raises(ob.NotFoundError):
            env.agent.get(key + "-rb")
        # A Session, as an ORM service writes: the conflict leaves it usable.
        with Session(engine) as session, session.begin():
            dup = ob.enqueue(session, key=key, effect="noop", args={"amount": 1})
            with pytest.raises(ob.KeyReusedError) as e:
                ob.enqueue(session, key=key, effect="noop", args={"amount": 2})
            assert e.value.existing.id == r.intent.id
            rs = ob.enqueue_many(session, [{"key": key + "-s", "effect": "noop", "args": {"amount": 2}}])
            assert session.execute(text("SELECT 1")).scalar() == 1
        assert dup.duplicate and dup.intent.id == r.intent.id and not rs[0].duplicate
        assert env.agent.wait(key + "-s").state == "succeeded"
    finally:
        engine.dispose()


def test_schema_is_checked():
    with pytest.raises(ValueError):
        ob.enqueue(None, key="k", effect="noop", args={}, schema='x"; DROP TABLE y; --')


def test_a_role_granted_only_the_functions(env, key):
    """A service's role with only what `outboxd migrate print-grants` gives
    it (no right on the table) enqueues, and learns the existing intent of a
    reused key."""
    import secrets

    role = "outbox_pyclient_svc_" + secrets.token_hex(4)
    grants = env.cli("migrate", "print-grants", role, "shop")
    assert grants.returncode == 0, grants.stderr
    with env.connect(autocommit=True) as admin:
        admin.execute(f'CREATE ROLE "{role}" LOGIN')
        admin.execute(grants.stdout)
    try:
        with psycopg.connect(env.database_url, user=role) as conn:
            first = ob.enqueue(conn, namespace="shop", key=key, effect="noop", args={"amount": 1})
            with pytest.raises(ob.KeyReusedError) as e:
                ob.enqueue(conn, namespace="shop", key=key, effect="noop", args={"amount": 2})
            assert e.value.existing.id == first.intent.id
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                conn.execute("SELECT count(*) FROM outbox.outbox_intent")
            conn.rollback()
            with pytest.raises(ob.ForbiddenError):
                ob.enqueue(conn, namespace="elsewhere", key=key, effect="noop", args={"amount": 1})
            conn.rollback()
    finally:
        with env.connect(autocommit=True) as admin:
            admin.execute(f'DROP OWNED BY "{role}"')
            admin.execute(f'DROP ROLE "{role}"')
