"""Who this process is: job name, rank, local rank, world size and node, from the launcher.

Read at attach() time from torchrun, SLURM or Kubernetes environment variables (explicit
options win); once torch.distributed is initialised its rank and world size win (the agent
checks at attach and at step boundaries until it is). The environment functions are pure
functions of a mapping, so tests pass their own environment.
"""

from __future__ import annotations

import os
import socket
import sys
from typing import Mapping, NamedTuple, Optional

__all__ = ["Identity", "identity_from_env", "distributed_rank"]


class Identity(NamedTuple):
    job: str
    rank: int
    local_rank: int
    world_size: int
    host: str


def _first_int(env: Mapping[str, str], names, default: int) -> int:
    for name in names:
        value = env.get(name, "").strip()
        if value.lstrip("-").isdigit():
            return int(value)
    return default


def _job_name(env: Mapping[str, str], argv0: str) -> str:
    """The scheduler's job name (SLURM ``name-id``, Kubernetes ``JOB_NAME``), else the script's
    name, with torchrun's run id (first 8 characters: ``--standalone`` makes it a random UUID)
    so two launches of one script stay apart while an elastic restart keeps its name."""
    script = os.path.splitext(os.path.basename(argv0))[0] if argv0 not in ("", "-c", "-m") else ""
    run_id = env.get("TORCHELASTIC_RUN_ID", "")
    run_id = "" if run_id in ("", "none") else run_id[:8]
    for candidate in (env.get("SLURM_JOB_NAME", "") and
                      f"{env['SLURM_JOB_NAME']}-{env.get('SLURM_JOB_ID', '')}".rstrip("-"),
                      env.get("JOB_NAME", ""),  # Kubernetes Job, when exported by the manifest
                      "-".join(p for p in (script or "job", run_id) if p) if run_id else script):
        if candidate:
            return candidate
    return "default"


def _rank_from_local(env: Mapping[str, str], local_rank: int) -> int:
    """No global rank set (Lightning's and accelerate's launchers, mp.spawn scripts set only
    LOCAL_RANK, NODE_RANK, WORLD_SIZE): NODE_RANK x processes per node + LOCAL_RANK, the
    processes per node from LOCAL_WORLD_SIZE, else WORLD_SIZE / NUM_NODES; on node 0 (or
    without NODE_RANK) LOCAL_RANK itself."""
    node = _first_int(env, ("NODE_RANK", "GROUP_RANK"), 0)
    if node == 0:
        return local_rank
    per_node = _first_int(env, ("LOCAL_WORLD_SIZE",), 0)
    if per_node <= 0:
        world, nodes = _first_int(env, ("WORLD_SIZE",), 0), _first_int(env, ("NUM_NODES",), 0)
        per_node = world // nodes if world > 0 and nodes > 0 else 0
    return node * per_node + local_rank if per_node > 0 else local_rank


def identity_from_env(job: Optional[str] = None, env: Optional[Mapping[str, str]] = None,
                      argv0: Optional[str] = None) -> Identity:
    """Resolve identity; ``job`` (already validated) overrides the launcher's name."""
    env = os.environ if env is None else env
    argv0 = sys.argv[0] if argv0 is None else argv0
    local_rank = _first_int(env, ("LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK"), 0)
    rank = _first_int(env, ("RANK", "SLURM_PROCID", "JOB_COMPLETION_INDEX", "OMPI_COMM_WORLD_RANK"), -1)
    if rank < 0:
        rank = _rank_from_local(env, local_rank)
    world = _first_int(env, ("WORLD_SIZE", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"), 1)
    host = env.get("NODE_NAME") or socket.gethostname()
    return Identity(job or _job_name(env, argv0), rank, local_rank, world, host)


def distributed_rank(torch) -> Optional[tuple[int, int]]:
    """``(rank, world_size)`` of the initialised default process group, else None. Cheap
    (a flag check until initialised); never raises."""
    try:
        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            return int(dist.get_rank()), int(dist.get_world_size())
    except Exception:
        pass
    return None
