"""Follower side of replication: fetch state, the leader end point and the replica fetcher loops."""
