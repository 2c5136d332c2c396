"""Generators: fixed, leased from the file registry, PostgreSQL (idmint's
table and uid-generator's WORKER_NODE) and etcd, two processes on one
registry, a lease lost with its registry, and the GIL."""

import subprocess
import sys
import threading
import time

import idmint
import pytest

from conftest import psql, unique


def test_fixed_generator_and_its_errors():
    g = idmint.Generator(layout="twitter", worker=7)
    a = g.next_id()
    batch = g.next_ids(10_000)
    assert isinstance(a, int) and a < batch[0]
    assert batch == sorted(set(batch))
    assert idmint.Layout("twitter").decode(a).worker == 7
    assert g.worker == 7 and g.status()["registry"] == "fixed"
    with pytest.raises(idmint.IdmintError) as e:
        g.next_ids(0)
    assert e.value.code == "invalid_count"
    assert e.value.retry_after is None
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator("twitter", worker=32)
    assert e.value.code == "node_out_of_range"
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator("twitter", 1, clock_behind="sometimes")
    assert e.value.code == "invalid_text"
    with idmint.Generator("sonyflake", worker=9, sequence_exhausted="wait") as s:
        assert idmint.Layout("sonyflake").decode(s.next_id()).worker == 9
    with pytest.raises(idmint.IdmintError) as e:
        s.next_id()
    assert e.value.code == idmint.ErrorCode.CLOSED == "closed"
    s.close()  # idempotent


def test_from_config_file_registry(config):
    path = config('[snowflake]\nlayout = "twitter"\nregistry = "file"\n')
    with idmint.Generator.from_config(path) as g:
        ids = [g.next_id() for _ in range(1000)] + g.next_ids(5000)
        assert ids == sorted(set(ids))
        assert g.status()["lease"] == "held"
        # The data directory is this generator's alone while it is open.
        with pytest.raises(idmint.IdmintError) as e:
            idmint.Generator.from_config(path)
        assert e.value.code == "registry_config"
    again = idmint.Generator.from_config(path)
    assert again.next_id() > ids[-1]  # the mark persisted ahead: above every earlier ID
    again.close()
    with pytest.raises(idmint.IdmintError) as e:
        again.next_ids(2)
    assert e.value.code == "closed"


CHILD = """
import idmint, sys
g = idmint.Generator.from_config(sys.argv[1])
ids = g.next_ids(20000)
print(g.worker, *ids)
sys.stdout.flush()
sys.stdin.read()  # hold the lease until the parent has read every process's line
g.close()
"""


def two_processes_never_share_a_worker(path):
    """Two processes on one registry: distinct worker IDs, no ID twice."""
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(path)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(2)
    ]
    lines = [p.stdout.readline().split() for p in procs]
    for p in procs:
        p.stdin.close()
        assert p.wait(timeout=60) == 0, p.stderr.read()
    workers = [int(line[0]) for line in lines]
    ids = [int(x) for line in lines for x in line[1:]]
    assert len(ids) == 40000
    assert workers[0] != workers[1]
    assert len(set(ids)) == len(ids)


def test_leased_on_postgres(config, postgres):
    path = config(f'[snowflake]\nregistry = "sql"\n[snowflake.sql]\nurl = "{postgres}"\ncluster = "{unique("py")}"\n')
    two_processes_never_share_a_worker(path)
    g = idmint.Generator.from_config(path)
    assert g.status()["registry"] == "sql"
    g.close()


def test_leased_on_postgres_uid_generator_table(config, postgres):
    table = unique("worker_node")
    psql(
        f"CREATE TABLE {table} (ID BIGSERIAL NOT NULL, HOST_NAME VARCHAR(64) NOT NULL, "
        "PORT VARCHAR(64) NOT NULL, TYPE INT NOT NULL, LAUNCH_DATE DATE NOT NULL, "
        "MODIFIED TIMESTAMP NOT NULL, CREATED TIMESTAMP NOT NULL, PRIMARY KEY(ID))"
    )
    path = config(
        '[snowflake]\nlayout = "baidu,epoch=2024-01-01"\nregistry = "sql"\n'
        f'[snowflake.sql]\nurl = "{postgres}"\nmode = "uid-generator"\ntable = "{table}"\n'
    )
    two_processes_never_share_a_worker(path)


