"""Client telemetry (KIP-714) and the listing of config resources: GetTelemetrySubscriptions (71),
PushTelemetry (72), ListConfigResources (74; v0 was ListClientMetricsResources, v1 of KIP-1142 adds the
resource types)."""

from __future__ import annotations

from rill.protocol.schema import field, message

GET_TELEMETRY_SUBSCRIPTIONS_REQUEST = message("GetTelemetrySubscriptionsRequest", 71, "0", "0+", [
    field("ClientInstanceId", "uuid", "0+"),
])

GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE = message("GetTelemetrySubscriptionsResponse", 71, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ClientInstanceId", "uuid", "0+"),
    field("SubscriptionId", "int32", "0+"),
    field("AcceptedCompressionTypes", "[]int8", "0+"),
    field("PushIntervalMs", "int32", "0+"),
    field("TelemetryMaxBytes", "int32", "0+"),
    field("DeltaTemporality", "bool", "0+"),
    field("RequestedMetrics", "[]string", "0+"),
])

PUSH_TELEMETRY_REQUEST = message("PushTelemetryRequest", 72, "0", "0+", [
    field("ClientInstanceId", "uuid", "0+"),
    field("SubscriptionId", "int32", "0+"),
    field("Terminating", "bool", "0+"),
    field("CompressionType", "int8", "0+"),
    field("Metrics", "bytes", "0+"),
])

PUSH_TELEMETRY_RESPONSE = message("PushTelemetryResponse", 72, "0", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
])

LIST_CONFIG_RESOURCES_REQUEST = message("ListConfigResourcesRequest", 74, "0-1", "0+", [
    field("ResourceTypes", "[]int8", "1+"),
])

LIST_CONFIG_RESOURCES_RESPONSE = message("ListConfigResourcesResponse", 74, "0-1", "0+", [
    field("ThrottleTimeMs", "int32", "0+"),
    field("ErrorCode", "int16", "0+"),
    field("ConfigResources", "[]ConfigResource", "0+", fields=[
        field("ResourceName", "string", "0+"),
        field("ResourceType", "int8", "1+", default=16),
    ]),
])

APIS = [
    (GET_TELEMETRY_SUBSCRIPTIONS_REQUEST, GET_TELEMETRY_SUBSCRIPTIONS_RESPONSE),
    (PUSH_TELEMETRY_REQUEST, PUSH_TELEMETRY_RESPONSE),
    (LIST_CONFIG_RESOURCES_REQUEST, LIST_CONFIG_RESOURCES_RESPONSE),
]
