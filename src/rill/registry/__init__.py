"""A schema registry that speaks Confluent Schema Registry's REST API, stored in Rill's ``_schemas`` topic.

``SchemaRegistry`` is one instance (``rill registry``); ``rill.registry.wire`` is Confluent's framing
of a serialized value (magic byte 0, 4-byte schema id, payload).
"""

from rill.registry.server import RegistryThread, SchemaRegistry
from rill.registry.wire import decode, encode

__all__ = ["RegistryThread", "SchemaRegistry", "decode", "encode"]
