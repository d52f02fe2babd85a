"""Generates the gRPC stubs from proto/scored/v1/scorer.proto at build time (no generated code in git)."""
import os

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))


class BuildWithStubs(build_py):
    def run(self):
        from grpc_tools import protoc  # build requirement (pyproject.toml)

        out = os.path.join(HERE, "src", "scored_client", "_gen")
        os.makedirs(out, exist_ok=True)
        proto = os.path.join(PROTO_ROOT, "scored", "v1", "scorer.proto")
        if not os.path.exists(proto):
            raise SystemExit(f"scorer.proto not found at {proto}: build from the scored repository")
        args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--pyi_out={out}",
                f"--grpc_python_out={out}", proto]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        # grpc_tools writes absolute imports ("from scored.v1 import scorer_pb2"): make them package-relative.
        grpc_file = os.path.join(out, "scored", "v1", "scorer_pb2_grpc.py")
        with open(grpc_file) as f:
            text = f.read()
        with open(grpc_file, "w") as f:
            f.write(text.replace("from scored.v1 import", "from scored_client._gen.scored.v1 import"))
        for d in ("scored", os.path.join("scored", "v1")):
            open(os.path.join(out, d, "__init__.py"), "a").close()
        open(os.path.join(out, "__init__.py"), "a").close()
        # The generated packages did not exist when setuptools discovered packages: add them now.
        for pkg in ("scored_client._gen", "scored_client._gen.scored", "scored_client._gen.scored.v1"):
            if pkg not in self.packages:
                self.packages.append(pkg)
        super().run()


setup(cmdclass={"build_py": BuildWithStubs})
