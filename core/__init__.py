"""What the agent and the collector share, and nothing of either's runtime: the settings model
(``settings``), the wire contract of one step record (``contract``), small support functions
(``support``: bounded logging, private directories, backoff, PEM files) and the placement of
jobs on collector replicas (``placement``). Importing this package imports nothing heavy and
registers no hook: the collector uses it without loading the agent."""
