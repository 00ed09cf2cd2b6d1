"""``spark-flow serve``: Prometheus metrics and the console over HTTP."""
