"""Segment keys on Leaf's own `leaf_alloc` table in MariaDB, and on the
embedded default store."""

import idmint
import pytest

from conftest import mysql, unique


@pytest.fixture
def leaf_table(mariadb):
    table = unique("leaf_alloc")
    # Leaf's DDL (scripts/leaf_alloc.sql) and a row Leaf has issued from.
    mysql(
        f"""CREATE TABLE `{table}` (
              `biz_tag` varchar(128) NOT NULL DEFAULT '',
              `max_id` bigint(20) NOT NULL DEFAULT '1',
              `step` int(11) NOT NULL,
              `description` varchar(256) DEFAULT NULL,
              `update_time` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
              PRIMARY KEY (`biz_tag`)
            ) ENGINE=InnoDB;
            INSERT INTO `{table}` (biz_tag, max_id, step, description)
              VALUES ('leaf-segment-test', 10001, 2000, 'from Leaf');"""
    )
    yield table
    mysql(f"DROP TABLE `{table}`")


def test_leaf_alloc_on_mariadb(config, mariadb, leaf_table):
    path = config(f'[segment]\nurl = "{mariadb}"\nschema = "leaf"\ntable = "{leaf_table}"\n')
    a = idmint.Segments.from_config(path)
    b = idmint.Segments.from_config(path)
    seen = set()
    last = 0
    for _ in range(3000):
        id = a.next_id("leaf-segment-test")
        assert id > last and id >= 10001  # above everything Leaf issued
        last = id
        seen.add(id)
        seen.add(b.next_id("leaf-segment-test"))
    batch = a.next_ids("leaf-segment-test", 5000)
    assert batch[0] > last and batch == sorted(batch)
    seen.update(batch)
    assert len(seen) == 3000 * 2 + 5000
    with pytest.raises(idmint.IdmintError) as e:
        a.next_id("no-such-key")
    assert e.value.code == "key_not_found"
    with pytest.raises(idmint.IdmintError) as e:
        a.next_id("bad key!")
    assert e.value.code == "invalid_key"
    a.close()
    with pytest.raises(idmint.IdmintError) as e:
        a.next_id("leaf-segment-test")
    assert e.value.code == "closed"
    b.close()


def test_store_down_is_unavailable_with_a_retry_hint(config):
    # Nothing listens on port 1: the store can't be opened.
    path = config('[segment]\nurl = "mysql://root@127.0.0.1:1/test"\n')
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Segments.from_config(path)
    assert e.value.code in ("store_error", "store_timeout")
    assert e.value.retry_after is not None


def test_declared_keys_on_the_default_store(config):
    path = config("[segment.keys.order]\nstep = 100\nstart = 1000\n")
    with idmint.Segments.from_config(path) as s:
        ids = [s.next_id("order") for _ in range(250)]
        assert ids == list(range(1000, 1250))


def test_redis_store(config, redis):
    prefix = unique("py") + ":"
    path = config(f'[segment]\nurl = "{redis}"\nkey_prefix = "{prefix}"\n[segment.keys.invoice]\nstep = 50\nstart = 7\n')
    with idmint.Segments.from_config(path) as s:
        ids = [s.next_id("invoice") for _ in range(120)] + s.next_ids("invoice", 500)
        assert ids == list(range(7, 7 + 620))


def test_segment_switches_lose_no_ids(config):
    # Steps kept at 10: 300 switches, each met with the GIL held first
    # (a try from the buffer) and then without it (a wait for the store).
    path = config("[segment]\nmax_step = 10\n[segment.keys.order]\nstep = 10\nstart = 1\n")
    with idmint.Segments.from_config(path) as s:
        ids = [s.next_id("order") for _ in range(3000)]
        assert ids == list(range(1, 3001))
