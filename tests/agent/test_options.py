"""Agent settings: precedence (argument > environment > default), clear errors, identity."""

import pytest

from stepwatch.agent._identity import identity_from_env
from stepwatch.agent._options import AgentSettings
from stepwatch.core.settings import SettingsError, load


def test_precedence_argument_over_environment_over_default():
    env = {"STEPWATCH_COLLECTOR": "envhost:1", "STEPWATCH_FLUSH_INTERVAL_S": "2.5"}
    got = load(AgentSettings, {"collector": "arg:2"}, env)
    assert got.collector == "arg:2"
    assert got.flush_interval_s == 2.5
    assert got.memory_stats_interval_s == 1.0


def test_falsy_argument_still_wins():
    got = load(AgentSettings, {"disable": False}, {"STEPWATCH_DISABLE": "1"})
    assert got.disable is False


def test_units_in_environment():
    got = load(AgentSettings, {}, {"STEPWATCH_SPOOL_MAX_BYTES": "64MiB",
                                   "STEPWATCH_WINDOW_INTERVAL_S": "2m"})
    assert (got.spool_max_bytes, got.window_interval_s) == (64 << 20, 120.0)


@pytest.mark.parametrize("args,env,needle", [
    ({"collector": "nohostport"}, {}, "option 'collector' from argument: invalid value 'nohostport'"),
    ({}, {"STEPWATCH_COLLECTOR": "h:99999"}, "from environment STEPWATCH_COLLECTOR"),
    ({"memory_stats_interval_s": 0.1}, {}, "'memory_stats_interval_s' from argument: invalid value 0.1: must be >= 1.0"),
    ({}, {"STEPWATCH_DISABLE": "maybe"}, "'disable' from environment STEPWATCH_DISABLE: invalid value 'maybe'"),
    ({"samples_per_step": -3}, {}, "'samples_per_step'"),
    ({}, {"STEPWATCH_TOKEN": "x", "STEPWATCH_BUFFER_RECORDS": "1.5"}, "'buffer_records' from environment"),
    ({"colector": "h:1"}, {}, "unknown option(s) in argument: colector"),
])
def test_bad_values_name_the_option(args, env, needle):
    with pytest.raises(SettingsError) as err:
        load(AgentSettings, args, env)
    assert needle in str(err.value)


def test_identity_from_torchrun_slurm_and_default():
    tr = identity_from_env(env={"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
                                "TORCHELASTIC_RUN_ID": "run42"}, argv0="train.py")
    assert (tr.job, tr.rank, tr.local_rank, tr.world_size) == ("train-run42", 3, 1, 8)
    standalone = identity_from_env(env={"TORCHELASTIC_RUN_ID": "6f1c2d3e-aaaa-bbbb-cccc-0123456789ab"},
                                   argv0="/src/pretrain.py")
    assert standalone.job == "pretrain-6f1c2d3e"  # readable, and one launch apart from the next
    sl = identity_from_env(env={"SLURM_PROCID": "5", "SLURM_LOCALID": "2", "SLURM_NTASKS": "16",
                                "SLURM_JOB_NAME": "llm", "SLURM_JOB_ID": "991"}, argv0="x.py")
    assert (sl.job, sl.rank, sl.local_rank, sl.world_size) == ("llm-991", 5, 2, 16)
    k8s = identity_from_env(env={"JOB_COMPLETION_INDEX": "4", "TORCHELASTIC_RUN_ID": "none"},
                            argv0="/app/train.py")
    assert (k8s.job, k8s.rank) == ("train", 4)
    assert identity_from_env("explicit", env={}, argv0="a.py").job == "explicit"


def test_rank_without_a_global_rank_comes_from_the_local_one():
    """Lightning's DDP launcher and mp.spawn scripts set LOCAL_RANK (and NODE_RANK) but not RANK:
    two processes must not both report rank 0."""
    ranks = [identity_from_env(env={"LOCAL_RANK": str(r), "NODE_RANK": "0", "WORLD_SIZE": "2"}, argv0="t.py").rank
             for r in (0, 1)]
    assert ranks == [0, 1]
    second_node = {"LOCAL_RANK": "1", "NODE_RANK": "1", "WORLD_SIZE": "8"}
    assert identity_from_env(env=dict(second_node, LOCAL_WORLD_SIZE="4"), argv0="t.py").rank == 5
    assert identity_from_env(env=dict(second_node, NUM_NODES="2"), argv0="t.py").rank == 5
    assert identity_from_env(env={"RANK": "3", "LOCAL_RANK": "1"}, argv0="t.py").rank == 3  # RANK wins
    assert identity_from_env(env={}, argv0="t.py").rank == 0
