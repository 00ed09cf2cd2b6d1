"""Spark's side: the session, declaring a queue, the enqueue sink, the ``flowqueue`` source,
the query listener and the dead-letter valve of a consumer's foreachBatch."""
