"""idmint in your Python process.

Fleet-safe snowflake IDs (a worker ID leased from a registry, the high-water
mark persisted ahead, clock policies, a fence when the lease is lost), segment
keys and public IDs, on the same Rust core as ``idmint serve``.

    import idmint

    g = idmint.Generator(layout="twitter", worker=7)
    id = g.next_id()
    print(idmint.Layout("twitter").decode(id).time)

See the package's README for every API, the errors, and how forks and the
GIL are handled.
"""

import atexit as _atexit
import os as _os
from importlib import metadata as _metadata

from . import _idmint
from ._codes import ErrorCode
from ._idmint import (
    DEFAULT_MAX_COUNT,
    MAX_BATCH,
    Decoded,
    Generator,
    IdmintError,
    Layout,
    PublicIds,
    Segments,
)

try:
    __version__ = _metadata.version("idmint")
except _metadata.PackageNotFoundError:  # imported from a source tree
    __version__ = "0+unknown"

__all__ = [
    "DEFAULT_MAX_COUNT",
    "MAX_BATCH",
    "Decoded",
    "ErrorCode",
    "Generator",
    "IdmintError",
    "Layout",
    "PublicIds",
    "Segments",
]

# A forked child (os.fork, multiprocessing's "fork", gunicorn's and uWSGI's
# pre-fork workers) must never issue with its parent's worker ID or segments:
# the library is told at once, in the child, and what was made before the
# fork claims anew (or refuses) there. The hook is one atomic add.
_os.register_at_fork(after_in_child=_idmint._after_fork_in_child)


# Generators and allocators still open at exit are closed then (idmint-embed
# keeps the process's table of them), so their leases are released now
# rather than when they run out.
_atexit.register(_idmint._close_all)