def test_leased_on_etcd(config, etcd):
    path = config(f'[snowflake]\nregistry = "etcd"\n[snowflake.etcd]\nendpoints = ["{etcd}"]\ncluster = "{unique("py")}"\n')
    two_processes_never_share_a_worker(path)


def test_a_lost_lease_raises_and_issues_nothing(config, private_redis):
    path = config(
        '[snowflake]\nregistry = "redis"\nwindow = "1s"\n'
        f'[snowflake.redis]\nurl = "{private_redis.address}"\nlease_ttl = "2s"\n'
    )
    g = idmint.Generator.from_config(path)
    g.next_id()
    private_redis.stop()
    stopped = time.monotonic()
    while True:
        try:
            g.next_id()
        except idmint.IdmintError as e:
            refused = e
            break
        assert time.monotonic() - stopped < 5, "still issuing 5 s after the registry stopped (lease 2 s)"
        time.sleep(0.02)
    assert refused.code == "mark_reached"
    assert refused.retry_after == 1.0
    time.sleep(2)  # past the lease's end: nothing, by any call
    for _ in range(20):
        with pytest.raises(idmint.IdmintError) as e:
            g.next_id()
        assert e.value.code == "mark_reached"
        with pytest.raises(idmint.IdmintError) as e:
            g.next_ids(100)
        assert e.value.code == "mark_reached"
    assert "expired" in e.value.message or "lost" in e.value.message
    assert g.status()["lease"] in ("expired", "lost")
    g.close()


def test_blocking_calls_release_the_gil():
    """A batch that waits for ~100 ticks lets another Python thread run
    meanwhile: it could not if the GIL were held."""
    g = idmint.Generator("twitter", worker=1)
    done = threading.Event()
    ran = []

    def batch():
        g.next_ids(4096 * 100)  # at the cap: about 100 ms of ticks
        done.set()

    t = threading.Thread(target=batch)
    t.start()
    while not done.is_set():
        ran.append(1)
        time.sleep(0.001)
    t.join()
    assert len(ran) >= 20, f"the other thread ran {len(ran)} times in about 100 ms"


def test_configs_an_embedded_process_cannot_use_are_refused(config):
    forever = config('[snowflake]\nregistry = "zookeeper"\n[snowflake.zookeeper]\nmode = "forever"\n')
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator.from_config(forever)
    assert e.value.code == "invalid_config"
    assert "ephemeral" in e.value.message
    typo = config('[snowflake]\nregistery = "file"\n', name="typo.toml")
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator.from_config(typo)
    assert e.value.code == "invalid_config" and "registery" in e.value.message
    expired = config('[snowflake]\nlayout = "baidu"\n', name="baidu.toml")
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator.from_config(expired)
    assert e.value.code == "invalid_config" and "ran out" in e.value.message


def test_redis_tls_is_refused_by_name_in_a_build_without_it(config):
    """The shipped extension has no Redis TLS (the `redis-tls` feature): a
    config that asks for it is refused before anything connects, never a
    panic at the first TLS handshake. A `--features redis-tls` build would
    try to connect instead (no server listens on port 1)."""
    tls = config('[snowflake]\nregistry = "redis"\n[snowflake.redis]\nurl = "rediss://127.0.0.1:1/0"\n')
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator.from_config(tls)
    assert e.value.code == "invalid_config"
    assert "snowflake.redis.url" in e.value.message and "`redis-tls` feature" in e.value.message


DATA_DIR_CHILD = """
import idmint, os, sys
with idmint.Generator.from_config(sys.argv[1]) as g:
    g.next_id()
print(sorted(os.listdir(".")))
"""


def test_a_config_that_keeps_nothing_on_disk_makes_no_data_directory(tmp_path, postgres):
    """The default `server.data_dir` is ./idmint-data: run from a temporary
    working directory, a PostgreSQL registry leaves it empty."""
    cwd = tmp_path / "app"
    cwd.mkdir()
    path = tmp_path / "idmint.toml"
    path.write_text(
        '[snowflake]\nlayout = "twitter,epoch=2022-03-03"\nregistry = "sql"\n'
        f'[snowflake.sql]\nurl = "{postgres}"\ncluster = "{unique("nodir")}"\n'
    )
    out = subprocess.run(
        [sys.executable, "-c", DATA_DIR_CHILD, str(path)], cwd=cwd, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
    assert list(cwd.iterdir()) == []
