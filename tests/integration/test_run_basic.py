"""`cordon run`: exit statuses, stdio, options and what the default `host` sandbox looks like."""

import os
import shutil
import socket
import subprocess
import uuid

import pytest

from conftest import (EXIT_NOEXEC, EXIT_NOTFOUND, EXIT_SETUP, EXIT_TIMEOUT, EXIT_USAGE, IS_ROOT,
                      JSON_FIELDS)

SH = "/bin/sh"
PY = "/usr/bin/python3"

# Prints the errno name of creating a file at argv[1] (or OK).
PY_TRY_CREATE = r"""
import errno, os, sys
for p in sys.argv[1:]:
    try:
        with open(p, "w") as f:
            f.write("x")
        with open(p) as f:
            assert f.read() == "x"
        print(p, "OK")
    except OSError as e:
        print(p, errno.errorcode[e.errno])
"""


# ---------------------------------------------------------------------------------------------
# Exit statuses


@pytest.mark.parametrize("code", [0, 3, 255])
def test_exit_code_passthrough(cordon, code):
    r = cordon.run([SH, "-c", f"exit {code}"])
    assert r.returncode == code, r.describe()


@pytest.mark.parametrize("sig,name", [(15, "TERM"), (9, "KILL"), (1, "HUP")])
def test_signal_death_is_128_plus_n(cordon, sig, name):
    r = cordon.run([SH, "-c", f"kill -{name} $$"], json_result=True)
    assert r.returncode == 128 + sig, r.describe()
    assert r.result["signal"] == sig, r.describe()


@pytest.mark.parametrize("cmd", [["no-such-command-cordon-test"], ["/no/such/dir/cmd"]])
def test_command_not_found_is_127(cordon, cmd):
    r = cordon.run(cmd)
    assert r.returncode == EXIT_NOTFOUND, r.describe()


@pytest.mark.parametrize("cmd", [["/etc/passwd"], ["/etc"]])
def test_command_not_executable_is_126(cordon, cmd):
    r = cordon.run(cmd)
    assert r.returncode == EXIT_NOEXEC, r.describe()


def test_timeout_parses_milliseconds(cordon):
    r = cordon.run(["sleep", "10"], opts=["--timeout", "500ms"], json_result=True, timeout=30)
    assert r.returncode == EXIT_TIMEOUT, r.describe()
    assert r.elapsed < 3, r.describe()
    assert r.result["timed_out"] is True, r.describe()


# ---------------------------------------------------------------------------------------------
# stdio


def test_stdout_binary_all_bytes(cordon):
    data = bytes(range(256)) * 64 + b"\0\r\n\xff"
    r = cordon.run(["cat"], input=data)
    assert r.returncode == 0, r.describe()
    assert r.stdout == data


def test_stdin_to_stdout_1mib(cordon):
    data = os.urandom(1 << 20)
    r = cordon.run(["cat"], input=data)
    assert r.returncode == 0, r.describe()
    assert len(r.stdout) == len(data)
    assert r.stdout == data


def test_stdin_to_stderr_1mib(cordon):
    data = os.urandom(1 << 20)
    r = cordon.run([SH, "-c", "cat >&2"], input=data)
    assert r.returncode == 0, r.describe()
    assert r.stdout == b""
    assert r.stderr.endswith(data), f"stderr has {len(r.stderr)} bytes, expected {len(data)}"
    assert len(r.stderr) - len(data) <= (0 if IS_ROOT else 200), r.stderr[:300]


def test_stdout_and_stderr_are_separate(cordon):
    r = cordon.run([SH, "-c", "echo out; echo err >&2; echo out2"])
    assert r.returncode == 0, r.describe()
    assert r.stdout == b"out\nout2\n"
    assert r.err_lines() == ["err"], r.describe()


def test_stdin_eof(cordon):
    r = cordon.run(["wc", "-c"], input=b"")
    assert r.returncode == 0, r.describe()
    assert r.stdout.strip() == b"0"


def test_no_output_from_cordon_on_success(cordon):
    r = cordon.run(["/bin/true"])
    assert r.returncode == 0, r.describe()
    assert r.stdout == b""
    assert r.err_lines() == [], r.describe()


# ---------------------------------------------------------------------------------------------
# Usage errors and bad option values


