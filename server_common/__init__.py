"""What brokers, the controller and the tools share below the network: the injected clock (`time.py`),
atomic file writes (`storage.py`), the log and topic config keys both the broker's log and the
controller's validation read (`log_config.py`), the broker configs that change at runtime
(`dynamic_config.py`), and what every process's config shares (`config.py`). And `poll.py`: one wait-until-or-deadline
helper and one retry policy, on an injected clock, for the operator tools and the simulator alike."""
