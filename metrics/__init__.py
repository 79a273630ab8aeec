"""Metrics: what every broker runs to emit its replication metrics (the emitter, the file and MQTT sinks,
the sink program) and the record contract (fields, schema). The lag application that reads them is
lagapp/, above this package."""
