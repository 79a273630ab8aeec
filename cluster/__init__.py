"""Cluster: the controller, the local launcher, leader-kill chaos and the `minibroker` CLI."""
