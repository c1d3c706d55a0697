"""Mirroring between clusters (``rill mirror``), in the spirit of MirrorMaker 2: topics, their configs and new
partitions, records (in order, per partition), and consumer group offsets translated to the target."""

from rill.mirror.mirror_maker import MirrorConfig, MirrorMaker, MirrorStats

__all__ = ["MirrorConfig", "MirrorMaker", "MirrorStats"]
