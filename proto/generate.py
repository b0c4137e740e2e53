"""Regenerate the checked-in protobuf/gRPC code from proto/stepwatch/v1/*.proto.

Run with the pinned generator (see GRPCIO_TOOLS below):

    python -m pip install grpcio-tools==1.71.2
    python proto/generate.py            # rewrite the generated files
    python proto/generate.py --check    # exit 1 when the checked-in files are stale

The generated modules import each other as ``stepwatch.v1.x_pb2``; they are installed as
``stepwatch.proto.stepwatch.v1``, so the absolute import is rewritten into a relative one.
"""

from __future__ import annotations

import argparse
import pathlib
import re
import sys
import tempfile

GRPCIO_TOOLS = "1.71.2"
PROTO_ROOT = pathlib.Path(__file__).resolve().parent
PACKAGE_DIR = PROTO_ROOT / "stepwatch" / "v1"
_SUFFIXES = ("_pb2.py", "_pb2.pyi", "_pb2_grpc.py")


def _generate(out: pathlib.Path) -> None:
    import grpc_tools
    from grpc_tools import protoc

    version = getattr(grpc_tools, "__version__", None)
    if version is None:
        from importlib.metadata import version as _v

        version = _v("grpcio-tools")
    if version != GRPCIO_TOOLS:
        sys.exit(f"proto/generate.py: need grpcio-tools=={GRPCIO_TOOLS}, found {version}")
    include = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    protos = sorted(str(p.relative_to(PROTO_ROOT)) for p in PACKAGE_DIR.glob("*.proto"))
    args = ["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={out}",
            f"--pyi_out={out}", f"--grpc_python_out={out}", *protos]
    if protoc.main(args) != 0:
        sys.exit("proto/generate.py: protoc failed")
    for path in (out / "stepwatch" / "v1").iterdir():
        text = path.read_text()
        text = re.sub(r"^from stepwatch\.v1 import (\w+)", r"from . import \1", text, flags=re.M)
        path.write_text(text)


def _generated(root: pathlib.Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted((root / "stepwatch" / "v1").iterdir())
            if p.name.endswith(_SUFFIXES)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare, write nothing")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        fresh_root = pathlib.Path(tmp)
        _generate(fresh_root)
        fresh = _generated(fresh_root)
    current = _generated(PROTO_ROOT)
    if args.check:
        stale = sorted(set(fresh) ^ set(current) | {n for n in fresh if fresh[n] != current.get(n)})
        if stale:
            print("stale generated code: " + ", ".join(stale) + "; run python proto/generate.py")
            return 1
        return 0
    for name, text in fresh.items():
        (PACKAGE_DIR / name).write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
