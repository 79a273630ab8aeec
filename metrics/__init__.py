"""Metrics: per-partition replication metrics emission (files, MQTT) and the Spark lag job and dashboard."""
