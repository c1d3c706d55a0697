"""Broker-to-broker pieces of a replicated cluster: the asyncio Kafka-protocol client (``channel``)."""
