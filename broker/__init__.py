"""Broker: the replica log, partitions with HW and ISR, the timing wheel and purgatory, request handlers
and the socket server."""
