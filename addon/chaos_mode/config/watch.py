"""Whether the config file changed since it was read: its stat now against the one taken then.

The adapter asks about once a second. A change is reported once the file holds still between two looks,
so a file caught half-written is read only when its writer is done.
"""

from __future__ import annotations

import os
from collections.abc import Callable

type Stamp = tuple[int, int, int] | None  # (mtime in ns, size, inode); None: the file cannot be stat'ed


class FileWatch:
    """The file at `path` (`~` is the home folder, as `config.file` reads it), stamped when it was (about
    to be) read."""

    def __init__(self, path: str, stat: Callable[[str], os.stat_result] = os.stat) -> None:
        self.path = os.path.expanduser(path)
        self._stat = stat
        self._read = self._stamp()  # taken before the read: a write during it is seen next time
        self._moving: Stamp = self._read

    def changed(self) -> bool:
        """Whether the file differs from when it was read and has held still since the last look; then it
        counts as read."""
        now, last = self._stamp(), self._moving
        self._moving = now
        if now == self._read or now != last:
            return False
        self._read = now
        return True

    def _stamp(self) -> Stamp:
        try:
            info = self._stat(self.path)
        except (OSError, ValueError):  # gone, unreadable folder, a NUL in the path
            return None
        return info.st_mtime_ns, info.st_size, info.st_ino
