"""The fixtures of tests/python/conftest.py (a real `scored` daemon on 127.0.0.1:0, its client), loaded under
another module name so that this folder's tests share them."""
import importlib.util
import os
import sys

_PYTHON_TESTS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "python")
_spec = importlib.util.spec_from_file_location("scored_python_conftest", os.path.join(_PYTHON_TESTS, "conftest.py"))
_shared = importlib.util.module_from_spec(_spec)
sys.modules["scored_python_conftest"] = _shared
_spec.loader.exec_module(_shared)

REPO = _shared.REPO
BUILD = _shared.BUILD
stories_dir = _shared.stories_dir
daemon = _shared.daemon
client = _shared.client
