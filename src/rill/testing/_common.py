"""What the thread and subprocess runners share."""

from __future__ import annotations


class BrokerStartError(RuntimeError):
    """The broker did not come up; the message says why, with the end of its log when there is one."""
