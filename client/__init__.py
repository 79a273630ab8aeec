"""Clients: an async connection that pipelines requests, and the producer, consumer and admin helpers the CLI uses."""
