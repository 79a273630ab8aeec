"""What brokers, the controller and the tools share below the network: the injected clock (`time.py`),
atomic file writes (`storage.py`) and the log and topic config keys both the broker's log and the
controller's validation read (`log_config.py`)."""
