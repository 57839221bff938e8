"""E2B's code interpreter SDK (npm `@e2b/code-interpreter`, pinned in package.json and
package-lock.json beside `e2b`) against a real cordond serving --e2b-listen on loopback, with a
real `code-interpreter` template (recipes/code-interpreter): code.test.mjs under node --test.

Run with Debian's pytest:  /usr/bin/python3 -m pytest tests/e2b/test_e2b_code.py
The template comes from tests/daemon/test_code.py's `store` fixture: built once into a
temporary store (Debian's mirror, a few minutes; skipped with the reason when it cannot be
reached), or CORDON_TEST_CODE_STORE=DIR reuses a store built before. `npm ci` as test_e2b.py runs it.
"""

import json
import os
import sys
import tempfile

import pytest

from test_e2b import HERE, REPO, pytestmark, run_node_suite, sdk, start_cordond, stop_cordond  # noqa: F401

sys.path.insert(0, os.path.join(REPO, "tests", "daemon"))
from test_code import server_fresh, store  # noqa: E402,F401  (the template, built or reused)

sys.path.pop(0)


@pytest.fixture(scope="module")
def code_sdk(sdk):
    with open(os.path.join(HERE, "package.json")) as f:
        pinned = json.load(f)["dependencies"]["@e2b/code-interpreter"]
    try:
        with open(os.path.join(HERE, "node_modules", "@e2b", "code-interpreter", "package.json")) as f:
            have = json.load(f)["version"]
    except (OSError, ValueError, KeyError):
        have = None
    if have != pinned:
        pytest.skip(f"@e2b/code-interpreter {pinned} could not be installed from the npm registry")
    return sdk


@pytest.fixture(scope="module")
def cordond(store):
    d = tempfile.mkdtemp(prefix="cordon-e2b-code-")
    p, info = start_cordond(d, env=dict(os.environ, CORDON_TEMPLATES=store))
    yield info
    stop_cordond(p, d)


def test_code_interpreter_sdk(code_sdk, cordond, store):
    env = {"CORDON_CODE_SERVER_FRESH": "1" if server_fresh(store) else "0"}
    run_node_suite(code_sdk, cordond, "code.test.mjs", timeout=900, env=env)
