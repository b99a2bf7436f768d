"""A size limit for the blob cache directory (``blob-cache-size``), as ZEO and RelStorage have.

Blobs live in the database; the directory only holds copies (downloads and this process's own
commits), so any file in it may go: the next ``loadBlob`` downloads it again. Once files worth
``check`` bytes were added since the last look, a background thread walks the directory and, if
it holds more than ``size`` bytes, removes the least recently used blob files until it holds at
most ``size - check``. A lock file lets one process at a time clean a directory that several
share; the others skip their turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import threading
import time

log = logging.getLogger(__name__)

LOCK_NAME = ".cleanup.lock"
# A download writes a ``.partial`` file and renames it when complete; one this old was left by a
# process that died while downloading.
STALE_PARTIAL_SECONDS = 3600


class BlobCacheLimit:
    def __init__(self, blob_dir: str, temp_dir: str, size: int, check_percent: int):
        self.check_options(size, check_percent)
        self.blob_dir = blob_dir
        self.temp_dir = temp_dir  # uncommitted files: not the cache's
        self.size = size
        self.check = max(1, size * check_percent // 100)
        self._added = 0
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._wanted = False  # files came in since the running cleanup began

    @staticmethod
    def check_options(size: int | None, check_percent: int) -> None:
        """ValueError for a size that is not positive or a check that is not a percentage."""
        if size is not None and size <= 0:
            raise ValueError(f"blob cache size must be positive, not {size}")
        if not 0 < check_percent < 100:
            raise ValueError(f"blob cache size check must be a percentage from 1 to 99, not {check_percent}")

    def added(self, nbytes: int) -> None:
        """Note a file of ``nbytes`` put in the cache; start a cleanup when enough came in."""
        with self._lock:
            self._added += nbytes
            if self._added < self.check:
                return
            self._added = 0
        self.start_cleanup()

    def start_cleanup(self) -> None:
        with self._lock:
            self._wanted = True
            if self._thread is not None:
                return  # the running thread cleans once more before it ends
            self._thread = threading.Thread(target=self._run, name="jsonb-blob-cache", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        while True:
            with self._lock:
                if not self._wanted:
                    self._thread = None
                    return
                self._wanted = False
            self._clean_logged()

    def used(self, filename: str) -> None:
        """Mark a cached file as just used (its access time, whatever the mount's atime policy)."""
        # OSError: removed meanwhile, or another user's file in a shared directory.
        with contextlib.suppress(OSError):
            os.utime(filename, (time.time(), os.stat(filename).st_mtime))

    def _clean_logged(self) -> None:
        try:
            removed = self.clean()
        except OSError:
            log.exception("blob cache cleanup of %s failed", self.blob_dir)
            return
        if removed:
            log.info("blob cache %s: removed %d bytes of least recently used files", self.blob_dir, removed)

    def clean(self) -> int:
        """Trim the directory now (unless another process is at it); return the bytes removed."""
        with open(os.path.join(self.blob_dir, LOCK_NAME), "a") as lock_file:
            try:
                fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return 0
            files, total, stale = self._blob_files()
            for path in stale:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(path)
            if total <= self.size:
                return 0
            target = self.size - self.check
            removed = 0
            for _atime, nbytes, path in sorted(files):
                if total <= target:
                    break
                total -= nbytes
                with contextlib.suppress(FileNotFoundError):  # gone already: it counts as gone
                    os.remove(path)
                    removed += nbytes
            return removed

    def _blob_files(self) -> tuple[list[tuple[float, int, str]], int, list[str]]:
        """(atime, size, path) of each blob file, their total size, and stale partial downloads."""
        files, total, stale = [], 0, []
        too_old = time.time() - STALE_PARTIAL_SECONDS
        for folder, subfolders, names in os.walk(self.blob_dir):
            if folder == self.blob_dir:
                subfolders[:] = [name for name in subfolders if os.path.join(folder, name) != self.temp_dir]
            for name in names:
                if name.endswith(".partial"):
                    path = os.path.join(folder, name)
                    with contextlib.suppress(FileNotFoundError):
                        if os.stat(path).st_mtime < too_old:
                            stale.append(path)
                    continue
                if not name.endswith(".blob"):
                    continue  # the layout marker, the lock
                path = os.path.join(folder, name)
                try:
                    status = os.stat(path)
                except FileNotFoundError:
                    continue
                files.append((status.st_atime, status.st_size, path))
                total += status.st_size
        return files, total, stale
