"""Wire protocol: framing, the msgpack codec, typed messages per API, Kafka error codes and record batches.

Nothing here touches sockets or the event loop, so every rule can be tested with plain bytes.
"""
