"""The controller, as Kafka's KRaft controller: commands that decide which metadata records to commit
(`controller.py`, delegating to a control manager per concern), the records and the image they replay
into (`metadata.py`), their durable log and snapshots (`metadata_store.py`), the node that dispatches
requests and pushes state to brokers (`controller_node.py`) and the process shell around it
(`controller_server.py`)."""
