"""Fixtures for tests/storage: `cordon run` on disks of the scratch's other backends.

The `cordon` fixtures are tests/integration's (loaded from there by path, not copied)."""

import importlib.util
import os

_spec = importlib.util.spec_from_file_location(
    "integration_conftest",
    os.path.join(os.path.dirname(__file__), "..", "integration", "conftest.py"))
_ic = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_ic)

cordon_bin = _ic.cordon_bin
cordon = _ic.cordon
requires_root = _ic.requires_root
wait_until = _ic.wait_until
