"""What the suite's tests share: queues and homes filled without Spark (``homes``), servers and
Spark applications as processes (``servers``, ``processes``, ``stores``), waits on streaming
queries (``streams``), the console's page in a browser (``pages``), the flow's invariants
(``invariants``) and the kill -9 trials' processes (``fault_process``, run as a script).
Imported as ``support.<module>``: ``tests`` is on pytest's pythonpath."""
