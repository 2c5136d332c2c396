"""redis-py against idmint, with its default settings (RESP3 via HELLO 3,
a connection pool, transactional pipelines). Prints one JSON object of the
IDs it got (as decimal strings) for serve_resp_clients.rs to check.

Usage: client.py HOST PORT TOKEN
"""

import json
import sys
import threading

import redis

host, port, token = sys.argv[1], int(sys.argv[2]), sys.argv[3]
out = {}

r = redis.Redis(host=host, port=port)  # defaults: protocol 3, pooled
info = r.execute_command("CLIENT", "INFO")  # a verbatim string, as bytes
out["client_info"] = info.decode() if isinstance(info, bytes) else str(info)
out["incr_segment"] = [str(r.incr("order")) for _ in range(3)]
out["incr_snowflake"] = [str(r.incr("sf")) for _ in range(3)]

before = r.incr("order")
last = r.incr("order", 10)  # INCRBY order 10
after = r.incr("order")
out["incrby"] = {"before": str(before), "last": str(last), "after": str(after), "n": "10"}

# The default pipeline is a MULTI/EXEC transaction.
with r.pipeline() as pipe:
    for _ in range(20):
        pipe.incr("order")
    out["transaction"] = [str(v) for v in pipe.execute()]

with r.pipeline(transaction=False) as pipe:
    for _ in range(20):
        pipe.incr("order")
    out["pipeline"] = [str(v) for v in pipe.execute()]

# DISCARD: a queued INCR that never runs.
before = r.incr("order")
with r.pipeline() as pipe:
    pipe.multi()
    pipe.incr("order")
    pipe.incr("order")
    pipe.reset()  # sends DISCARD
after = r.incr("order")
out["discard"] = {"before": str(before), "after": str(after)}

# The pool under threads.
pool_ids = []
lock = threading.Lock()


def work():
    got = [str(r.incr("order")) for _ in range(50)]
    with lock:
        pool_ids.extend(got)


threads = [threading.Thread(target=work) for _ in range(4)]
for t in threads:
    t.start()
for t in threads:
    t.join()
out["pool"] = pool_ids

# AUTH with a key's token (HELLO 3 AUTH default <token>).
try:
    redis.Redis(host=host, port=port).incr("secret")
    out["noauth"] = "no error"
except redis.exceptions.RedisError as e:  # NOAUTH is an AuthenticationError
    out["noauth"] = str(e)
authed = redis.Redis(host=host, port=port, password=token)
out["auth"] = [str(authed.incr("secret")) for _ in range(2)]

# What redis-py parses of the server's own replies.
info = r.info("everything")
out["introspection"] = {
    "command": str(len(r.command())),
    "command_count": str(r.command_count()),
    "incr_arity": str(r.command()["incr"]["arity"]),
    "info_ids_issued": str(info["ids_issued"]),
}

print(json.dumps(out))
