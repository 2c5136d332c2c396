"""In-process figures of the Python binding, each as a ratio against a
baseline measured in the same run (BENCHMARKS.md, "The Python binding").

    scripts/bench-python            # release build, 5 runs per figure

Rows:
- next_id at the cap: IDs from `Generator("twitter", worker=1)` (the `wait`
  policy) in a 1 s window, one thread, calling next_id() in a loop, over the
  layout's cap of 4,096,000 IDs/s; and the pure-Python peer `snowflake-id`
  (PyPI, pinned in requirements.txt) in the same loop. Every ID of every run
  is kept and duplicates are counted, the peer's too.
- one call while borrowing: next_id() of a generator that may borrow the
  next ticks (`sequence_exhausted="borrow:1s"`), so the cap doesn't hold it
  back, against Python's own bare counter increment (`next()` of an
  `itertools.count`), per call.
- next_ids(100_000): one call into a list of ints, on a borrowing
  generator, against building a list of 100,000 ints from `range`.
"""

import itertools
import os
import statistics
import sys
import time

import idmint

CAP = 4_096_000
RUNS = int(os.environ.get("IDMINT_BENCH_RUNS", "5"))


def window(make_next, seconds=1.0):
    """IDs made in a `seconds` window by one thread; returns (rate, ids)."""
    f = make_next()
    ids = []
    append = ids.append
    deadline = time.perf_counter() + seconds
    start = time.perf_counter()
    while True:
        for _ in range(1000):
            append(f())
        if time.perf_counter() >= deadline:
            break
    took = time.perf_counter() - start
    return len(ids) / took, ids


def at_the_cap(name, make_next):
    rates, dups, total = [], 0, 0
    for _ in range(RUNS):
        rate, ids = window(make_next)
        rates.append(rate)
        dups += len(ids) - len(set(ids))
        total += len(ids)
    rate = statistics.median(rates)
    print(f"| next_id at the cap, {name} | {rate:,.0f} IDs/s | {rate / CAP:.2f} of the cap | {dups:,} duplicates in {total:,} |")


def per_call(n, f):
    start = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - start) / n * 1e9


def main():
    print(f"Python {sys.version.split()[0]}, idmint {idmint.__version__}, {RUNS} runs per figure")
    print()
    print("| what | figure | ratio | checked |")
    print("|---|---|---|---|")

    at_the_cap("idmint", lambda: idmint.Generator("twitter", worker=1).next_id)
    try:
        from snowflake import SnowflakeGenerator

        at_the_cap("snowflake-id 1.0.2 (peer)", lambda: SnowflakeGenerator(1).__next__)
    except ImportError:
        print("| snowflake-id (peer) | not installed | | |")

    # Each fresh borrowing generator on a node of its own (datacenters 1 to
    # 31; the cap's is in 0): idmint refuses a second open generator on one
    # node, and one that would start behind the time its last generator
    # borrowed up to.
    nodes = itertools.cycle(range(32, 1024))
    n = 2_000_000
    idm, base = [], []
    for _ in range(RUNS):
        node = next(nodes)
        g = idmint.Generator(
            "twitter", datacenter=node // 32, worker=node % 32, sequence_exhausted="borrow:1s"
        )
        idm.append(per_call(n, g.next_id))
        base.append(per_call(n, itertools.count().__next__))
    a, b = statistics.median(idm), statistics.median(base)
    print(f"| one next_id while borrowing | {a:.0f} ns | {a / b:.2f}× `next(itertools.count())` ({b:.0f} ns) | |")

    idm, base = [], []
    for _ in range(RUNS * 20):
        node = next(nodes)
        g = idmint.Generator(
            "twitter", datacenter=node // 32, worker=node % 32, sequence_exhausted="borrow:1s"
        )
        start = time.perf_counter()
        ids = g.next_ids(100_000)
        idm.append(time.perf_counter() - start)
        assert len(ids) == 100_000 and len(set(ids)) == 100_000
        start = time.perf_counter()
        plain = list(range(100_000))
        base.append(time.perf_counter() - start)
    a, b = statistics.median(idm), statistics.median(base)
    print(f"| next_ids(100_000) into a list | {a * 1e6:.0f} µs | {a / b:.2f}× `list(range(100_000))` ({b * 1e6:.0f} µs) | 100,000 distinct |")


if __name__ == "__main__":
    main()
