"""Share groups (KIP-932): the share-partition state machine, share-group membership, and the ShareFetch /
ShareAcknowledge work a partition leader does."""
