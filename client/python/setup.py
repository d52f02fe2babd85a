"""Generates the gRPC stubs from scorer.proto at build time (no generated code in git).

The proto is proto/scored/v1/scorer.proto of the scored repository; an sdist carries its own copy (proto/
next to this file), so a wheel builds from the sdist alone.
"""
import os
import shutil

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.sdist import sdist

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_REL = os.path.join("scored", "v1", "scorer.proto")
# An unpacked sdist first, then the repository.
PROTO_ROOTS = [os.path.join(HERE, "proto"), os.path.normpath(os.path.join(HERE, "..", "..", "proto"))]


def _proto_root() -> str:
    for root in PROTO_ROOTS:
        if os.path.exists(os.path.join(root, PROTO_REL)):
            return root
    raise SystemExit(f"{PROTO_REL} not found under {' or '.join(PROTO_ROOTS)}: build from the scored "
                     "repository or from its scored-client sdist")


class BuildWithStubs(build_py):
    def run(self):
        from grpc_tools import protoc  # build requirement (pyproject.toml)

        root = _proto_root()
        out = os.path.join(HERE, "src", "scored_client", "_gen")
        os.makedirs(out, exist_ok=True)
        proto = os.path.join(root, PROTO_REL)
        args = ["protoc", f"-I{root}", f"--python_out={out}", f"--pyi_out={out}", f"--grpc_python_out={out}",
                proto]
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
            self.package_data.setdefault(pkg, [])
        self.package_data["scored_client._gen.scored.v1"].append("*.pyi")
        super().run()


class SdistWithProto(sdist):
    """Copies scorer.proto into the sdist (proto/scored/v1/), where BuildWithStubs finds it."""

    def make_release_tree(self, base_dir, files):
        super().make_release_tree(base_dir, files)
        dest = os.path.join(base_dir, "proto", PROTO_REL)
        os.makedirs(os.path.dirname(dest), exist_ok=True)
        shutil.copyfile(os.path.join(_proto_root(), PROTO_REL), dest)


setup(cmdclass={"build_py": BuildWithStubs, "sdist": SdistWithProto})
