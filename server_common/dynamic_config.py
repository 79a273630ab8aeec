"""Broker configs that may change at runtime (Kafka's dynamic replication quotas): the controller checks an
INCREMENTAL_ALTER_CONFIGS against them, brokers apply them, the CLI checks before it sends."""

from __future__ import annotations

import difflib

# Broker configs INCREMENTAL_ALTER_CONFIGS may change at runtime (Kafka's dynamic replication quotas).
DYNAMIC_BROKER_CONFIGS = ("follower.replication.throttled.rate", "leader.replication.throttled.rate")


def dynamic_broker_config_error(key: str, value: str | None) -> str | None:
    """Why `key` cannot be set to `value` (None: deleted) at runtime, naming a close key for a typo, or None."""
    if key not in DYNAMIC_BROKER_CONFIGS:
        close = difflib.get_close_matches(key, DYNAMIC_BROKER_CONFIGS, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        known = ", ".join(DYNAMIC_BROKER_CONFIGS)
        return f"broker config {key!r} cannot be changed at runtime here (only {known}){hint}"
    if value is not None and (not value.isdigit() or int(value) < 1):
        return f"broker config {key}: expected bytes/s >= 1, got {value!r}"
    return None
