"""Programs that agents run work unmodified inside `cordon run` with the default options."""

import hashlib
import os
import shutil

import pytest

from conftest import requires_tool

SH = "/bin/sh"
PY = "/usr/bin/python3"


def ok(r):
    assert r.returncode == 0, r.describe()
    return r.out


def test_coreutils_pipeline(cordon):
    out = ok(cordon.run([SH, "-c", "seq 1 10000 | sort -rn | head -n 3 | tr '\\n' ' '; echo;"
                                   " seq 1 1000 | awk '{s+=$1} END {print s}';"
                                   " printf 'abc' | sha256sum | cut -d' ' -f1;"
                                   " mkdir -p /tmp/d/e && echo z > /tmp/d/e/f && find /tmp/d -type f | xargs cat;"
                                   " ls /usr/bin | grep -c . >/dev/null && echo listed"]))
    assert out.splitlines() == [
        "10000 9999 9998 ",
        "500500",
        hashlib.sha256(b"abc").hexdigest(),
        "z",
        "listed",
    ]


def test_python_threads(cordon):
    code = ("import concurrent.futures as cf, threading\n"
            "with cf.ThreadPoolExecutor(8) as ex:\n"
            "    print(sum(ex.map(lambda i: i * i, range(1000))))\n"
            "print(threading.active_count())\n")
    assert ok(cordon.run([PY, "-c", code])) == f"{sum(i * i for i in range(1000))}\n1\n"


def test_python_multiprocessing_pool(cordon):
    code = ("import multiprocessing as mp\n"
            "def f(x):\n    return x * x\n"
            "if __name__ == '__main__':\n"
            "    with mp.Pool(4) as p:\n        print(sum(p.map(f, range(100))))\n"
            "    q = mp.Queue(); l = mp.Lock()\n"
            "    pr = mp.Process(target=q.put, args=(42,)); pr.start(); print(q.get()); pr.join()\n")
    r = cordon.run([PY, "-c", code], timeout=60)
    assert ok(r) == f"{sum(x * x for x in range(100))}\n42\n"


def test_python_subprocess(cordon):
    code = ("import subprocess\n"
            "print(subprocess.run(['echo', 'child'], capture_output=True, text=True).stdout, end='')\n"
            "print(subprocess.check_output('echo $((6*7))', shell=True, text=True), end='')\n")
    assert ok(cordon.run([PY, "-c", code])) == "child\n42\n"


def test_python_venv(cordon):
    r = cordon.run([SH, "-c", "/usr/bin/python3 -m venv /tmp/v && /tmp/v/bin/python -c "
                              "'import sys; print(sys.prefix, sys.prefix != sys.base_prefix)'"],
                   timeout=120)
    assert ok(r).splitlines()[-1] == "/tmp/v True", r.describe()


def test_python_tempfile_and_home(cordon):
    code = ("import tempfile, os, pathlib\n"
            "with tempfile.NamedTemporaryFile() as f: print(os.path.dirname(f.name))\n"
            "p = pathlib.Path.home() / '.cache' / 'x'; p.parent.mkdir(parents=True); p.write_text('y')\n"
            "print(p.read_text())\n")
    assert ok(cordon.run([PY, "-c", code])) == "/tmp\ny\n"


HELLO_C = r'''#include <stdio.h>
int main(void) { printf("hello from cc %d\n", 6 * 7); return 0; }
'''


@requires_tool("cc")
def test_cc_compile_and_run(cordon):
    script = f"cat > /tmp/h.c <<'EOF'\n{HELLO_C}EOF\ncc -O1 -o /tmp/h /tmp/h.c && /tmp/h"
    r = cordon.run([SH, "-c", script], timeout=120)
    assert ok(r) == "hello from cc 42\n"


@requires_tool("make")
def test_make(cordon):
    makefile = "all: out.txt\n\nout.txt: in.txt\n\tcat in.txt in.txt > out.txt\n\nclean:\n\trm -f out.txt\n"
    script = (f"mkdir /tmp/proj && cd /tmp/proj && printf '%s' '{makefile}' > Makefile && echo ab > in.txt"
              " && make -s && cat out.txt && make -s && echo second-run-ok")
    r = cordon.run([SH, "-c", script], timeout=120)
    assert ok(r) == "ab\nab\nsecond-run-ok\n", r.describe()


@requires_tool("git")
def test_git_init_and_commit(cordon):
    script = ("set -e; git init -q /tmp/r; cd /tmp/r; echo x > f; git add f;"
              " git -c user.name=Agent -c user.email=agent@example.invalid commit -qm first;"
              " git log --format='%an %s'; git status --porcelain | wc -l")
    r = cordon.run([SH, "-c", script], timeout=60)
    assert ok(r) == "Agent first\n0\n", r.describe()


@requires_tool("git")
def test_git_identity_via_env(cordon):
    script = "set -e; git init -q /tmp/r; cd /tmp/r; git commit -q --allow-empty -m e; git log --format='%an <%ae>'"
    r = cordon.run([SH, "-c", script], opts=["--env", "GIT_AUTHOR_NAME=A", "--env", "GIT_AUTHOR_EMAIL=a@b.invalid",
                                             "--env", "GIT_COMMITTER_NAME=A", "--env", "GIT_COMMITTER_EMAIL=a@b.invalid"])
    assert ok(r) == "A <a@b.invalid>\n"


@requires_tool("node")
def test_node(cordon):
    node = shutil.which("node")
    if not node.startswith("/usr/") and not node.startswith("/bin/"):
        pytest.skip(f"node at {node} is outside the host template's /usr and /bin")
    r = cordon.run([node, "-e", "console.log([1,2,3].map(x => x * 2).join(','));"
                                "require('fs').writeFileSync('/tmp/n', 'ok'); console.log(require('fs').readFileSync('/tmp/n', 'utf8'))"],
                   timeout=60)
    assert ok(r) == "2,4,6\nok\n"


def test_ca_certificates_usable(cordon):
    if not os.path.exists("/etc/ssl/certs/ca-certificates.crt"):
        pytest.skip("no CA bundle on the host")
    code = ("import ssl\nc = ssl.create_default_context()\n"
            "print(len(c.get_ca_certs()) > 10 or c.cert_store_stats()['x509_ca'] > 10)\n")
    assert ok(cordon.run([PY, "-c", code])) == "True\n"
