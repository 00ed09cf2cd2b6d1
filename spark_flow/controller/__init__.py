"""The flow controller: a streaming query that looks at every queue of a home, steps each one's
flow state (``applyInPandasWithState``) and writes the status and history tables."""
