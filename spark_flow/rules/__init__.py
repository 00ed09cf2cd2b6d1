"""Pure rules: the flow state machine, settings and their keys, units, names, depths and
positions, storage options from conf. No Spark, no storage: every process judges a queue with
the same code."""
