"""What the binding's tests share: config files, the real services, the
`idmint` binary to compare with, and private services a test may stop.

Services (as the Rust tests use them): PostgreSQL on 127.0.0.1:5432, MariaDB
on 127.0.0.1:3306, Redis on 127.0.0.1:6379, etcd at IDMINT_TEST_ETCD_ENDPOINT
(scripts/test starts it). A missing service fails the test under CI=true and
skips it elsewhere, loudly.
"""

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
POSTGRES_URL = "postgres://postgres@127.0.0.1:5432/test"
MYSQL_URL = "mysql://root@127.0.0.1:3306/test"
REDIS_URL = "redis://127.0.0.1:6379/"


def require(name, reachable):
    """Fails under CI=true when the service is missing, else skips."""
    if reachable:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"{name} is not reachable and CI=true: start it before the tests")
    pytest.skip(f"SKIPPED: {name} is not reachable")


def listens(port):
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def unique(prefix):
    return f"{prefix}_{os.getpid()}_{time.time_ns() % 1_000_000_000}"


@pytest.fixture
def config(tmp_path):
    """Writes a config file (`[server] data_dir` in tmp_path, then `body`) and
    returns its path."""

    def write(body, name="idmint.toml"):
        path = tmp_path / name
        path.write_text(f'[server]\ndata_dir = "{tmp_path / "data"}"\n\n{body}\n')
        return path

    return write


@pytest.fixture
def postgres():
    require("PostgreSQL on 127.0.0.1:5432", listens(5432))
    return POSTGRES_URL


@pytest.fixture
def mariadb():
    require("MariaDB on 127.0.0.1:3306", listens(3306))
    return MYSQL_URL


@pytest.fixture
def redis():
    require("Redis on 127.0.0.1:6379", listens(6379))
    return REDIS_URL


@pytest.fixture
def etcd():
    endpoint = os.environ.get("IDMINT_TEST_ETCD_ENDPOINT")
    require("etcd (IDMINT_TEST_ETCD_ENDPOINT)", endpoint)
    return endpoint


def mysql(sql):
    """Runs SQL on MariaDB's `test` database with the mysql client."""
    subprocess.run(
        ["mysql", "-h", "127.0.0.1", "-P", "3306", "-u", "root", "test", "-e", sql],
        check=True,
        capture_output=True,
    )


def psql(sql):
    """Runs SQL on PostgreSQL's `test` database with psql."""
    subprocess.run(
        ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "test", "-v", "ON_ERROR_STOP=1", "-c", sql],
        check=True,
        capture_output=True,
    )


@pytest.fixture
def private_redis(tmp_path):
    """A throwaway redis-server (scripts/redis) the test may stop; stopped
    at the end."""
    script = REPO / "scripts" / "redis"
    available = subprocess.run([script, "check", tmp_path], capture_output=True).returncode == 0
    require("redis-server (scripts/redis check)", available)
    d = tmp_path / "redis"
    url = subprocess.run([script, "start", d], check=True, capture_output=True, text=True).stdout.strip()

    class Private:
        address = url

        def stop(self):
            subprocess.run([script, "stop", d], check=True, capture_output=True)

    yield Private()
    subprocess.run([script, "stop", d], capture_output=True)


@pytest.fixture(scope="session")
def idmint_bin():
    """The `idmint` binary to compare with: IDMINT_BIN, else the workspace's
    debug build (scripts/test builds it with `cargo test --workspace`), else
    one on PATH."""
    for candidate in (os.environ.get("IDMINT_BIN"), REPO / "target" / "debug" / "idmint", shutil.which("idmint")):
        if candidate and Path(candidate).is_file():
            return str(candidate)
    require("the idmint binary (cargo build -p idmint)", False)
