"""What a read returns (Kafka's FetchDataInfo): file regions the network layer sends with sendfile."""

from __future__ import annotations

from dataclasses import dataclass, field

from rill.common import FileRegion
from rill.log.transaction_index import AbortedTxn


@dataclass(frozen=True, slots=True)
class FetchDataInfo:
    fetch_offset: int
    regions: list[FileRegion] = field(default_factory=list)
    size: int = 0
    aborted_transactions: list[AbortedTxn] | None = None  # read_committed reads: those overlapping the data
