"""Ingest: the gRPC server agents stream to (``_grpc_server``) and the control service
(``_control``), the pipeline that applies a batch to the state and the listeners
(``_pipeline``), the recorder of applied batches (``_record``), and the accept loop's guard
against descriptor exhaustion (``_accept_guard``)."""

from ._accept_guard import AcceptGuard, raise_fd_limit
from ._grpc_server import IngestServer
from ._pipeline import Pipeline
from ._record import RecordError, RecordEvent, Recorder, read_record, record_events

__all__ = ["AcceptGuard", "IngestServer", "Pipeline", "RecordError", "RecordEvent", "Recorder", "raise_fd_limit",
           "read_record", "record_events"]
