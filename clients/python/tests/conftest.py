"""A database of the tests' own, migrated by outboxd, and a real outboxd
serve on it (sandbox effects, tokens, an approval rule); both go at the end.

OUTBOXD names a built outboxd (clients/test.sh builds one); without it the
tests build it with go. OUTBOX_TEST_PG is the server to create the database
on (default: the machine's PostgreSQL, trust auth).
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import psycopg
import pytest

REPO = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(REPO / "clients" / "python" / "src"))

from outbox_client import OutboxClient  # noqa: E402

PG = os.environ.get("OUTBOX_TEST_PG", "postgresql://postgres@127.0.0.1:5432/postgres")
AGENT_TOKEN = "agent-" + secrets.token_hex(12)
OPERATOR_TOKEN = "operator-" + secrets.token_hex(12)
# Charges of the noop effect at or above 10,000 wait for a person. A rule on
# an argument also holds an intent that lacks it, so every test intent
# names an amount.
APPROVAL = "noop:amount>=10000"


@dataclass
class Env:
    database_url: str
    url: str
    outboxd: str
    agent: OutboxClient
    operator: OutboxClient

    def connect(self, **kw) -> psycopg.Connection:
        return psycopg.connect(self.database_url, **kw)

    def cli(self, *args: str) -> subprocess.CompletedProcess:
        """outboxd's command line (the Go library underneath) on the
        database."""
        env = dict(os.environ, DATABASE_URL=self.database_url, OUTBOX_SANDBOX="true")
        return subprocess.run([self.outboxd, *args], env=env, capture_output=True, text=True, timeout=60)

    def effects_at_provider(self, provider_key: str) -> int:
        """How many times the sandbox's noop provider performed the effect."""
        with self.connect(autocommit=True) as c:
            return c.execute("SELECT count(*) FROM outbox.outbox_noop_effect WHERE provider_key = %s",
                             (provider_key,)).fetchone()[0]


def _outboxd(tmp: Path) -> str:
    if os.environ.get("OUTBOXD"):
        return os.environ["OUTBOXD"]
    if not shutil.which("go"):
        pytest.fail("set OUTBOXD to an outboxd binary, or install Go to build one")
    out = tmp / "outboxd"
    subprocess.run(["go", "build", "-o", str(out), "./cmd/outboxd"], cwd=REPO, check=True)
    return str(out)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def env():
    tmp = Path(tempfile.mkdtemp(prefix="outbox-pyclient-"))
    outboxd = _outboxd(tmp)
    name = "outbox_pyclient_" + secrets.token_hex(4)
    with psycopg.connect(PG, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    database_url = urllib.parse.urlunsplit(urllib.parse.urlsplit(PG)._replace(path="/" + name))
    serve = None
    try:
        run_env = dict(os.environ, DATABASE_URL=database_url)
        subprocess.run([outboxd, "migrate", "up"], env=run_env, check=True, capture_output=True)
        port = _free_port()
        log = open(tmp / "serve.log", "w")
        serve = subprocess.Popen([outboxd, "serve"], stdout=log, stderr=subprocess.STDOUT, env=dict(
            run_env, OUTBOX_SANDBOX="true", OUTBOX_HTTP_ADDR=f"127.0.0.1:{port}", OUTBOX_APPROVAL=APPROVAL,
            OUTBOX_API_TOKENS=f"{AGENT_TOKEN}:default,{OPERATOR_TOKEN}:default:operator"))
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 30
        while True:
            try:
                with urllib.request.urlopen(url + "/readyz", timeout=1) as res:
                    if res.status == 200:
                        break
            except OSError:
                pass
            if serve.poll() is not None or time.monotonic() > deadline:
                pytest.fail("outboxd serve did not become ready:\n" + (tmp / "serve.log").read_text())
            time.sleep(0.1)
        yield Env(database_url=database_url, url=url, outboxd=outboxd,
                  agent=OutboxClient(url, AGENT_TOKEN), operator=OutboxClient(url, OPERATOR_TOKEN))
    finally:
        if serve is not None:
            serve.terminate()
            try:
                serve.wait(15)
            except subprocess.TimeoutExpired:
                serve.kill()
                serve.wait()
        with psycopg.connect(PG, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def key(request) -> str:
    """A key of the test's own."""
    return f"{request.node.name}-{secrets.token_hex(4)}"
