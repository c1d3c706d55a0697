"""Client telemetry (KIP-714): client metrics subscriptions (``subscriptions``), the broker's side of
GetTelemetrySubscriptions and PushTelemetry (``client_metrics_manager``), and the pushed OTLP metrics held for
the Prometheus endpoint (``pushed_metrics``)."""
