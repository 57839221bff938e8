"""The microvm runtime's network: the guest's virtio-net ends in a tap in the sandbox's own
network namespace, bridged with the slot's veth, so the egress policy is the jail's (the
nftables redirect to cordon-egress and its DNS filter). Run against tests/net's fake internet
(its session fixture: two network namespaces this test makes and removes), with `cordon run`
in the machine-under-test namespace. Two boots: an allow policy (an allowed name reached, a
denied one refused, metadata and private ranges blocked, each also checked on the far side)
and `--net none` (the device is there, dead-ended)."""

import importlib.util
import os
import subprocess
import time

import pytest

from conftest import REPO, requires_microvm

pytestmark = requires_microvm

_spec = importlib.util.spec_from_file_location("net_conftest", os.path.join(REPO, "tests", "net", "conftest.py"))
nc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(nc)
fakenet = nc.fakenet  # the session fixture, used here by name


def mv_run(fakenet, mvenv, rootfs, net_args, script, timeout=120):
    argv = fakenet.argv(["run", "--runtime", "microvm", "--rootfs", rootfs, "--timeout", "90s",
                         *net_args, "--", "/bin/sh", "-c", script])
    p = subprocess.run(argv, capture_output=True, timeout=timeout, env=mvenv, start_new_session=True)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def lines(out):
    return dict(l.split("=", 1) for l in out.splitlines() if "=" in l)


# busybox's wget crashes in this static build's resolver: HTTP by hand over nc, names by
# busybox's own nslookup (which reads /etc/resolv.conf).
HTTP = r"""http() { (printf 'GET %s HTTP/1.0\r\nHost: %s\r\n\r\n' "$3" "$2"; sleep 2) | nc -w 4 "$1" 80 | grep fakenet || echo FAIL; }
resolve() { nslookup "$1" 2>/dev/null | grep '^Address' | grep -v ':53$' | tail -1 | tr -d ' \t' | cut -d: -f2; }
"""


def probe_script(paths):
    """Each probe prints NAME=<the far side's JSON answer, or FAIL>."""
    probes = [
        ("allowed", '"$(resolve api.example.test)"', "api.example.test"),
        ("denied", nc.WEB1, "evil.test"),
        ("denied_ip", nc.WEB1, nc.WEB1),
        ("metadata", nc.METADATA, nc.METADATA),
        ("private", nc.PRIVATE, nc.PRIVATE),
    ]
    body = [f'echo "{n}=$(http {ip} {host} {paths[n]})"' for n, ip, host in probes]
    return "\n".join([HTTP, "echo addr=$(ip -4 -o addr show eth0 | tr -s ' ' | cut -d' ' -f4)",
                      "echo resolver=$(cat /etc/resolv.conf)",
                      '[ -n "$(resolve evil.test)" ] && echo evil_dns=RESOLVED || echo evil_dns=REFUSED',
                      *body])


def test_egress_policy_holds_in_the_guest(fakenet, mvenv, rootfs):
    m = fakenet.mark()
    paths = {k: nc.token(k) for k in ("allowed", "denied", "denied_ip", "metadata", "private")}
    rc, out, err = mv_run(fakenet, mvenv, rootfs, ["--allow", "api.example.test"], probe_script(paths))
    assert rc == 0, (rc, out, err)
    f = lines(out)
    assert f["addr"].startswith("10.201.") and f["addr"].endswith("/30"), f
    assert f["resolver"].startswith("nameserver 10.201."), f
    assert nc.WEB2 in f["allowed"] and paths["allowed"] in f["allowed"], f
    for k in ("denied", "denied_ip", "metadata", "private"):
        assert f[k] == "FAIL", (k, f)
    assert f["evil_dns"] == "REFUSED", f
    seen = fakenet.seen(m)
    hits = [r for r in seen if r.get("path") == paths["allowed"]]
    assert len(hits) == 1 and hits[0]["peer"] == nc.HOST_IP, hits
    blocked = {paths[k] for k in ("denied", "denied_ip", "metadata", "private")}
    assert not [r for r in seen if r.get("path") in blocked], seen
    assert not fakenet.direct_contacts(m), "a guest packet reached the fake internet unproxied"


def test_no_network_is_a_dead_end(fakenet, mvenv, rootfs):
    """--net none: eth0 exists (the device list of a snapshot stays the same) and reaches
    nothing; the fake internet saw nothing."""
    m = fakenet.mark()
    p = nc.token("none")
    script = HTTP + f"cat /proc/net/dev; echo reached=$(http {nc.WEB2} api.example.test {p})"
    rc, out, err = mv_run(fakenet, mvenv, rootfs, ["--net", "none"], script)
    assert rc == 0, (rc, out, err)
    assert "eth0" in out and "reached=FAIL" in out, out
    assert fakenet.seen(m) == [], fakenet.seen(m)
