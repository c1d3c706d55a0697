"""The console's requests for what confluent-kafka's AdminClient does not offer, on Rill's own client (plain
Kafka protocol): partition sizes on disk (DescribeLogDirs, every broker), transactions (ListTransactions,
DescribeTransactions, abort through WriteTxnMarkers: the same requests as ``rill transactions``) and client
quotas (DescribeClientQuotas)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from rill.client.client import KafkaClient
from rill.client.security import ClientSecurity, SecurityConfigError
from rill.console.cluster import ConsoleError, Unsupported
from rill.errors import ErrorCode, KafkaError
from rill.protocol import ApiKey


def rill_client(bootstrap: str, props: Mapping[str, Any], timeout_s: float = 15.0) -> KafkaClient:
    try:
        security = ClientSecurity.from_properties(props)
    except SecurityConfigError as e:
        raise ConsoleError(str(e)) from None
    return KafkaClient(bootstrap, client_id="rill-console", timeout_s=timeout_s, security=security)


def _request(client: KafkaClient, node: int, api: ApiKey, body: dict[str, Any]) -> dict[str, Any]:
    try:
        _, response = client.connection(node).request(api, body)
    except KafkaError as e:
        if e.code == ErrorCode.UNSUPPORTED_VERSION:
            raise Unsupported(f"{api.name}: the cluster does not support it") from None
        raise ConsoleError(f"{api.name}: {e}") from None
    except OSError as e:
        raise ConsoleError(f"{api.name} to broker {node}: {e}") from None
    return response


def topic_sizes(client: KafkaClient, topics: Mapping[str, int]) -> dict[str, int]:
    """Bytes on disk of ``topics`` (name -> partition count), summed over every replica on every live broker
    (what DescribeLogDirs tells); topics the identity may not describe are left out by the brokers."""
    sizes: dict[str, int] = {}
    if not topics:
        return sizes
    wanted = [{"topic": t, "partitions": list(range(n))} for t, n in topics.items()]
    for node in sorted(client.refresh_metadata(list(topics)).brokers):
        response = _request(client, node, ApiKey.DESCRIBE_LOG_DIRS, {"topics": wanted})
        if response.get("error_code"):
            raise ConsoleError(f"DescribeLogDirs: {ErrorCode(response['error_code']).name}")
        for result in response.get("results", []):
            for topic in result.get("topics", []):
                total = sum(int(p.get("partition_size", 0)) for p in topic.get("partitions", [])
                            if not p.get("is_future_key"))  # a replica being moved is counted once  # fmt: skip
                sizes[topic["name"]] = sizes.get(topic["name"], 0) + total
    return sizes


def topic_summaries(client: KafkaClient, names: list[str], keys: list[str]) -> dict[str, dict[str, str]]:
    """``keys`` of each topic's configs, in one DescribeConfigs that asks for those keys only (a broker then
    works out two entries per topic, not every config with its synonyms)."""
    if not names:
        return {}
    node = min(client.refresh_metadata([]).brokers)
    body = {"resources": [{"resource_type": 2, "resource_name": n, "configuration_keys": keys} for n in names],
            "include_synonyms": False, "include_documentation": False}  # fmt: skip
    response = _request(client, node, ApiKey.DESCRIBE_CONFIGS, body)
    return {r["resource_name"]: {c["name"]: c["value"] for c in r["configs"]}
            for r in response.get("results", []) if not r.get("error_code")}  # fmt: skip


def client_quotas(client: KafkaClient) -> list[tuple[str, dict[str, float]]]:
    """Every client quota entity ("user=alice, client-id=app") with its quotas."""
    node = min(client.refresh_metadata(None).brokers)
    response = _request(client, node, ApiKey.DESCRIBE_CLIENT_QUOTAS, {"components": [], "strict": False})
    if response.get("error_code"):
        raise ConsoleError(f"DescribeClientQuotas: {response.get('error_message') or response['error_code']}")
    out = []
    for entry in response.get("entries", []):
        entity = ", ".join(f"{e['entity_type']}={e['entity_name'] if e['entity_name'] is not None else '<default>'}"
                           for e in entry["entity"])  # fmt: skip
        out.append((entity, {v["key"]: v["value"] for v in entry["values"]}))
    return sorted(out)


def transactions(client: KafkaClient) -> list[Any]:
    """Every transaction the coordinators know, described."""
    from rill.cli._common import CliError
    from rill.cli._txn_admin import describe_transactions, list_transactions

    try:
        listed = list_transactions(client)
        return sorted(describe_transactions(client, [t.transactional_id for t in listed]),
                      key=lambda d: d.transactional_id)  # fmt: skip
    except (CliError, KafkaError) as e:
        raise ConsoleError(f"transactions: {e}") from None


def hanging(client: KafkaClient, max_timeout_ms: int) -> list[Any]:
    """Transactions open on a partition longer than ``max_timeout_ms`` that no coordinator knows (Kafka's
    rule, as ``rill transactions find-hanging``), over every partition of the cluster."""
    from rill.cli._common import CliError
    from rill.cli._txn_admin import find_hanging
    from rill.common import TopicPartition

    md = client.refresh_metadata(None)
    tps = [TopicPartition(t.name, p) for t in md.topics.values() for p in t.partitions]
    try:
        return find_hanging(client, tps, max_timeout_ms)
    except (CliError, KafkaError) as e:
        raise ConsoleError(f"hanging transactions: {e}") from None


def abort_transaction(client: KafkaClient, topic: str, partition: int, producer_id: int, producer_epoch: int,
                      coordinator_epoch: int) -> None:  # fmt: skip
    from rill.cli._common import CliError
    from rill.cli._txn_admin import abort_transaction as abort
    from rill.common import TopicPartition

    try:
        abort(client, TopicPartition(topic, partition), producer_id, producer_epoch, coordinator_epoch)
    except (CliError, KafkaError) as e:
        raise ConsoleError(str(e)) from None


def reassignments(client: KafkaClient) -> list[tuple[str, int, list[int], list[int], list[int]]]:
    """Reassignments in progress: (topic, partition, replicas, adding, removing), from the controller."""
    md = client.refresh_metadata(None)
    node = min(md.brokers)
    response = _request(client, node, ApiKey.LIST_PARTITION_REASSIGNMENTS, {"timeout_ms": 10000, "topics": None})
    if response.get("error_code"):
        raise ConsoleError(f"ListPartitionReassignments: {response.get('error_message') or response['error_code']}")
    return sorted((t["name"], p["partition_index"], list(p["replicas"]), list(p["adding_replicas"]),
                   list(p["removing_replicas"])) for t in response["topics"] for p in t["partitions"])  # fmt: skip
