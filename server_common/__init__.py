"""What the operator tools (cluster/, client/) and the simulator (sim/) share without importing one another."""
