"""The controller, as Kafka's KRaft controller: commands that decide which metadata records to commit
(`controller.py`, delegating to a control manager per concern), the image they work on (`metadata_log.py`;
the records and the image themselves are metadata/'s), the quorum member that replicates them and runs the
commands while it is the active controller (`controller_node.py`; the Raft itself is raft/'s) and the
process shell around it (`controller_server.py`)."""
