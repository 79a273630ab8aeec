"""The lag application: metric records (metrics/) in, lag tables and an HTML dashboard out (a Spark job
with a per-broker pass, ``--follow``, the page). Brokers never import it."""
