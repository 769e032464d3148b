"""Write a file so that a crash at any instant leaves either the old or the new content.

Temp file in the same folder (same filesystem, so rename is atomic), fsync the data, rename,
fsync the folder so the rename itself survives a power cut.

Modes: 0600 by default (the state file, artifacts and logs may hold host names, paths, prompts
and server output), 0644 with ``shared=True`` (reports: findings, comparisons, plots' pages,
meant to be read and passed on).
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def write_atomic(path: Path, data: bytes, shared: bool = False) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, 0o644 if shared else 0o600)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp_name, path)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
