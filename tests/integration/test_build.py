"""`cordon template build`: recipes into cached layers, layers into templates.

Every build here runs its RUN steps in real jails over real overlays, in a temporary store
($CORDON_TEMPLATES). The fast recipes are made of the host's static busybox (Debian's
busybox-static) and need no network; one test builds `FROM debian:bookworm` with a package
install through Debian's registry (the host's apt sources), as the issue asks, and takes
about a minute. Needs root (build steps get a uid range of their own); skips otherwise.
"""

import json
import os
import shutil
import subprocess
import threading
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")
BUSYBOX = "/bin/busybox"

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (build steps get a uid range of their own)"),
    pytest.mark.skipif(not os.path.isfile(BUSYBOX), reason="needs /bin/busybox (busybox-static)"),
]

TINY = """\
# a tiny template
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
ARG FLAVOUR=plain
ENV GREETING="hello world"
RUN echo "$GREETING $FLAVOUR" > /greeting && mkdir -p /srv /home && echo ok > /srv/index.html \\
 && chmod 0600 /greeting
WORKDIR /srv
COPY --chown=user:user data/ /srv/data/
START httpd -f -p 8080 -h /srv
READY wget -q -O /dev/null http://127.0.0.1:8080/index.html
"""


@pytest.fixture
def store(tmp_path, monkeypatch):
    d = tmp_path / "store"
    monkeypatch.setenv("CORDON_TEMPLATES", str(d))
    return d


@pytest.fixture
def ctx(tmp_path):
    c = tmp_path / "ctx"
    (c / "data" / "sub").mkdir(parents=True)
    shutil.copy(BUSYBOX, c / "busybox")
    (c / "data" / "a.txt").write_text("alpha\n")
    (c / "data" / "sub" / "b.txt").write_text("beta\n")
    os.symlink("/etc/shadow", c / "data" / "escape")  # copied as a link, never followed
    (c / "Cordonfile").write_text(TINY)
    return c


def build(name, ctx, *extra, recipe="Cordonfile", timeout=300, check=0):
    p = subprocess.run([CORDON, "template", "build", name, "-f", str(ctx / recipe), "--json", *extra],
                       capture_output=True, text=True, timeout=timeout)
    events = [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]
    if check is not None:
        assert p.returncode == check, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    return p, events


def run(template, script, *opts, timeout=60):
    return subprocess.run([CORDON, "run", "--template", template, *opts, "--", "/bin/sh", "-c", script],
                          capture_output=True, text=True, timeout=timeout)


def steps_done(events):
    return [e for e in events if e["event"] == "step_done"]


def leftovers(store):
    return sorted(n for n in os.listdir(store) if n.startswith(".tmp-") or n.startswith(".rm-"))


def test_tiny_build_runs_with_owners_env_workdir_and_start(store, ctx):
    p, events = build("tiny", ctx)
    kinds = [e["event"] for e in events]
    assert kinds.count("step") == 10 and kinds[-1] == "done", kinds
    assert not any(e["cached"] for e in steps_done(events))
    meta = json.loads(subprocess.run([CORDON, "template", "inspect", "tiny"], capture_output=True,
                                     text=True, check=True).stdout)
    assert meta["workdir"] == "/srv" and "GREETING=hello world" in meta["env"]
    assert meta["start"] == ["/bin/sh", "-c", "httpd -f -p 8080 -h /srv"]
    assert len(meta["layers"]) == 4 and len(meta["key"]) == 64
    # Owners as the recipe made them, seen from inside: root's file is root's, mode kept.
    r = run("tiny", "stat -c '%u %g %a %n' /greeting /bin/busybox /srv/data/a.txt /srv/data/sub; "
                    "readlink /srv/data/escape; cat /srv/data/a.txt; pwd; echo $GREETING; "
                    "wget -q -O - http://127.0.0.1:8080/index.html; ps -o comm", "--user", "root")
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "0 0 600 /greeting"
    assert lines[1] == "0 0 755 /bin/busybox"
    assert lines[2] == "1000 1000 644 /srv/data/a.txt"
    assert lines[3] == "1000 1000 755 /srv/data/sub"
    assert lines[4] == "/etc/shadow" and lines[5] == "alpha"
    assert lines[6:9] == ["/srv", "hello world", "ok"]
    assert "httpd" in lines[9:], lines  # START is up, READY passed before the command ran
    # As "user" the root-only file stays root's.
    r = run("tiny", "cat /greeting")
    assert r.returncode != 0 and "Permission denied" in r.stderr
    assert leftovers(store) == []


