"""The transaction coordinator: transactional ids' state in ``__transaction_state``, Kafka's transaction state
machine, and the markers that end transactions on their partitions."""
