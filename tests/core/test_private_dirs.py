"""This user's own directories under the temp directory (spool, traces): made 0700, and used
only when they are this user's with no group or other access (a shared login node: another user
can make /tmp/stepwatch-<uid> first). Real directories, real owners (the tests run as root and
give a directory to another uid)."""

from __future__ import annotations

import os
import stat
import tempfile

import pytest

from stepwatch.core import support


@pytest.fixture
def tmp_root(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path / f"stepwatch-{os.getuid()}"


def test_made_private_where_nothing_was(tmp_root):
    path = support.user_tmp("spool")
    support.makedirs_private(path)
    for d in (tmp_root, tmp_root / "spool"):
        assert stat.S_IMODE(os.lstat(d).st_mode) == 0o700


def test_a_premade_root_open_to_others_is_refused_naming_it(tmp_root):
    tmp_root.mkdir(mode=0o777)
    os.chmod(tmp_root, 0o777)
    with pytest.raises(PermissionError, match=f"{tmp_root} has mode 0777"):
        support.makedirs_private(support.user_tmp("traces"))


@pytest.mark.skipif(os.getuid() != 0, reason="giving a directory to another uid needs root")
def test_a_root_another_user_made_is_refused(tmp_root):
    tmp_root.mkdir(mode=0o700)
    os.chown(tmp_root, 12345, 12345)
    with pytest.raises(PermissionError, match="belongs to uid 12345, not to this user"):
        support.makedirs_private(support.user_tmp("spool"))


def test_a_link_in_place_of_the_root_is_refused(tmp_root, tmp_path):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    os.symlink(elsewhere, tmp_root)
    with pytest.raises(PermissionError, match="symbolic link"):
        support.makedirs_private(support.user_tmp("spool"))


def test_a_directory_the_user_named_is_left_as_it_is(tmp_root, tmp_path):
    mine = tmp_path / "shared-spool"
    mine.mkdir(mode=0o755)
    os.chmod(mine, 0o755)
    support.makedirs_private(str(mine / "a"))
    assert stat.S_IMODE(os.lstat(mine).st_mode) == 0o755


def test_the_spool_keeps_batches_in_memory_and_says_why(tmp_root):
    from stepwatch.agent._sidecar._spool import Spool

    tmp_root.mkdir(mode=0o777)
    os.chmod(tmp_root, 0o777)
    spool = Spool(support.user_tmp("spool"), 1 << 20)
    assert f"{tmp_root} has mode 0777" in spool.last_error, spool.last_error
    assert not (tmp_root / "spool").exists()
