"""The fake internet for the egress tests (see README.md in this directory).

Run as root with Debian's pytest:  /usr/bin/python3 -m pytest tests/net
The binaries are taken from $CORDON_BUILD (default: <repo>/build).

Two network namespaces, created here and removed at the end (also on failure):

  cordtest-host-XXXX  the machine under test: `cordon run` runs here, so its veths, its
                      nftables table and its cordon-egress all live in this namespace.
                      203.0.113.2/24, default route via 203.0.113.1; /etc/resolv.conf
                      (bound over, for cordon and cordon-egress only) names 198.51.100.53.
                      Runs its own HTTP server on 0.0.0.0 and [::], ports 80 and 8080, and a TCP
                      echo on 0.0.0.0:22 (the host's services).
  cordtest-net-XXXX   "the internet": 203.0.113.1/24 on the veth, and on its loopback
                      198.51.100.10 (HTTP 80, TLS 443, TCP echo 22, UDP sink 7),
                      198.51.100.11 (HTTP 80 and 8080, TLS 443 and, keep-alive, 8443, TCP echo 22),
                      198.51.100.53 (DNS, the host's resolver), 198.51.100.54 (a rogue DNS),
                      169.254.169.254 (cloud metadata, HTTP 80), 10.99.0.5 (private, 80/443),
                      198.51.100.12 (mirror.test: HTTP 80 serving the files of FakeNet.mirror).
                      It has no default route and no other link: nothing can leave it.

Every server logs every request, query and datagram it receives (with the peer address) to a
JSON-lines file, so a test proves both what the sandbox saw and what reached the far side.
"""

import ipaddress
import json
import os
import secrets
import shutil
import subprocess
import tempfile
import time

import pytest

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")
EGRESS = os.path.join(BUILD, "cordon-egress")
PY = "/usr/bin/python3"

EXIT_USAGE = 2

# The runtime every sandbox of these tests runs on: run-all.sh runs this directory once per
# runtime (CORDON_TEST_RUNTIME=gvisor: the Sentry's netstack on the same veth and policies).
RUNTIME = os.environ.get("CORDON_TEST_RUNTIME", "jail")

# The fake internet's plan.
INET_IP = "203.0.113.1"       # the internet side of the uplink
HOST_IP = "203.0.113.2"       # the machine under test
WEB1 = "198.51.100.10"        # evil.test; HTTP, TLS, echo :22, UDP sink :7
WEB2 = "198.51.100.11"        # api.example.test, *.cdn.test; HTTP, TLS, echo :22
DNS_IP = "198.51.100.53"      # the host's resolver
ROGUE_DNS = "198.51.100.54"   # a resolver a sandbox might try to use directly
METADATA = "169.254.169.254"
PRIVATE = "10.99.0.5"
MIRROR = "198.51.100.12"      # mirror.test: HTTP serving FakeNet.mirror (a package mirror)
SANDBOX_NET = ipaddress.ip_network("10.201.0.0/16")  # link pool (src/lib/link.h), with margin

ZONE = {
    "api.example.test": [WEB2],
    "evil.test": [WEB1],
    "cdn.test": [WEB2],
    "a.cdn.test": [WEB2],
    "b.cdn.test": [WEB2],
    "evilcdn.test": [WEB2],
    "a.cdn.test.evil.test": [WEB1],
    "rebind.test": [PRIVATE],
    "metadata.test": [METADATA],
    "self.test": [HOST_IP],
    "loop.test": ["127.0.0.1"],
    "mirror.test": [MIRROR],
}
CERT_NAMES = ["api.example.test", "*.cdn.test", "cdn.test", "evil.test"]


