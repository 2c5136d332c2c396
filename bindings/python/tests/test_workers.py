"""One worker ID, one live generator per process: a second generator whose
IDs would overlap a live one's raises `worker_taken`, fixed or from a
config, whatever the preset is called; closing the first frees it."""

import idmint
import pytest


def test_a_second_live_generator_of_one_worker_is_refused():
    first = idmint.Generator(layout="twitter", worker=1)
    ids = first.next_ids(1000)
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator(layout="twitter", worker=1)
    assert e.value.code == "worker_taken"
    assert "worker ID 1" in e.value.message
    assert e.value.retry_after is None
    # The same bits by another name: leaf's one 10-bit node field with
    # Twitter's epoch; its worker 1 is twitter's datacenter 0, worker 1.
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator(layout="leaf", worker=1)
    assert e.value.code == "worker_taken"
    other = idmint.Generator(layout="twitter", worker=1, datacenter=1)
    assert not set(ids) & set(other.next_ids(1000))
    other.close()
    first.close()
    with idmint.Generator(layout="twitter", worker=1) as again:
        assert again.next_id() > ids[-1]
    # Dropped (the last reference gone), a generator frees its worker ID.
    idmint.Generator(layout="twitter", worker=1)
    idmint.Generator(layout="twitter", worker=1).close()


def test_one_per_request_handler_is_refused_not_repeated():
    """The newcomer's mistake: a generator per call, each kept alive."""
    handlers = [idmint.Generator(layout="twitter", worker=2)]
    for _ in range(3):
        with pytest.raises(idmint.IdmintError) as e:
            handlers.append(idmint.Generator(layout="twitter", worker=2))
        assert e.value.code == "worker_taken"
    assert len(handlers) == 1
    handlers[0].close()


def test_a_config_generator_joins_the_check(config):
    path = config('[snowflake]\nlayout = "twitter"\nregistry = "file"\nworker = 6\n')
    fixed = idmint.Generator(layout="twitter", worker=6)
    with pytest.raises(idmint.IdmintError) as e:
        idmint.Generator.from_config(path)
    assert e.value.code == "worker_taken"
    fixed.close()
    with idmint.Generator.from_config(path) as leased:
        leased.next_id()
        with pytest.raises(idmint.IdmintError) as e:
            idmint.Generator(layout="twitter", worker=6)
        assert e.value.code == "worker_taken"
    idmint.Generator(layout="twitter", worker=6).close()