def test_rebuild_is_cached_and_a_changed_file_invalidates_from_its_step(store, ctx):
    build("tiny", ctx)
    t0 = time.monotonic()
    _, events = build("tiny", ctx)
    assert time.monotonic() - t0 < 5
    assert all(e["cached"] for e in steps_done(events) if e["step"] in (2, 3, 6, 8))
    assert events[-1]["up_to_date"] is True
    (ctx / "data" / "a.txt").write_text("changed\n")
    _, events = build("tiny", ctx)
    cached = {e["step"]: e["cached"] for e in steps_done(events)}
    assert cached[2] and cached[3] and cached[6] and not cached[8], cached
    assert run("tiny", "cat /srv/data/a.txt").stdout == "changed\n"
    # --build-arg changes the environment of the RUN after it: that step runs again.
    _, events = build("tiny", ctx, "--build-arg", "FLAVOUR=spicy")
    cached = {e["step"]: e["cached"] for e in steps_done(events)}
    assert cached[3] and not cached[6]
    assert run("tiny", "cat /greeting", "--user", "root").stdout == "hello world spicy\n"
    _, events = build("tiny", ctx, "--no-cache")
    assert not any(e["cached"] for e in steps_done(events))


def test_deletions_and_user_steps_in_later_layers(store, ctx):
    build("tiny", ctx)
    (ctx / "Later").write_text(
        "FROM tiny\n"
        "RUN rm -rf /srv/data/sub /greeting && echo new > /srv/new && mkdir -m 1777 /scratch\n"
        "USER user\n"
        "RUN touch /scratch/mine && id -u > /scratch/who\n")
    build("later", ctx, recipe="Later")
    r = run("later", "ls /srv/data; stat -c %u /scratch/mine; cat /scratch/who; ls /greeting",
            "--user", "root")
    out = r.stdout.splitlines()
    assert out[:2] == ["a.txt", "escape"] and out[2:4] == ["1000", "1000"], r.stdout
    assert "No such file" in r.stderr
    meta = json.loads(subprocess.run([CORDON, "template", "inspect", "later"], capture_output=True,
                                     text=True, check=True).stdout)
    assert meta["user"] == "user"
    assert run("later", "id -u").stdout == "1000\n"  # the template's USER is the default


def test_failing_step_names_its_line_and_leaves_nothing(store, ctx):
    build("tiny", ctx)
    (ctx / "Bad").write_text("FROM tiny\nRUN echo before\nRUN echo oops >&2; exit 3\n")
    p, events = build("bad", ctx, recipe="Bad", check=1)
    assert "line 3" in p.stderr and "exited with status 3" in p.stderr, p.stderr
    assert any(e["event"] == "log" and "oops" in e["data"] for e in events)
    assert events[-1]["event"] == "error"
    assert not (store / "bad").exists() and leftovers(store) == []
    (ctx / "Bad").write_text("FROM tiny\n\nCMD [\"sh\"]\n")
    p, _ = build("bad", ctx, recipe="Bad", check=1)
    assert "line 3" in p.stderr and "CMD" in p.stderr and "not supported" in p.stderr
    assert not (store / "bad").exists()