def _missing():
    if os.geteuid() != 0:
        return "needs root (network namespaces, veth, nftables)"
    for tool in ("ip", "nft", "openssl", "nsenter", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed on the host"
    if not os.path.isfile(EGRESS):
        return f"no {EGRESS} (egress not built yet)"
    if RUNTIME == "gvisor" and not os.access(os.environ.get("CORDON_RUNSC", "/usr/bin/runsc"), os.X_OK):
        return "CORDON_TEST_RUNTIME=gvisor: runsc is not installed (apt-get install runsc)"
    return None


def sh(*argv, check=True, timeout=30):
    p = subprocess.run(list(argv), stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)
    if check and p.returncode != 0:
        raise RuntimeError(f"{argv!r} failed ({p.returncode}): {p.stderr.decode(errors='replace')}")
    return p


def wait_until(pred, timeout, interval=0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


def children_named(pid, name):
    """The pids of @pid's children whose command name is @name (one pass over /proc)."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                st = f.read()
        except OSError:
            continue
        comm = st[st.index("(") + 1:st.rindex(")")]
        if comm == name and int(st[st.rindex(")") + 2:].split()[1]) == pid:
            out.append(int(d))
    return out


class Result:
    def __init__(self, argv, rc, out, err, elapsed):
        self.argv, self.returncode, self.stdout, self.stderr, self.elapsed = argv, rc, out, err, elapsed

    @property
    def out(self):
        return self.stdout.decode(errors="replace")

    @property
    def err(self):
        return self.stderr.decode(errors="replace")

    def describe(self):
        return (f"argv={' '.join(self.argv)!s}\nrc={self.returncode} elapsed={self.elapsed:.2f}s\n"
                f"stdout={self.out[:3000]}\nstderr={self.err[:3000]}")


class FakeNet:
    def __init__(self, tmp):
        self.tmp = tmp
        self.tag = secrets.token_hex(3)
        self.host_ns = f"cordtest-host-{self.tag}"
        self.net_ns = f"cordtest-net-{self.tag}"
        self.etc_dir = f"/etc/netns/{self.host_ns}"
        self.resolv = os.path.join(self.etc_dir, "resolv.conf")
        self.procs = []
        self.inet_log = os.path.join(tmp, "inet.jsonl")
        self.host_log = os.path.join(tmp, "hostsrv.jsonl")
        self.ca = os.path.join(tmp, "ca.pem")
        self.client = os.path.join(tmp, "netclient.py")
        self.shared = os.path.join(tmp, "shared")
        self.mirror = os.path.join(tmp, "mirror")  # what mirror.test serves; tests fill it

    # ---- building and removing it ----

    def setup(self):
        self._certs()
        shutil.copy(os.path.join(HERE, "netclient.py"), self.client)
        os.chmod(self.client, 0o644)
        os.mkdir(self.shared)
        os.chmod(self.shared, 0o755)
        os.mkdir(self.mirror)
        h, n = self.host_ns, self.net_ns
        sh("ip", "netns", "add", h)
        sh("ip", "netns", "add", n)
        # The veth is created with both ends already in the test namespaces: the machine's own
        # namespace never sees it.
        sh("ip", "link", "add", f"ct{self.tag}h", "netns", h, "type", "veth",
           "peer", "name", f"ct{self.tag}n", "netns", n)
        hx = ["ip", "-n", h]
        nx = ["ip", "-n", n]
        sh(*hx, "link", "set", "lo", "up")
        sh(*nx, "link", "set", "lo", "up")
        sh(*hx, "addr", "add", f"{HOST_IP}/24", "dev", f"ct{self.tag}h")
        sh(*nx, "addr", "add", f"{INET_IP}/24", "dev", f"ct{self.tag}n")
        sh(*hx, "link", "set", f"ct{self.tag}h", "up")
        sh(*nx, "link", "set", f"ct{self.tag}n", "up")
        for a in (WEB1, WEB2, DNS_IP, ROGUE_DNS, METADATA, PRIVATE, MIRROR):
            sh(*nx, "addr", "add", f"{a}/32", "dev", "lo")
        sh(*hx, "route", "add", "default", "via", INET_IP)
        sh(*hx, "route", "add", "169.254.0.0/16", "via", INET_IP)
        # A route back to the sandboxes' pool: should a sandbox packet ever get through the
        # host unproxied, the servers answer it and log its 10.201.x source: a leak is seen.
        sh(*nx, "route", "add", str(SANDBOX_NET), "via", HOST_IP)
        os.makedirs(self.etc_dir, exist_ok=True)
        with open(self.resolv, "w") as f:
            f.write(f"nameserver {DNS_IP}\n")
        self._check_isolated()
        inet = {
            "log": self.inet_log, "cert": os.path.join(self.tmp, "srv.pem"),
            "key": os.path.join(self.tmp, "srv.key"),
            "http": [[WEB1, 80], [WEB2, 80], [WEB2, 8080], [METADATA, 80], [PRIVATE, 80]],
            "https": [[WEB1, 443], [WEB2, 443], [PRIVATE, 443]],
            "https11": [[WEB2, 8443]],
            "https_idle": [[WEB2, 8444]],
            "echo": [[WEB1, 22], [WEB2, 22]],
            "udp": [[WEB1, 7]],
            "dns": [[DNS_IP, 53], [ROGUE_DNS, 53]],
            "static": [[MIRROR, 80, self.mirror]],
            "zone": ZONE,
        }
        hostsrv = {"log": self.host_log, "http": [["0.0.0.0", 80], ["0.0.0.0", 8080]],
                   "http6": [["::", 80], ["::", 8080]],
                   "echo": [["0.0.0.0", 22]]}
        self._server(n, "inet", inet)
        self._server(h, "hostsrv", hostsrv)

    def _check_isolated(self):
        """The internet namespace must have exactly one link besides lo and no default route."""
        links = sh("ip", "-n", self.net_ns, "-o", "link", "show").stdout.decode().splitlines()
        assert len(links) == 2, f"unexpected links in {self.net_ns}: {links}"
        routes = sh("ip", "-n", self.net_ns, "route", "show", "default").stdout.decode().strip()
        assert routes == "", f"{self.net_ns} has a default route: {routes}"

    def _server(self, ns, name, cfg):
        path = os.path.join(self.tmp, f"{name}.json")
        with open(path, "w") as f:
            json.dump(cfg, f)
        errf = open(os.path.join(self.tmp, f"{name}.stderr"), "wb")
        p = subprocess.Popen(["ip", "netns", "exec", ns, PY, os.path.join(HERE, "fakenet_servers.py"), path],
                             stdout=subprocess.PIPE, stderr=errf, stdin=subprocess.DEVNULL)
        self.procs.append(p)
        line = b""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and p.poll() is None:
            import select
            r, _, _ = select.select([p.stdout], [], [], 0.2)
            if r:
                line = p.stdout.readline()
                break
        if line.strip() != b"READY":
            with open(os.path.join(self.tmp, f"{name}.stderr"), "rb") as f:
                raise RuntimeError(f"{name} server did not start: {f.read().decode(errors='replace')}")

    def _certs(self):
        t = self.tmp

        def ossl(*a):
            sh("openssl", *a, timeout=60)

        ossl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", os.path.join(t, "ca.key"), "-out", self.ca, "-days", "2",
             "-subj", "/CN=cordtest fake internet CA",
             "-addext", "basicConstraints=critical,CA:TRUE",
             "-addext", "keyUsage=critical,keyCertSign,cRLSign")
        ossl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", os.path.join(t, "srv.key"), "-out", os.path.join(t, "srv.csr"),
             "-subj", "/CN=api.example.test")
        with open(os.path.join(t, "ext.cnf"), "w") as f:
            f.write("subjectAltName=" + ",".join(f"DNS:{n}" for n in CERT_NAMES) + "\n"
                    "basicConstraints=CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                    "extendedKeyUsage=serverAuth\n")
        ossl("x509", "-req", "-in", os.path.join(t, "srv.csr"), "-CA", self.ca,
             "-CAkey", os.path.join(t, "ca.key"), "-CAcreateserial", "-days", "2",
             "-out", os.path.join(t, "srv.pem"), "-extfile", os.path.join(t, "ext.cnf"))
        os.chmod(self.ca, 0o644)

    def teardown(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                pass
        for ns in (self.host_ns, self.net_ns):
            # Anything of ours still running in a namespace (a cordon run that outlived its
            # test): killed by pid, found through its network namespace.
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.decode().split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (OSError, ValueError):
                    pass
            sh("ip", "netns", "del", ns, check=False)
        shutil.rmtree(self.etc_dir, ignore_errors=True)

    # ---- what the servers saw ----

    def mark(self):
        return {p: (os.path.getsize(p) if os.path.exists(p) else 0) for p in (self.inet_log, self.host_log)}

    def seen(self, mark=None, settle=0.3):
        """Log records written since @mark (both server processes)."""
        time.sleep(settle)
        out = []
        for p in (self.inet_log, self.host_log):
            if not os.path.exists(p):
                continue
            with open(p) as f:
                f.seek(mark[p] if mark else 0)
                for line in f:
                    if line.strip():
                        rec = json.loads(line)
                        rec["log"] = os.path.basename(p)
                        out.append(rec)
        return out

    def direct_contacts(self, mark):
        """Records whose peer is a sandbox address: a packet that got out unproxied."""
        return [r for r in self.seen(mark, settle=0) if r.get("peer")
                and ipaddress.ip_address(r["peer"]) in SANDBOX_NET]

    # ---- running cordon in the machine under test ----

    def argv(self, args):
        # `ip netns exec` would also remount /sys, which hides the host's cgroup hierarchy and
        # makes `cordon run` refuse to start; so: its network namespace, plus a private mount
        # namespace in which /etc/netns/<ns>/resolv.conf is bound over /etc/resolv.conf.
        return ["nsenter", f"--net=/run/netns/{self.host_ns}", "--",
                "unshare", "--mount", "--propagation", "slave", "--",
                "/bin/sh", "-c", 'mount --bind "$0" /etc/resolv.conf && exec "$@"', self.resolv,
                CORDON] + list(args)

    def cordon(self, args, timeout=60, input=None):
        argv = self.argv(args)
        t0 = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
        try:
            out, err = p.communicate(input=input, timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, 9)
            out, err = p.communicate()
            pytest.fail(f"cordon did not return within {timeout}s: {' '.join(argv)}\nstderr={err[:2000]!r}")
        return Result(argv, p.returncode, out, err, time.monotonic() - t0)

    def sandbox_opts(self, net):
        return list(net) + ["--runtime", RUNTIME, "--timeout", "60s",
                            "--ro-bind", f"{self.client}:/netclient.py",
                            "--ro-bind", f"{self.ca}:/ca.pem"]

    def probe(self, net, ops):
        """Runs the probes @ops in one sandbox with the network options @net; returns
        (Result, [probe results]) and fails the test if the sandbox itself did not run."""
        r = self.cordon(["run"] + self.sandbox_opts(net) + ["--", PY, "/netclient.py", json.dumps(ops)],
                        timeout=90)
        try:
            res = json.loads(r.out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            pytest.fail(f"the sandbox did not run the probes:\n{r.describe()}", pytrace=False)
        if r.returncode != 0:
            pytest.fail(f"cordon run failed:\n{r.describe()}", pytrace=False)
        return r, res

    def popen(self, net, cmd, **kw):
        argv = self.argv(["run"] + self.sandbox_opts(net) + ["--"] + list(cmd))
        kw.setdefault("stdin", subprocess.DEVNULL)
        kw.setdefault("stdout", subprocess.PIPE)
        kw.setdefault("stderr", subprocess.PIPE)
        return subprocess.Popen(argv, start_new_session=True, **kw)

    def host_exec(self, *cmd):
        return sh("ip", "netns", "exec", self.host_ns, *cmd, check=False)


@pytest.fixture(scope="session")
def fakenet():
    why = _missing()
    if why:
        pytest.skip(why)
    if not os.path.isfile(CORDON):
        pytest.fail(f"{EGRESS} exists but {CORDON} does not", pytrace=False)
    tmp = tempfile.mkdtemp(prefix="cordtest-net-")
    os.chmod(tmp, 0o755)
    fn = FakeNet(tmp)
    try:
        p = sh("ip", "netns", "add", f"cordtest-probe-{fn.tag}", check=False)
        if p.returncode != 0:
            pytest.skip(f"cannot create network namespaces here: {p.stderr.decode().strip()}")
        sh("ip", "netns", "del", f"cordtest-probe-{fn.tag}", check=False)
        fn.setup()
        yield fn
    finally:
        fn.teardown()
        if os.environ.get("CORDTEST_KEEP_LOGS"):
            print(f"fake internet logs kept in {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


@pytest.fixture
def net(fakenet):
    """The fake internet, plus a check after the test that no server saw a sandbox address
    as a peer (a packet that left a sandbox without going through the proxy)."""
    m = fakenet.mark()
    yield fakenet
    leaked = fakenet.direct_contacts(m)
    assert not leaked, f"sandbox packets reached the fake internet unproxied: {leaked}"


def token(prefix="t"):
    return f"/{prefix}-{secrets.token_hex(6)}"
