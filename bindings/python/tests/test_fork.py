"""Fork, as a pre-fork server does it: a generator (and a segment
allocator) made in the parent, four children issuing on one shared registry
(Redis, PostgreSQL), no ID twice across parent and children, no child with
its parent's worker ID."""

import os

import idmint
import pytest

from conftest import unique

CHILDREN = 4
PER_CHILD = 20_000


def fork_children(work):
    """Forks CHILDREN children that each run `work()` and send back its
    list of ints; returns the lists."""
    pipes = []
    for _ in range(CHILDREN):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child
            os.close(r)
            code = 0
            try:
                out = " ".join(map(str, work())).encode()
            except BaseException as e:  # noqa: BLE001 - report anything to the parent
                out = f"error {type(e).__name__}: {getattr(e, 'code', '')} {e}".encode()
                code = 1
            with os.fdopen(w, "wb") as f:
                f.write(out)
            os._exit(code)
        os.close(w)
        pipes.append((pid, r))
    results = []
    for pid, r in pipes:
        with os.fdopen(r, "rb") as f:
            text = f.read().decode()
        _, status = os.waitpid(pid, 0)
        assert os.WEXITSTATUS(status) == 0, text
        results.append([int(x) for x in text.split()])
    return results


def check_prefork(path):
    g = idmint.Generator.from_config(path)
    parent_worker = g.worker
    before = g.next_ids(PER_CHILD)

    def child():
        ids = g.next_ids(PER_CHILD // 2) + [g.next_id() for _ in range(PER_CHILD // 2)]
        worker = g.worker
        assert worker != parent_worker
        return [worker] + ids

    results = fork_children(child)
    after = g.next_ids(PER_CHILD)
    assert g.worker == parent_worker  # the parent's claim is untouched
    workers = [r[0] for r in results]
    assert len(set(workers + [parent_worker])) == CHILDREN + 1
    layout = g.layout
    ids = before + after + [id for r in results for id in r[1:]]
    assert len(ids) == (CHILDREN + 2) * PER_CHILD
    assert len(set(ids)) == len(ids), "an ID was issued twice"
    for r in results:
        assert {layout.decode(id).worker for id in r[1:]} == {layout.decode(r[1]).worker}
    g.close()


def test_prefork_on_redis(config, redis):
    check_prefork(config(f'[snowflake]\nregistry = "redis"\n[snowflake.redis]\nurl = "{redis}"\ncluster = "{unique("fork")}"\n'))


def test_prefork_on_postgres(config, postgres):
    check_prefork(config(f'[snowflake]\nregistry = "sql"\n[snowflake.sql]\nurl = "{postgres}"\ncluster = "{unique("fork")}"\n'))


def test_fixed_worker_refuses_in_a_child():
    g = idmint.Generator("twitter", worker=5)
    g.next_id()

    def child():
        try:
            g.next_id()
        except idmint.IdmintError as e:
            assert e.code == "forked"
            return []
        raise AssertionError("a child issued with its parent's fixed worker ID")

    assert fork_children(child) == [[]] * CHILDREN
    g.next_id()  # the parent goes on


def test_segments_are_leased_anew_in_children(config, mariadb):
    path = config(f'[segment]\nurl = "{mariadb}"\ntable = "{unique("seg")}"\n[segment.keys.order]\nstep = 1000\n')
    s = idmint.Segments.from_config(path)
    before = [s.next_id("order") for _ in range(10)]

    def child():
        return [s.next_id("order") for _ in range(3000)]

    results = fork_children(child)
    after = [s.next_id("order") for _ in range(3000)]
    ids = before + after + [id for r in results for id in r]
    assert len(set(ids)) == len(ids), "a segment ID was issued twice"
    for r in results:
        # The parent's buffered segment [1, 1001) is not used in a child.
        assert min(r) > 1000
    s.close()
