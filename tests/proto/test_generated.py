"""The checked-in generated protobuf code matches the .proto files (regenerated and diffed)."""

import os
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
TOOLS = ROOT / ".venv" / "proto-tools"


def _tools() -> pathlib.Path:
    """The pinned grpcio-tools in a private target dir, so the test env's protobuf is untouched."""
    sys.path.insert(0, str(ROOT / "proto"))
    try:
        from generate import GRPCIO_TOOLS
    finally:
        sys.path.pop(0)
    marker = TOOLS / f".grpcio-tools-{GRPCIO_TOOLS}"
    if not marker.exists():
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--target", str(TOOLS),
                        f"grpcio-tools=={GRPCIO_TOOLS}"], check=True)
        marker.touch()
    return TOOLS


def test_generated_code_is_fresh():
    tools = _tools()
    env = dict(os.environ, PYTHONPATH=str(tools))
    run = subprocess.run([sys.executable, str(ROOT / "proto" / "generate.py"), "--check"],
                         env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stdout + run.stderr


def test_stale_code_is_detected(tmp_path):
    """Same check against a copy whose .proto gained a field: must report stale."""
    import shutil

    tools = _tools()
    copy = tmp_path / "proto"
    shutil.copytree(ROOT / "proto", copy)
    proto = copy / "stepwatch" / "v1" / "agent.proto"
    proto.write_text(proto.read_text().replace("message Ack {\n  uint64 seq = 1;",
                                               "message Ack {\n  uint64 seq = 1;\n  bool extra = 99;"))
    env = dict(os.environ, PYTHONPATH=str(tools))
    run = subprocess.run([sys.executable, str(copy / "generate.py"), "--check"], env=env,
                         capture_output=True, text=True)
    assert run.returncode == 1
    assert "stale generated code: agent_pb2.py" in run.stdout


@pytest.mark.parametrize("name", ["agent_pb2", "agent_pb2_grpc"])
def test_generated_modules_import_from_installed_package(name):
    import importlib

    mod = importlib.import_module(f"stepwatch.proto.stepwatch.v1.{name}")
    assert mod.__name__.endswith(name)
