"""The share-partition state machine against a simple reference model (hypothesis stateful test).

The model keeps every offset of a fixed log with its state and delivery count, and derives the SPSO and SPEO
from them; the real state machine keeps only the in-flight window. After every step the two must agree, and
no accepted or archived record is ever handed out again. The steps include version 2's record-limit acquisition
(KIP-1206) and RENEW acknowledgements (KIP-1222), and gaps skipped past the SPEO."""

from __future__ import annotations

from dataclasses import dataclass

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from rill.coordinator.share.share_partition import RecordState, SharePartition
from rill.errors import ErrorCode

MEMBERS = ("m1", "m2", "m3")
LOCK_MS = 100
LIMIT = 3
MAX_IN_FLIGHT = 12


@dataclass
class ModelRecord:
    state: RecordState = RecordState.AVAILABLE
    count: int = 0
    member: str | None = None
    deadline: int = 0


class SharePartitionModel(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.now = 0
        self.batches: list[tuple[int, int]] = []
        self.model: dict[int, ModelRecord] = {}
        self.speo = 0
        self.sut = SharePartition(0, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT,
                                  max_in_flight=MAX_IN_FLIGHT)  # fmt: skip

    # -- the model's own rules ----------------------------------------------------------------------

    def spso(self) -> int:
        for offset in range(self.speo):
            if self.model[offset].state not in (RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                return offset
        return self.speo

    def release(self, rec: ModelRecord) -> None:
        rec.member, rec.deadline = None, 0
        rec.state = RecordState.ARCHIVED if rec.count >= LIMIT else RecordState.AVAILABLE

    def expire(self) -> None:
        for rec in self.model.values():
            if rec.state is RecordState.ACQUIRED and rec.deadline <= self.now:
                self.release(rec)

    # -- steps -------------------------------------------------------------------------------------

    @rule(sizes=st.lists(st.integers(1, 4), min_size=1, max_size=3))
    def produce(self, sizes: list[int]) -> None:
        end = self.batches[-1][1] + 1 if self.batches else 0
        for size in sizes:
            self.batches.append((end, end + size - 1))
            for offset in range(end, end + size):
                self.model[offset] = ModelRecord()
            end += size

    @rule(member=st.sampled_from(MEMBERS), max_records=st.integers(1, 10), record_limit=st.booleans())
    def acquire(self, member: str, max_records: int, record_limit: bool) -> None:
        self.expire()
        start = self.sut.next_fetch_offset()
        batches = [b for b in self.batches if b[1] >= start]
        got = self.sut.acquire(member, batches, self.now, max_records, record_limit=record_limit)
        expected: list[tuple[int, int]] = []
        spso = self.spso()
        stop = False
        for base, last in batches:
            if len(expected) >= max_records or stop:
                break
            for offset in range(max(base, spso), last + 1):
                if record_limit and len(expected) >= max_records:
                    break
                rec = self.model[offset]
                if offset >= self.speo and offset - spso >= MAX_IN_FLIGHT:
                    stop = True
                    break
                if rec.state is not RecordState.AVAILABLE:
                    assert offset < self.speo
                    continue
                rec.state, rec.member, rec.deadline = RecordState.ACQUIRED, member, self.now + LOCK_MS
                rec.count += 1
                self.speo = max(self.speo, offset + 1)
                expected.append((offset, rec.count))
        flat = [(o, r.delivery_count) for r in got for o in range(r.first_offset, r.last_offset + 1)]
        assert flat == expected
        if record_limit:
            assert len(flat) <= max_records

    @rule(member=st.sampled_from(MEMBERS), data=st.data(), renew=st.booleans())
    def acknowledge(self, member: str, data: st.DataObject, renew: bool) -> None:
        self.expire()
        if self.speo == 0:
            return
        first = data.draw(st.integers(0, self.speo - 1))
        last = data.draw(st.integers(first, min(first + 3, self.speo - 1)))
        per_offset = data.draw(st.booleans())
        n = last - first + 1 if per_offset else 1
        types = data.draw(st.lists(st.integers(0, 4), min_size=n, max_size=n))
        code = self.sut.acknowledge(member, [(first, last, types)], self.now, renew=renew)
        for i, offset in enumerate(range(first, last + 1)):  # the first offset refused decides the answer
            ack = types[0] if len(types) == 1 else types[i]
            if ack == 4 and not renew:
                assert code == ErrorCode.INVALID_REQUEST
                return
            if self.model[offset].state is not RecordState.ACQUIRED or self.model[offset].member != member:
                assert code == ErrorCode.INVALID_RECORD_STATE
                return
        assert code == ErrorCode.NO_ERROR
        for i, offset in enumerate(range(first, last + 1)):
            ack = types[0] if len(types) == 1 else types[i]
            rec = self.model[offset]
            if ack == 1:
                rec.state, rec.member, rec.deadline = RecordState.ACKNOWLEDGED, None, 0
            elif ack == 2:
                self.release(rec)
            elif ack == 4:  # RENEW: still the member's, locked for a full duration from now
                rec.deadline = self.now + LOCK_MS
            else:
                rec.state, rec.member, rec.deadline = RecordState.ARCHIVED, None, 0

    @rule(data=st.data())
    def skip_gaps(self, data: st.DataObject) -> None:
        """A read that found only markers (or aborted records) from the SPEO on: they are archived, within the
        in-flight limit."""
        self.expire()
        produced = self.batches[-1][1] + 1 if self.batches else 0
        if produced <= self.speo:
            return
        target = data.draw(st.integers(self.speo + 1, produced))
        self.sut.skip_to(target)
        for offset in range(self.speo, target):
            if offset - self.spso() >= MAX_IN_FLIGHT:
                break
            self.model[offset] = ModelRecord(RecordState.ARCHIVED)
            self.speo = offset + 1

    @rule(ms=st.integers(1, 150))
    def tick(self, ms: int) -> None:
        self.now += ms
        self.sut.expire_locks(self.now)
        self.expire()

    @rule(member=st.sampled_from(MEMBERS))
    def member_leaves(self, member: str) -> None:
        self.expire()
        self.sut.release_member(member)
        for rec in self.model.values():
            if rec.state is RecordState.ACQUIRED and rec.member == member:
                self.release(rec)

    @precondition(lambda self: self.speo > 0)
    @rule()
    def failover(self) -> None:
        """A new leader loads the persisted state: what was acquired is available again."""
        self.expire()
        start, batches = self.sut.start_offset, self.sut.snapshot()
        self.sut = SharePartition(0, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT,
                                  max_in_flight=MAX_IN_FLIGHT)  # fmt: skip
        self.sut.restore(start, batches)
        for rec in self.model.values():
            if rec.state is RecordState.ACQUIRED:
                self.release(rec)
        if self.sut.end_offset < self.speo:  # trailing available offsets with no delivery need no record
            assert all(self.model[o].state is RecordState.AVAILABLE and self.model[o].count == 0
                       for o in range(self.sut.end_offset, self.speo))  # fmt: skip
            self.speo = self.sut.end_offset

    # -- agreement -----------------------------------------------------------------------------------

    @invariant()
    def agrees(self) -> None:
        self.expire()
        self.sut.expire_locks(self.now)
        assert self.sut.start_offset == self.spso()
        assert self.sut.end_offset == self.speo
        for offset in range(self.sut.start_offset, self.sut.end_offset):
            rec, want = self.sut.records[offset], self.model[offset]
            assert (rec.state, rec.delivery_count) == (want.state, want.count), offset
            if want.state is RecordState.ACQUIRED:
                assert (rec.member_id, rec.lock_deadline_ms) == (want.member, want.deadline)
        assert self.sut.end_offset - self.sut.start_offset <= MAX_IN_FLIGHT
        assert all(r.delivery_count <= LIMIT for r in self.sut.records.values())


TestSharePartitionModel = SharePartitionModel.TestCase
TestSharePartitionModel.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_renew_restarts_the_lock_only_when_asked_for() -> None:
    sp = SharePartition(0, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT)
    assert [(r.first_offset, r.last_offset) for r in sp.acquire("m1", [(0, 4)], 0)] == [(0, 4)]
    assert sp.acknowledge("m1", [(0, 1, [4])], 50) == ErrorCode.INVALID_REQUEST  # not a renewing request
    assert sp.acknowledge("m2", [(0, 1, [4])], 50, renew=True) == ErrorCode.INVALID_RECORD_STATE  # not its records
    assert sp.acknowledge("m1", [(0, 1, [4])], 50, renew=True) == ErrorCode.NO_ERROR
    sp.expire_locks(120)  # past the first lock, within the renewed one
    assert [sp.state_of(o) for o in range(5)] == [RecordState.ACQUIRED] * 2 + [RecordState.AVAILABLE] * 3
    assert sp.records[0].delivery_count == 1  # a renewal is no new delivery
    sp.expire_locks(150)
    assert sp.state_of(0) is RecordState.AVAILABLE


def test_record_limit_acquires_inside_a_batch_and_gaps_are_skipped() -> None:
    sp = SharePartition(0, lock_duration_ms=LOCK_MS, delivery_count_limit=LIMIT, max_in_flight=MAX_IN_FLIGHT)
    assert [(r.first_offset, r.last_offset) for r in sp.acquire("m1", [(0, 9)], 0, 3, record_limit=True)] == [(0, 2)]
    assert [(r.first_offset, r.last_offset) for r in sp.acquire("m1", [(0, 9)], 0, 3)] == [(3, 9)]  # whole batch
    assert sp.acknowledge("m1", [(0, 9, [1])], 0) == ErrorCode.NO_ERROR
    sp.skip_to(12)  # markers at 10 and 11
    assert (sp.start_offset, sp.end_offset, sp.next_fetch_offset()) == (12, 12, 12)
