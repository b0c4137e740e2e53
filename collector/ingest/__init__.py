"""Ingest: the gRPC server agents stream to (``_grpc_server``) and the control service
(``_control``), the pipeline that applies a batch to the state and the listeners
(``_pipeline``), the recorder of applied batches (``_record``), and the accept loop's guard
against descriptor exhaustion (``_accept_guard``)."""
