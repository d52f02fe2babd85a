"""The check behind the console scripts of the extras (a leaf module: it imports nothing of scored_client, so
the scripts and the commands they start can both use it)."""
import importlib.util
import sys

DISTRIBUTION = "scored-client"


def require(script: str, module: str, extra: str) -> None:
    """Exits 1 naming `pip install 'scored-client[extra]'` when `module` cannot be imported."""
    if importlib.util.find_spec(module) is None:
        sys.stderr.write(f"{script}: needs the '{extra}' extra ({module} is not installed): "
                         f"pip install '{DISTRIBUTION}[{extra}]'\n")
        sys.exit(1)
