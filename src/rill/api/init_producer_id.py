"""InitProducerId (22): idempotent producers get a new producer id at epoch 0; transactional producers are
answered by the transaction coordinator (new id, epoch bump, fencing, KIP-360 recovery).

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
    txn_id = request.get("transactional_id")
    if txn_id is not None:
        coordinator = ctx.services.txn_coordinator
        if coordinator is None:
            return _error(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        pid, epoch = request.get("producer_id", -1), request.get("producer_epoch", -1)
        # v3+ (KIP-360): a producer that had an id gives it, with its epoch, to have that epoch bumped.
        expected = (pid, epoch) if pid >= 0 and epoch >= 0 else None
        result = await coordinator.init_producer_id(txn_id, request["transaction_timeout_ms"], expected)
        if result.error != ErrorCode.NO_ERROR:
            code = result.error
            if code == ErrorCode.PRODUCER_FENCED and ctx.api_version < 4:
                code = ErrorCode.INVALID_PRODUCER_EPOCH  # before PRODUCER_FENCED existed
            return _error(code)
        return {"throttle_time_ms": 0, "error_code": 0, "producer_id": result.producer_id,
                "producer_epoch": result.producer_epoch}  # fmt: skip
    pid = await ctx.services.producer_ids.generate()
    return {"throttle_time_ms": 0, "error_code": 0, "producer_id": pid, "producer_epoch": 0}


def _error(code: ErrorCode) -> Body:
    return {"throttle_time_ms": 0, "error_code": code, "producer_id": -1, "producer_epoch": -1}
