"""The agent <-> collector wire protocol: stepwatch/v1/agent.proto and its generated code, and
the protocol's constants that both sides keep (the sidecar and the collector import them)."""

# Ack.batch_interval_ask_s is at most this: the collector asks no longer, the sidecar follows no
# longer (a broken collector cannot make a rank's data hours late).
MAX_PACE_S = 30.0

# An AgentMessage the collector could not decode is refused with INVALID_ARGUMENT and details
# that begin with this: the sidecar then suspects its lowest pending batch (a spool file damaged
# on disk) and moves it aside when the same one is refused twice.
MALFORMED_MESSAGE = "malformed AgentMessage"
