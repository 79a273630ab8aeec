"""The metadata quorum: a pull-based Raft (Kafka's KRaft, KIP-595/630) that replicates one log,
`__cluster_metadata-0`, among the controllers, with brokers as observers."""
