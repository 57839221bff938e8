"""E2B's code interpreter SDK (npm `@e2b/code-interpreter`, pinned in package.json and
package-lock.json beside `e2b`) against a real cordond serving --e2b-listen on loopback, with a
real `code-interpreter` template (recipes/code-interpreter): code.test.mjs under node --test.

Run with Debian's pytest:  /usr/bin/python3 -m pytest tests/e2b/test_e2b_code.py
The template is built once into a temporary store (Debian's mirror, a few minutes; skipped
with the reason when it cannot be reached); CORDON_TEST_CODE_STORE=DIR reuses a store built
before (as tests/daemon/test_code.py does). `npm ci` as test_e2b.py runs it.
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from test_e2b import BUILD, HERE, REPO, pytestmark, sdk, sdk_env, start_cordond, stop_cordond  # noqa: F401

CORDON = os.path.join(BUILD, "cordon")
RECIPE = os.path.join(REPO, "recipes", "code-interpreter")


def mirror_unreachable():
    sys.path.insert(0, os.path.join(REPO, "tests", "daemon"))
    try:
        from test_code import mirror_unreachable as why
    finally:
        sys.path.pop(0)
    return why()


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
def store():
    keep = os.environ.get("CORDON_TEST_CODE_STORE")
    d = keep or tempfile.mkdtemp(prefix="cordon-e2b-code-store-")
    env = dict(os.environ, CORDON_TEMPLATES=d)
    have = subprocess.run([CORDON, "template", "inspect", "code-interpreter"], env=env,
                          capture_output=True, timeout=60).returncode == 0
    if not have:
        why = mirror_unreachable()
        if why:
            pytest.skip(f"the code-interpreter template cannot be built: {why}")
        p = subprocess.run([CORDON, "template", "build", "code-interpreter", "-f",
                            os.path.join(RECIPE, "Cordonfile"), "--context", RECIPE],
                           env=env, capture_output=True, text=True, timeout=1800)
        assert p.returncode == 0, f"the build failed:\n{p.stdout[-3000:]}\n{p.stderr[-3000:]}"
    yield d
    if not keep:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def cordond(store):
    d = tempfile.mkdtemp(prefix="cordon-e2b-code-")
    p, info = start_cordond(d, env=dict(os.environ, CORDON_TEMPLATES=store))
    yield info
    stop_cordond(p, d)


def test_code_interpreter_sdk(code_sdk, cordond):
    r = subprocess.run(["node", "--test", "--test-reporter=spec", "code.test.mjs"], cwd=code_sdk,
                       env=sdk_env(cordond), capture_output=True, text=True, timeout=900)
    print(r.stdout[-20000:])
    print(r.stderr[-5000:])
    if r.returncode != 0:
        log = open(os.path.join(cordond["dir"], "cordond.log")).read()
        pytest.fail(f"the E2B code interpreter suite failed (rc {r.returncode}); cordond's log:\n{log[-3000:]}")
