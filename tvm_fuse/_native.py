"""Silence TVM's native stderr chatter around calls that are known to print noise."""

from __future__ import annotations

import contextlib
import os
import sys


@contextlib.contextmanager
def quiet_stderr():
    """Send file descriptor 2 to /dev/null inside the block.

    TVM 0.27 logs a debug line per memory scope whenever a VM executable is saved or loaded
    ("Warning: Scope Saving:"); failures still surface as Python exceptions.
    """
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as devnull:
            os.dup2(devnull.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