@pytest.mark.parametrize("args", [
    [],
    ["run"],
    ["run", "--"],
    ["no-such-subcommand"],
    ["run", "--no-such-option", "--", "/bin/true"],
    ["run", "--memory"],
])
def test_usage_errors_are_2(cordon, args):
    r = cordon.raw(args)
    assert r.returncode == EXIT_USAGE, r.describe()
    assert r.err.strip(), "a usage error must say what is wrong\n" + r.describe()


def assert_one_clear_line(r, mentions, codes=(EXIT_USAGE,)):
    assert r.returncode in codes, r.describe()
    assert b"RAN" not in r.stdout, "the command ran despite a bad option\n" + r.describe()
    lines = r.err_lines()
    assert len(lines) == 1, "expected exactly one line on stderr\n" + r.describe()
    assert lines[0].startswith("cordon"), r.describe()
    assert any(m in lines[0] for m in mentions), \
        f"the message should name the problem (one of {mentions})\n" + r.describe()


@pytest.mark.parametrize("opt,value", [
    ("--memory", "lots"),
    ("--memory", "-1M"),
    ("--disk", "12Q"),
    ("--cpus", "many"),
    ("--cpus", "-1"),
    ("--pids", "abc"),
    ("--timeout", "forever"),
    ("--user", "admin"),
    ("--net", "host-wide-open"),
    ("--json-result", "notanfd"),
    ("--env", "NOEQUALSSIGN"),
])
def test_bad_option_values(cordon, opt, value):
    r = cordon.raw(["run", opt, value, "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, [opt, value, opt.lstrip("-")])


BIND_CODES = (EXIT_USAGE, EXIT_SETUP)


def test_ro_bind_relative_host_path_refused(cordon):
    r = cordon.raw(["run", "--ro-bind", "relative:x", "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, ["relative", "--ro-bind", "absolute"], BIND_CODES)


def test_ro_bind_relative_sandbox_path_refused(cordon, tmp_path):
    r = cordon.raw(["run", "--ro-bind", f"{tmp_path}:data", "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, ["data", "--ro-bind", "absolute"], BIND_CODES)


def test_ro_bind_missing_colon_refused(cordon, tmp_path):
    r = cordon.raw(["run", "--ro-bind", str(tmp_path), "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, [str(tmp_path), "--ro-bind"], BIND_CODES)


def test_ro_bind_device_refused(cordon):
    r = cordon.raw(["run", "--ro-bind", "/dev/null:/x", "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, ["/dev/null", "device"], BIND_CODES)


def test_ro_bind_socket_refused(cordon, tmp_path):
    path = str(tmp_path / "s.sock")
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(path)
    s.listen(1)
    try:
        r = cordon.raw(["run", "--ro-bind", f"{path}:/s.sock", "--", SH, "-c", "echo RAN"])
        assert_one_clear_line(r, [path, "socket"], BIND_CODES)
    finally:
        s.close()


def test_ro_bind_symlink_to_device_refused(cordon, tmp_path):
    link = tmp_path / "innocent"
    os.symlink("/dev/zero", link)
    r = cordon.raw(["run", "--ro-bind", f"{link}:/x", "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, [str(link), "device", "/dev/zero"], BIND_CODES)


@pytest.mark.parametrize("target", ["/../../../tmp/{tag}", "/usr/../../../tmp/{tag}", "/a/../../{tag}"])
def test_ro_bind_dotdot_sandbox_path_refused(cordon, tmp_path, target):
    tag = "escape-" + uuid.uuid4().hex[:10]
    target = target.format(tag=tag)
    src = tmp_path / "src"
    src.mkdir()
    r = cordon.raw(["run", "--ro-bind", f"{src}:{target}", "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, [target, "..", "--ro-bind"], BIND_CODES)
    assert not os.path.exists(f"/tmp/{tag}"), "a host path was created by a hostile bind target"
    assert not os.path.exists(f"/{tag}"), "a host path was created by a hostile bind target"


def test_ro_bind_missing_host_path_refused(cordon, tmp_path):
    missing = str(tmp_path / "does-not-exist")
    r = cordon.raw(["run", "--ro-bind", f"{missing}:/data", "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, [missing, "No such file"], BIND_CODES)


def test_rootfs_missing_dir_refused(cordon, tmp_path):
    missing = str(tmp_path / "no-rootfs")
    r = cordon.raw(["run", "--rootfs", missing, "--", SH, "-c", "echo RAN"])
    assert_one_clear_line(r, [missing, "rootfs"], (EXIT_USAGE, EXIT_SETUP))


# ---------------------------------------------------------------------------------------------
# Options that work


def test_ro_bind_dir_is_readable_not_writable(cordon, tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    (src / "f.txt").write_text("hello from host\n")
    r = cordon.run([PY, "-c", "import sys; print(open('/data/f.txt').read(), end='')\n" + PY_TRY_CREATE,
                    "/data/new"],
                   opts=["--ro-bind", f"{src}:/data", "--user", "root"])
    assert r.returncode == 0, r.describe()
    assert r.out == "hello from host\n/data/new EROFS\n", r.describe()
    assert not (src / "new").exists()


def test_ro_bind_file(cordon, tmp_path):
    src = tmp_path / "script.sh"
    src.write_text("echo bound-script-ran\n")
    r = cordon.run([SH, "/opt/script.sh"], opts=["--ro-bind", f"{src}:/opt/script.sh"])
    assert r.returncode == 0, r.describe()
    assert r.out == "bound-script-ran\n"


def test_env_passed_and_host_env_not_leaked(cordon):
    canary = "cordon-canary-" + uuid.uuid4().hex
    env = dict(os.environ, CORDON_TEST_CANARY=canary, AWS_SECRET_ACCESS_KEY=canary)
    r = cordon.run(["/usr/bin/env"], opts=["--env", "FOO=bar", "--env", "EMPTY=", "--env", "X=a=b c"], env=env)
    assert r.returncode == 0, r.describe()
    assert canary not in r.out, "host environment leaked into the sandbox\n" + r.out
    got = dict(line.split("=", 1) for line in r.out.splitlines())
    assert got.get("FOO") == "bar"
    assert got.get("EMPTY") == ""
    assert got.get("X") == "a=b c"
    assert "PATH" in got and "HOME" in got, got
    extra = set(got) - {"PATH", "HOME", "LANG", "TERM", "FOO", "EMPTY", "X"}
    assert not extra, f"unexpected variables in the sandbox: {sorted(extra)}"


def test_home_and_workdir_defaults(cordon):
    r = cordon.run([SH, "-c", 'pwd; echo "$HOME"'])
    assert r.returncode == 0, r.describe()
    assert r.out == "/home/user\n/home/user\n", r.describe()
    r = cordon.run([SH, "-c", 'pwd; echo "$HOME"'], opts=["--user", "root"])
    assert r.returncode == 0, r.describe()
    assert r.out == "/root\n/root\n", r.describe()


def test_workdir(cordon):
    r = cordon.run(["pwd"], opts=["--workdir", "/tmp"])
    assert r.returncode == 0, r.describe()
    assert r.out == "/tmp\n"
    r = cordon.run(["pwd"], opts=["--workdir", "/usr/share"])
    assert r.returncode == 0, r.describe()
    assert r.out == "/usr/share\n"


def test_default_user_is_1000(cordon):
    r = cordon.run(["id"])
    assert r.returncode == 0, r.describe()
    r = cordon.run([SH, "-c", "id -u; id -g; id -un"])
    assert r.returncode == 0, r.describe()
    assert r.out == "1000\n1000\nuser\n", r.describe()


def test_user_root_is_0(cordon):
    r = cordon.run([SH, "-c", "id -u; id -g; id -un"], opts=["--user", "root"])
    assert r.returncode == 0, r.describe()
    assert r.out == "0\n0\nroot\n", r.describe()


def test_root_inside_has_the_sandbox_root_set_only(cordon):
    """Root holds CAPS_SANDBOX_ROOT (Docker's set less NET_RAW, MKNOD, AUDIT_WRITE) in its
    own user namespace, never more, none inheritable or ambient; "user" holds nothing."""
    want = {"root": 0x800405fb, "user": 0}
    for user in ("root", "user"):
        r = cordon.run([SH, "-c", "grep -E '^Cap(Eff|Prm|Bnd|Amb|Inh):' /proc/self/status; grep NoNewPrivs /proc/self/status"],
                       opts=["--user", user])
        assert r.returncode == 0, r.describe()
        caps = dict(line.split(":") for line in r.out.splitlines())
        for k in ("CapEff", "CapPrm"):
            assert int(caps[k].strip(), 16) == want[user], f"{user}: {k}: {r.out}"
        for k in ("CapAmb", "CapInh"):
            assert int(caps[k].strip(), 16) == 0, f"{user}: {k} is not empty inside: {r.out}"
        assert caps["NoNewPrivs"].strip() == "1", r.out


def test_etc_passwd_and_group(cordon):
    r = cordon.run(["cat", "/etc/passwd"])
    assert r.returncode == 0, r.describe()
    lines = r.out.splitlines()
    assert any(l.startswith("user:") and ":1000:1000:" in l and "/home/user:" in l for l in lines), r.out
    assert any(l.startswith("root:x:0:0:") for l in lines), r.out
    # A generated /etc: none of the host's other accounts.
    with open("/etc/passwd") as f:
        host_users = {l.split(":")[0] for l in f if l.strip()} - {"root", "user", "nobody"}
    leaked = {l.split(":")[0] for l in lines} & host_users
    assert not leaked, f"host accounts in the sandbox's /etc/passwd: {sorted(leaked)}"
    r = cordon.run(["cat", "/etc/group"])
    assert r.returncode == 0, r.describe()
    assert any(l.startswith("user:") and l.split(":")[2] == "1000" for l in r.out.splitlines()), r.out


def test_generated_etc_files_present(cordon):
    want = ["/etc/hosts", "/etc/resolv.conf", "/etc/hostname", "/etc/passwd", "/etc/group"]
    for p in ("/etc/ssl/certs/ca-certificates.crt", "/etc/ld.so.cache"):
        if os.path.exists(p):
            want.append(p)
    script = "for f in " + " ".join(want) + "; do test -s $f && echo $f; done; test -e /etc/shadow && echo shadow; echo done"
    r = cordon.run([SH, "-c", script])
    assert r.returncode == 0, r.describe()
    assert r.out == "\n".join(want) + "\ndone\n", r.describe()


def test_hostname_is_not_the_hosts(cordon):
    r = cordon.run(["uname", "-n"])
    assert r.returncode == 0, r.describe()
    name = r.out.strip()
    assert name and name != socket.gethostname(), f"hostname inside: {name!r}"


def test_net_none_has_only_loopback(cordon):
    code = ("import socket\n"
            "print(sorted(l.split(':')[0].strip() for l in open('/proc/net/dev').readlines()[2:]))\n"
            "s = socket.socket(); s.settimeout(2)\n"
            "try:\n    s.connect(('1.1.1.1', 53)); print('CONNECTED')\n"
            "except OSError as e:\n    print('refused')\n")
    for opts in ([], ["--net", "none"]):
        r = cordon.run([PY, "-c", code], opts=opts)
        assert r.returncode == 0, r.describe()
        assert r.out == "['lo']\nrefused\n", r.describe()


def test_json_result(cordon):
    r = cordon.run([SH, "-c", "echo hello; sleep 0.3; exit 7"], json_result=True)
    assert r.returncode == 7, r.describe()
    assert r.stdout == b"hello\n"
    j = r.result
    missing = [k for k in JSON_FIELDS if k not in j]
    assert not missing, f"missing fields {missing} in {j}"
    assert j["exit_code"] == 7
    assert j["signal"] == 0
    assert j["timed_out"] is False
    assert j["oom_killed"] is False
    assert isinstance(j["wall_ms"], int) and 300 <= j["wall_ms"] <= r.elapsed * 1000 + 50, j
    assert isinstance(j["cpu_ms"], int) and 0 <= j["cpu_ms"] <= j["wall_ms"] * 2, j
    assert isinstance(j["peak_memory_bytes"], int) and j["peak_memory_bytes"] >= 0, j


def test_json_result_reports_cpu_time(cordon):
    r = cordon.run([PY, "-c", "import time\nt=time.process_time()\nwhile time.process_time()-t < 0.5: pass"],
                   json_result=True)
    assert r.returncode == 0, r.describe()
    assert r.result["cpu_ms"] >= 400, r.result


# ---------------------------------------------------------------------------------------------
# Filesystem


def test_tiny_rootfs(cordon, busybox_rootfs):
    r = cordon.run(["/bin/sh", "-c", "echo hi"], opts=["--rootfs", str(busybox_rootfs)])
    assert r.returncode == 0, r.describe()
    assert r.out == "hi\n"


def test_tiny_rootfs_hides_host(cordon, busybox_rootfs):
    r = cordon.run(["/bin/sh", "-c", "for p in /usr/bin/python3 /etc/os-release /lib /home/user/.bashrc; do"
                                     " test -e $p && echo LEAK $p; done; echo done"],
                   opts=["--rootfs", str(busybox_rootfs)])
    assert r.returncode == 0, r.describe()
    assert r.out == "done\n", r.describe()


def test_tiny_rootfs_is_not_modified(cordon, busybox_rootfs):
    before = sorted(os.listdir(busybox_rootfs))
    r = cordon.run(["/bin/sh", "-c", "echo x > /bin/new; echo x > /tmp/new; rm -f /bin/busybox; echo done"],
                   opts=["--rootfs", str(busybox_rootfs), "--user", "root"])
    assert r.out.endswith("done\n"), r.describe()
    assert sorted(os.listdir(busybox_rootfs)) == before
    assert sorted(os.listdir(busybox_rootfs / "bin")) == ["busybox", "sh"]
    assert os.path.getsize(busybox_rootfs / "bin" / "busybox") > 100000


def test_rootfs_owners_are_kept_inside(cordon, busybox_rootfs):
    """As root, a --rootfs is shown through an idmapped mount: what host root owns is owned
    by the sandbox's root, what host uid 1000 owns by the sandbox's user, so a root-only file
    stays root-only inside (without it, every file would belong to nobody)."""
    if not IS_ROOT:
        pytest.skip("idmapped images need root")
    (busybox_rootfs / "etc").mkdir()
    secret = busybox_rootfs / "etc" / "owned"
    secret.write_text("secret\n")
    os.chmod(secret, 0o600)
    mine = busybox_rootfs / "home-data"
    mine.mkdir()
    os.chown(mine, 1000, 1000)
    script = "/bin/busybox stat -c '%u %g %a %n' /etc/owned /home-data; /bin/busybox cat /etc/owned"
    r = cordon.run(["/bin/sh", "-c", script], opts=["--rootfs", str(busybox_rootfs)])
    lines = r.out.splitlines()
    assert lines[:2] == ["0 0 600 /etc/owned", "1000 1000 755 /home-data"], r.describe()
    assert "secret" not in r.out and "Permission denied" in r.err, "uid 1000 read a root-only file"
    r = cordon.run(["/bin/busybox", "cat", "/etc/owned"], opts=["--rootfs", str(busybox_rootfs), "--user", "root"])
    assert r.out == "secret\n", r.describe()
    assert os.stat(secret).st_uid == 0 and os.stat(mine).st_uid == 1000, "the image was changed"


@pytest.mark.parametrize("user,home", [("user", "/home/user"), ("root", "/root")])
def test_usr_owned_tmp_and_home_writable(cordon, user, home):
    paths = ["/usr/cordon-x", "/usr/bin/cordon-x", "/etc/cordon-x", "/tmp/x", f"{home}/x"]
    r = cordon.run([PY, "-c", PY_TRY_CREATE] + paths, opts=["--user", user])
    assert r.returncode == 0, r.describe()
    got = dict(line.split() for line in r.out.splitlines())
    # As host root the image is a writable overlay on the sandbox's own disk: root inside
    # writes it, "user" is refused by the files' owner; unprivileged it stays read-only.
    want = ("OK" if user == "root" else "EACCES") if os.geteuid() == 0 else "EROFS"
    assert got["/usr/cordon-x"] == want, r.out
    assert got["/usr/bin/cordon-x"] == want, r.out
    assert got["/etc/cordon-x"] in ("EROFS", "EACCES"), r.out
    assert got["/tmp/x"] == "OK", r.out
    assert got[f"{home}/x"] == "OK", r.out
    assert not os.path.exists("/usr/cordon-x")


def test_command_starts_with_clean_signal_state(cordon):
    """cordon-init's blocked or ignored signals must not leak into the command."""
    r = cordon.run(["grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"])
    assert r.returncode == 0, r.describe()
    got = dict(l.split(":") for l in r.out.splitlines())
    assert int(got["SigBlk"], 16) == 0, f"signals blocked in the command: {got['SigBlk'].strip()}"
    assert int(got["SigIgn"], 16) == 0, f"signals ignored in the command: {got['SigIgn'].strip()}"


def test_tmp_is_empty_and_private(cordon):
    tag = "hostfile-" + uuid.uuid4().hex
    with open(f"/tmp/{tag}", "w") as f:
        f.write("host")
    try:
        r = cordon.run([SH, "-c", "ls -A /tmp; echo end; echo sb > /tmp/sbfile"])
        assert r.returncode == 0, r.describe()
        assert r.out == "end\n", "/tmp inside is not empty: " + r.out
        assert not os.path.exists("/tmp/sbfile")
        # And nothing written in one sandbox shows up in the next.
        r = cordon.run([SH, "-c", "ls -A /tmp /home/user; echo end"])
        assert "sbfile" not in r.out, r.describe()
    finally:
        os.unlink(f"/tmp/{tag}")


@pytest.fixture
def host_canaries():
    """Files in the host's /root, /home, /var and /run that a sandbox must never see."""
    tag = "cnry-" + uuid.uuid4().hex[:12]
    made = []
    for d in ("/root", "/home", "/var", "/run", "/var/tmp"):
        p = os.path.join(d, tag)
        try:
            with open(p, "w") as f:
                f.write("secret")
            made.append(p)
        except OSError:
            pass
    if not made:
        pytest.skip("cannot write canaries to the host's /root, /home, /var or /run")
    yield made
    for p in made:
        os.unlink(p)


def test_host_private_dirs_absent(cordon, host_canaries):
    script = "for p in " + " ".join(host_canaries) + "; do test -e $p && echo VISIBLE $p; done; echo done"
    r = cordon.run([SH, "-c", script], opts=["--user", "root"])
    assert r.returncode == 0, r.describe()
    assert r.out == "done\n", r.describe()
    # The host's own home directories are not there either.
    homes = [h for h in os.listdir("/home") if h != "user" and not h.startswith("cnry-")]
    if os.path.isdir("/root"):
        homes_script = " ".join(f"/home/{h}" for h in homes)
        r = cordon.run([SH, "-c", f"ls -A /root; for p in {homes_script}; do test -e $p && echo VISIBLE $p; done;"
                                  " echo done"], opts=["--user", "root"])
        assert r.returncode == 0, r.describe()
        assert r.out == "done\n", f"host /root or /home visible inside:\n{r.describe()}"


def test_proc_shows_only_the_sandbox(cordon):
    r = cordon.run([SH, "-c", "ls /proc | grep -c '^[0-9]'"])
    assert r.returncode == 0, r.describe()
    # cordon-init, sh, ls, grep (and maybe a helper): never the host's processes.
    assert int(r.out) <= 6, r.describe()


def test_dev_is_minimal(cordon):
    r = cordon.run([SH, "-c", "ls /dev; echo hi > /dev/null; head -c 4 /dev/urandom | wc -c"])
    assert r.returncode == 0, r.describe()
    names = set(r.out.split())
    assert {"null", "zero", "urandom"} <= names, r.out
    for bad in ("sda", "vda", "nvme0", "mem", "kmsg", "loop0", "fuse"):
        assert bad not in names, f"/dev/{bad} is visible inside: {r.out}"


# ---------------------------------------------------------------------------------------------
# Unprivileged callers


def _userns_works_as(uid):
    try:
        p = subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                            "unshare", "-Ur", "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return p.returncode == 0


@pytest.mark.skipif(shutil.which("setpriv") is None, reason="setpriv is not installed")
def test_unprivileged_runs_with_one_warning(cordon_bin):
    if IS_ROOT:
        if not _userns_works_as(65534):
            pytest.skip("unprivileged user namespaces are not available")
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
    else:
        prefix = []
    p = subprocess.run(prefix + [cordon_bin, "run", "--", "/bin/sh", "-c", "id -u; exit 5"],
                       capture_output=True, timeout=60, cwd="/")
    assert p.returncode == 5, (p.returncode, p.stdout, p.stderr)
    assert p.stdout == b"1000\n", (p.stdout, p.stderr)
    lines = p.stderr.decode().splitlines()
    assert len(lines) == 1 and lines[0].startswith("cordon:"), \
        f"expected one warning line about missing cgroup limits, got {p.stderr!r}"
