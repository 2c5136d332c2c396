"""Type stubs of the extension module `idmint._idmint` (re-exported by `idmint`)."""

import datetime
import os
from types import TracebackType
from typing import Optional, TypedDict, Union, final

__all__ = [
    "IdmintError",
    "Layout",
    "Decoded",
    "Generator",
    "Segments",
    "PublicIds",
    "_after_fork_in_child",
    "MAX_BATCH",
    "DEFAULT_MAX_COUNT",
    "_close_all",
]

_Path = Union[str, "os.PathLike[str]"]

class IdmintError(Exception):
    """An idmint failure, with idmint's stable error code."""

    code: str
    """The stable code: `clock_behind`, `mark_reached`, `key_not_found`,
    `unavailable`, `invalid_layout_text`, `worker_taken`, `closed`, `forked`, ..."""
    message: str
    """What went wrong, naming the value (may change; match on `code`)."""
    retry_after: Optional[float]
    """Seconds to wait before a retry may succeed, or None."""

@final
class Decoded:
    """An ID taken apart by `Layout.decode`."""

    @property
    def id(self) -> int: ...
    @property
    def time(self) -> datetime.datetime:
        """The start of the ID's tick, an aware datetime in UTC."""
    @property
    def timestamp_ms(self) -> int:
        """The same instant, in milliseconds since the Unix epoch."""
    @property
    def tick(self) -> int: ...
    @property
    def datacenter(self) -> int: ...
    @property
    def worker(self) -> int: ...
    @property
    def rollback(self) -> int: ...
    @property
    def sequence(self) -> int: ...

@final
class Layout:
    """A layout from its text form: `Layout("twitter")`, `Layout("baidu,epoch=2024-01-01")`."""

    def __new__(cls, text: str) -> "Layout": ...
    def decode(self, id: int) -> Decoded: ...
    def compose(
        self,
        *,
        time: Optional[datetime.datetime] = None,
        tick: Optional[int] = None,
        datacenter: int = 0,
        worker: int = 0,
        sequence: int = 0,
        rollback: int = 0,
    ) -> int: ...
    @property
    def runs_out_at(self) -> Optional[datetime.datetime]: ...
    @property
    def preset(self) -> Optional[str]: ...
    @property
    def ids_per_second_per_worker(self) -> float: ...
    @property
    def workers(self) -> int: ...

class _Status(TypedDict):
    registry: str
    worker: int
    lease: str
    not_ready: Optional[str]

@final
class Generator:
    """Snowflake IDs: a fixed worker, or `Generator.from_config(path)`.

    `layout` None (the default) is `"twitter"`, `worker` None is 0."""

    def __new__(
        cls,
        layout: Union[str, Layout, None] = None,
        worker: Optional[int] = None,
        *,
        datacenter: int = 0,
        clock_behind: Optional[str] = None,
        sequence_exhausted: Optional[str] = None,
        sequence_start: Optional[str] = None,
        wall_clock: bool = False,
    ) -> "Generator": ...
    @staticmethod
    def from_config(path: _Path) -> "Generator": ...
    def next_id(self) -> int: ...
    def next_ids(self, n: int) -> list[int]: ...
    def close(self) -> None: ...
    @property
    def layout(self) -> Layout: ...
    @property
    def worker(self) -> int: ...
    def status(self) -> _Status: ...
    def __enter__(self) -> "Generator": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class Segments:
    """Segment keys from the `[segment]` store of a config."""

    @staticmethod
    def from_config(path: _Path, *, floors: bool = False) -> "Segments": ...
    def next_id(self, key: str) -> int: ...
    def next_ids(self, key: str, n: int) -> list[int]: ...
    @property
    def max_count(self) -> int:
        """The most IDs one `next_ids` call takes: the config's `server.max_count`."""
    def close(self) -> None: ...
    def __enter__(self) -> "Segments": ...
    def __exit__(
        self,
        exc_type: Optional[type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> bool: ...

@final
class PublicIds:
    """Keyed, reversible obfuscation and the text forms of public IDs."""

    def __new__(
        cls,
        key: str,
        *,
        bits: Optional[int] = None,
        key_id_bits: Optional[int] = None,
        active_key: Optional[int] = None,
        format: Optional[str] = None,
    ) -> "PublicIds":
        """None takes `[obfuscation]`'s default: 63 bits, no key-ID bits,
        the last key listed active, `"dec"`."""
    @staticmethod
    def from_config(path: _Path) -> "PublicIds": ...
    def obfuscate(self, id: int) -> int: ...
    def reveal(self, public: int) -> int: ...
    def encode(self, public: int) -> str: ...
    def decode(self, text: str) -> int: ...
    def obfuscate_text(self, id: int) -> str: ...
    def reveal_text(self, text: str) -> int: ...
    @property
    def format(self) -> str: ...
    @property
    def bits(self) -> int: ...

MAX_BATCH: int
"""The most IDs one `Generator.next_ids` call makes."""
DEFAULT_MAX_COUNT: int
"""`server.max_count` when a config doesn't set it: the most IDs one
`Segments.next_ids` call takes by default."""

def _after_fork_in_child() -> None: ...
def _close_all() -> None: ...
