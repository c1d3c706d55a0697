"""``rill console``: a web console for a Kafka-compatible cluster (docs/CONSOLE.md). It is a Kafka client of the
cluster and nothing more: pages read through the protocol with the identity of the person using it (or one
service identity), changes are confirmed and audited, and it keeps no state beyond its settings."""