@pytest.mark.parametrize("recipe, message", [
    ("FROM scratch\nCOPY ../outside /x\n", "source"),
    ("FROM scratch\nCOPY /../../etc/passwd /x\n", "source"),
    ("FROM scratch\nCOPY data/escape/../../x /x\n", "source"),
    ("FROM scratch\nCOPY .. /x\n", "source"),
    ("FROM scratch\nCOPY data/.. /x\nCOPY ../ctx /y\n", "source"),
    ("FROM oci-archive:/dev/zero\n", "not a regular file"),
    ("FROM nosuchtemplate\n", "not a template"),
    ("FROM scratch\nADD http://example.com/x /x\n", "URL"),
    ("FROM debian:sid-weird\n", "debian:"),
])
def test_hostile_or_bad_recipes_are_refused(store, ctx, tmp_path, recipe, message):
    (tmp_path / "outside").write_text("secret\n")
    (ctx / "Hostile").write_text(recipe)
    p, _ = build("hostile", ctx, recipe="Hostile", check=1)
    assert message in p.stderr, p.stderr
    assert not (store / "hostile").exists()


def test_copy_destination_resolves_inside_the_template(store, ctx, tmp_path):
    # A symlink in the template pointing at / on the host must not send COPY there.
    (ctx / "Links").write_text(
        "FROM scratch\nCOPY busybox /bin/busybox\nRUN [\"/bin/busybox\", \"ln\", \"-s\", \"/\", \"/up\"]\n"
        f"COPY data/a.txt /up{tmp_path}/planted\n")
    build("links", ctx, recipe="Links")
    assert not (tmp_path / "planted").exists()
    root = store / "links" / "rootfs"
    assert (root / tmp_path.relative_to("/") / "planted").read_text() == "alpha\n"


