"""tests/_procs.assert_done, which decides whether a multi-process test job finished: exit 0,
or torch's gloo teardown abort only after every rank printed its last line; anything else fails."""

from __future__ import annotations

import subprocess

import pytest

from _procs import TEARDOWN_ABORT, assert_done


def _run(rc: int, stdout: str, stderr: str = "") -> subprocess.CompletedProcess:
    return subprocess.CompletedProcess(["job"], rc, stdout, stderr)


def test_exit_0_passes_and_is_not_an_abort():
    assert assert_done(_run(0, "done 0\ndone 1\n"), 2) is False


def test_the_teardown_abort_after_every_rank_is_done_passes_with_a_warning():
    with pytest.warns(UserWarning, match="gloo teardown abort"):
        assert assert_done(_run(-6, "done 0\ndone 1\n", TEARDOWN_ABORT + "\nFatal Python error"), 2) is True


@pytest.mark.parametrize("run, kw", [
    (_run(-6, "done 0\n", TEARDOWN_ABORT), {}),                       # rank 1 never finished
    (_run(1, "done 0\ndone 1\n", "Traceback: ValueError"), {}),       # another failure
    (_run(-6, "done 0\ndone 1\n", TEARDOWN_ABORT), {"tolerate": False}),  # not tolerated here
])
def test_anything_else_fails(run, kw):
    with pytest.raises(AssertionError):
        assert_done(run, 2, **kw)


def test_the_marker_is_formatted_per_rank():
    run = _run(-6, "trainer rank 0: 40 steps\ntrainer rank 1: 40 steps\n", TEARDOWN_ABORT)
    with pytest.warns(UserWarning):
        assert assert_done(run, 2, "trainer rank {rank}: ")
