"""What the collector holds: rank state per (job, rank) (``_state``), the process's own health
(``_health``), the capture requests it
issued and the traces they brought (``_trace_requests``), the store of uploaded trace files
(``_trace_store``), and how long reads of the state give way to ingest (``_yield``)."""
