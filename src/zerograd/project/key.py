"""The key that authenticates cache entries (issue 42): a repository can commit a cache folder
with entries whose checksums hold, so an entry is trusted only when it carries an HMAC under a
key that never leaves this user's own cache folder. The key is made on first use (32 random
bytes, mode 0600) and read with the same care as a cache entry: no link followed, a regular
file of this user's that nobody else can write.
"""

from __future__ import annotations

import os
import secrets
import stat
import tempfile
from functools import cache
from typing import Union

ENV = "ZEROGRAD_KEY_DIR"  # where the key lives, when not in the user's cache folder
SIZE = 64  # hex digits
_FLAGS = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)


def key_folder() -> str:
    """`ZEROGRAD_KEY_DIR`, else zerograd's folder in the user's cache (XDG on POSIX, LOCALAPPDATA
    on Windows): never a folder of the project being checked."""
    chosen = os.environ.get(ENV)
    if chosen:
        return os.path.abspath(os.path.expanduser(chosen))
    base = os.environ.get("XDG_CACHE_HOME") or os.environ.get("LOCALAPPDATA") or os.path.join("~", ".cache")
    return os.path.join(os.path.abspath(os.path.expanduser(base)), "zerograd")


@cache
def secret(folder: str) -> Union[bytes, str]:
    """The key kept in `folder` (made when missing), or why there is none (the run then goes on
    without a cache)."""
    path = os.path.join(folder, "key")
    try:
        if not os.path.lexists(path):
            _make(folder, path)
        return _read(path)
    except OSError as error:
        return f"cannot keep the cache key in {folder}: {error.strerror or error}"


def _make(folder: str, path: str) -> None:
    """Write the key beside its place, then link it there: a run at the same time that made
    its own keeps whichever came first, and nobody reads half a key."""
    os.makedirs(folder, mode=0o700, exist_ok=True)
    handle, temporary = tempfile.mkstemp(dir=folder, prefix=".key-")  # mode 0600
    try:
        with os.fdopen(handle, "w") as out:
            out.write(secrets.token_hex(SIZE // 2))
        try:
            os.link(temporary, path)
        except FileExistsError:
            pass
    finally:
        os.unlink(temporary)


def _read(path: str) -> Union[bytes, str]:
    handle = os.open(path, _FLAGS)
    try:
        info = os.fstat(handle)
        if not stat.S_ISREG(info.st_mode) or info.st_size != SIZE:
            return f"the cache key {path} is not a file zerograd wrote"
        if hasattr(os, "getuid") and (info.st_uid != os.getuid() or info.st_mode & 0o022):
            return f"the cache key {path} is not the user's own (or others can write it)"
        data = os.read(handle, SIZE)
    finally:
        os.close(handle)
    try:
        return bytes.fromhex(data.decode("ascii"))
    except (UnicodeDecodeError, ValueError):
        return f"the cache key {path} is damaged"
