"""Flow control on a queue, without Spark: the queue handle, the gate (the one hold/reject
decision), home-wide limits, rings, expiry, dead-letter queues, deletion."""
