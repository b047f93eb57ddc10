"""Alerting: incidents from detections, an outbox in the store, and sinks (console, Slack, webhooks)."""