def test_concurrent_builds_of_one_template_leave_one_good_template(store, ctx):
    results = []

    def one():
        results.append(build("tiny", ctx, "--no-cache", check=None)[0].returncode)

    threads = [threading.Thread(target=one) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == [0, 0, 0], results
    r = run("tiny", "cat /srv/index.html")
    assert r.returncode == 0 and r.stdout == "ok\n"
    assert leftovers(store) == []


def test_gc_keeps_used_layers_and_drops_the_rest(store, ctx):
    build("tiny", ctx)
    (ctx / "Extra").write_text("FROM tiny\nRUN echo extra > /extra\n")
    build("extra", ctx, recipe="Extra")
    layers = store / ".layers"
    before = set(os.listdir(layers))
    assert subprocess.run([CORDON, "template", "gc"], capture_output=True, text=True).stdout.startswith("removed 0 layers")
    assert set(os.listdir(layers)) == before
    subprocess.run([CORDON, "template", "rm", "extra"], check=True)
    out = subprocess.run([CORDON, "template", "gc"], capture_output=True, text=True, check=True).stdout
    assert out.startswith("removed 1 layers"), out
    assert len(os.listdir(layers)) == len(before) - 1
    assert run("tiny", "cat /srv/index.html").stdout == "ok\n"


def _debian_reachable():
    return shutil.which("debootstrap") is not None


@pytest.mark.skipif(not _debian_reachable(), reason="needs debootstrap (make deps installs it)")
def test_debian_bookworm_with_a_package(store, ctx):
    (ctx / "Deb").write_text(
        "FROM debian:bookworm\n"
        "RUN apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends jq"
        " && rm -rf /var/lib/apt/lists/*\n"
        "READY jq --version\n")
    p, events = build("deb", ctx, recipe="Deb", timeout=900)
    assert any(e["event"] == "log" and "Get:" in e["data"] for e in events)
    r = run("deb", "jq -n '1+1'; stat -c '%u %g %a' /etc/shadow /usr/bin/jq; cat /etc/debian_version")
    assert r.returncode == 0, r.stderr
    out = r.stdout.splitlines()
    assert out[0] == "2" and out[1] == "0 42 640" and out[2] == "0 0 755" and out[3].startswith("12.")
    # The build's network reached only the registry: a RUN that tries elsewhere fails.
    (ctx / "Deb2").write_text("FROM deb\nRUN apt-get update\nRUN getent hosts example.com || exit 0; exit 9\n")
    p, _ = build("deb2", ctx, recipe="Deb2", timeout=300)


def test_from_oci_archive_and_slim_recipes_share_the_cache(store, ctx, tmp_path):
    from test_templates import busybox_layer, write_oci_layout
    archive = tmp_path / "image.tar"
    write_oci_layout(str(archive), [busybox_layer()])
    (ctx / "Oci").write_text(f"FROM oci-archive:{archive}\nRUN echo from-oci > /marker\n")
    _, events = build("fromoci", ctx, recipe="Oci")
    assert not steps_done(events)[0]["cached"]
    r = run("fromoci", "cat /marker; stat -c %u /bin/busybox", "--user", "root")
    assert r.stdout.splitlines() == ["from-oci", "0"], r.stderr
    # The archive's layer is cached by the archive's digest: a second recipe reuses it.
    (ctx / "Oci2").write_text(f"FROM oci-archive:{archive}\nRUN echo other > /marker\n")
    _, events = build("fromoci2", ctx, recipe="Oci2")
    assert steps_done(events)[0]["cached"]


def test_what_steps_leave_is_kept_faithfully_and_cheaply(store, ctx):
    build("tiny", ctx)
    (ctx / "root" / "bin").mkdir(parents=True)
    (ctx / "root" / "bin" / "tool").write_text("#!/bin/sh\necho tool\n")
    (ctx / "Faithful").write_text(
        "FROM tiny\n"
        # a terabyte-sized sparse file costs the store nothing
        "RUN truncate -s 1099511627776 /big && mkdir /sg && chmod 2775 /sg\n"
        # output that is not UTF-8 reaches the log as U+FFFD, the build goes on
        "RUN printf 'bad \\377\\376 bytes\\n'\n"
        # a usrmerged layout: COPY into /bin goes through the symlink, as in Docker
        "RUN mkdir -p /usr/bin && mv /bin/busybox /usr/bin/ && rm -rf /bin && ln -s usr/bin /bin"
        " && /usr/bin/busybox --install -s /usr/bin\n"
        "COPY root/ /\n"
        "ARG V=1\n"
        "ENV VERSION=$V\n")
    _, events = build("faithful", ctx, recipe="Faithful")
    logs = "".join(e["data"] for e in events if e["event"] == "log")
    assert "bad \ufffd\ufffd bytes" in logs, logs
    root = store / "faithful" / "rootfs"
    big = os.stat(root / "big")
    assert big.st_size == 1 << 40 and big.st_blocks * 512 < (1 << 20), big
    assert oct(os.stat(root / "sg").st_mode & 0o7777) == "0o2775"
    assert os.path.islink(root / "bin") and (root / "usr" / "bin" / "tool").is_file()
    meta = json.loads(subprocess.run([CORDON, "template", "inspect", "faithful"], capture_output=True,
                                     text=True, check=True).stdout)
    assert "VERSION=1" in meta["env"]
    # A build argument used only by the last ENV still changes the template.
    build("faithful", ctx, "--build-arg", "V=2", recipe="Faithful")
    meta = json.loads(subprocess.run([CORDON, "template", "inspect", "faithful"], capture_output=True,
                                     text=True, check=True).stdout)
    assert "VERSION=2" in meta["env"]


def test_a_killed_build_leaves_nothing_once_the_next_one_ran(store, ctx):
    from conftest import cordon_cgroup_dirs, wait_until
    build("tiny", ctx)
    (ctx / "Slow").write_text("FROM tiny\nRUN echo started; sleep 60\n")
    before = cordon_cgroup_dirs()
    p = subprocess.Popen([CORDON, "template", "build", "slow", "-f", str(ctx / "Slow"), "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        for line in p.stdout:  # until the step runs in its jail
            if '"started' in line:
                break
        os.kill(p.pid, 9)
    finally:
        p.wait(30)
    # The jail dies with its builder (parent-death signal), its proxy with its control socket.
    assert wait_until(lambda: subprocess.run(["pgrep", "-f", "sleep 60"], capture_output=True).returncode != 0, 10)
    build("tiny", ctx)  # the next build sweeps what the killed one left
    assert leftovers(store) == []
    assert cordon_cgroup_dirs() <= before
    assert not (store / "slow").exists()
