"""Cluster metadata shared by the controllers and the brokers: the records of the metadata log and the
image they build."""
