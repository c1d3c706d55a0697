"""InitProducerId (22) for idempotent (non-transactional) producers.

Producer ids are handed out from blocks reserved durably in the metadata store, so an id is never given
twice, not even across restarts (a reused id would make the log drop a new producer's batches as duplicates).
"""

from __future__ import annotations

from rill.api.context import RequestContext
from rill.api.registry import Body, handler
from rill.errors import ErrorCode
from rill.metadata.store import MetadataStore
from rill.protocol import ApiKey

PRODUCER_ID_BLOCK_SIZE = 1000


class ProducerIdManager:
    def __init__(self, store: MetadataStore, block_size: int = PRODUCER_ID_BLOCK_SIZE) -> None:
        self._store = store
        self._block_size = block_size
        self._next = 0
        self._end = 0

    async def generate(self) -> int:
        if self._next >= self._end:
            self._next = await self._store.allocate_producer_ids(self._block_size)
            self._end = self._next + self._block_size
        pid = self._next
        self._next += 1
        return pid


@handler(ApiKey.INIT_PRODUCER_ID, 0, 5)
async def handle_init_producer_id(ctx: RequestContext, request: Body) -> Body:
    if request.get("transactional_id") is not None:
        return {
            "throttle_time_ms": 0,
            "error_code": ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
            "producer_id": -1,
            "producer_epoch": -1,
        }
    pid = await ctx.services.producer_ids.generate()
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}
