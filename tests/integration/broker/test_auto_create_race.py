"""Clients asking at once for the same new topic (Metadata with allow_auto_topic_creation, as every producer
does) all get it: the second creation finds the first's topic and answers it (it answered TOPIC_ALREADY_EXISTS
once changes were made durable off the event loop, and a Spark write of several tasks failed)."""

from __future__ import annotations

import threading

from tests.integration.broker._wire import Wire

import rill.testing
from rill.protocol import ApiKey


def test_concurrent_auto_creation_of_one_topic_answers_it_to_every_client() -> None:
    with rill.testing.broker() as b:
        wires = [Wire(b.bootstrap_servers) for _ in range(8)]
        try:
            for round_ in range(5):
                name = f"raced-{round_}"
                codes: list[int] = []
                barrier = threading.Barrier(len(wires))

                def ask(w: Wire, name: str = name, barrier: threading.Barrier = barrier,
                        codes: list[int] = codes) -> None:  # fmt: skip
                    barrier.wait()
                    body = {"topics": [{"name": name}], "allow_auto_topic_creation": True}
                    codes.append(w.call(ApiKey.METADATA, 9, body)["topics"][0]["error_code"])

                threads = [threading.Thread(target=ask, args=(w,)) for w in wires]
                for t in threads:
                    t.start()
                for t in threads:
                    t.join(30)
                assert codes == [0] * len(wires), (name, codes)
        finally:
            for w in wires:
                w.close()
