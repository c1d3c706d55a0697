"""A broker process that SIGKILLs itself at a chosen point of a replica's move between log dirs: the child of the
crash tests in test_alter_log_dirs.py.

    python _log_dir_crash_child.py DATA_DIR LOG_DIRS POINT

The broker runs in this process (thread mode) so that its copier's seam can be set: at ``after-copy`` the
process is killed once the copy has caught up, before the swap; at ``inside-swap`` it is killed between the
swap's two renames (the current log's directory renamed ``-delete``, the future one not yet renamed). It prints
its bootstrap address, then waits to die; it also exits when its stdin closes (the test process gone).
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path
from typing import Any

import rill.testing


def _die(*_: object) -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def main() -> None:
    data_dir, log_dirs, point = sys.argv[1], sys.argv[2], sys.argv[3]
    broker = rill.testing.TestBroker({"log.dirs": log_dirs, "num.partitions": "1"}, data_dir=Path(data_dir)).start()

    async def hold(tp: Any, where: str) -> None:
        if where != "swap":
            return
        if point == "after-copy":
            _die()
        future = broker.broker.log_manager.future_log(tp)
        future.rename_dir = _die  # the swap renames the current log's directory first, then this one

    broker.broker.replica_manager.log_dir_mover.hold = hold
    print(broker.bootstrap_servers, flush=True)
    sys.stdin.read()  # until the test kills this process, or goes


if __name__ == "__main__":
    main()
