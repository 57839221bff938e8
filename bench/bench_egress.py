#!/usr/bin/python3
"""The egress proxy's intercepting (TLS-terminating, secret-substituting) relay against its
plain relay, in the same run, through the fake internet of tests/net (needs root):

    sudo /usr/bin/python3 bench/bench_egress.py [--quick] [--rounds N]

Each round runs one sandbox per relay: N requests on one keep-alive HTTPS connection to the
fake API (latency per request after the first handshake: p50, p90), then one bulk download
(throughput). The plain run has no secret (raw relay, the sandbox trusts the fake internet's
CA); the intercepted run has --secret API_KEY=...@api.example.test (the proxy terminates
TLS, checks each request, substitutes the key, re-encrypts). The proxy's per-sandbox byte
rate is lifted (CORDON_EGRESS_LIMITS) so that it does not cap both. A third run, "plain+other",
is the plain relay to the same host from a sandbox that has a secret for another host only
(the raw relay, which then scans what the sandbox sends for placeholders): the relay of a host
without a secret or approve rule must not get slower than "plain". Prints medians over the
rounds and the differences."""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "net"))

import conftest  # noqa: E402  (the fake internet)


PLAIN = ["--net", "allow", "--allow", "api.example.test:8443", "--env", "BENCH_CA=/ca.pem"]
RUNS = {
    "plain": PLAIN,
    "intercepted": ["--secret", "API_KEY=sk-bench-0123456789abcdef@api.example.test",
                    "--allow", "api.example.test:8443"],
    "plain+other": PLAIN + ["--secret", "OTHER_KEY=sk-other-0123456789abcdef@other.example.test"],
}


def one(fn, tmp, kind, n, bulk):
    client = os.path.join(tmp, "egress_client.py")
    env = ["CORDON_EGRESS_LIMITS=256,200,2000000000", f"CORDON_EGRESS_CA_DIR={tmp}/ca",
           f"CORDON_EGRESS_UPSTREAM_CA={fn.ca}"]
    net = RUNS[kind]
    args = ["run"] + net + ["--memory", "512M", "--timeout", os.environ.get("BENCH_TIMEOUT", "120s"), "--ro-bind", f"{client}:/c.py",
                            "--ro-bind", f"{fn.ca}:/ca.pem", "--", conftest.PY, "/c.py", str(n), str(bulk)]
    argv = fn.argv(args)
    i = argv.index(conftest.CORDON)
    argv[i:i] = ["env"] + env
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    if p.returncode != 0:
        raise SystemExit(f"cordon run ({kind}) failed ({p.returncode}): {p.stderr.decode()[-3000:]}")
    return json.loads(p.stdout.decode().strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="3 rounds of 200 requests and 64 MiB")
    ap.add_argument("--rounds", type=int)
    a = ap.parse_args()
    why = conftest._missing()
    if why:
        raise SystemExit(f"bench_egress: {why}")
    rounds = a.rounds or (3 if a.quick else 7)
    n, bulk = (200, 64 << 20) if a.quick else (1000, 256 << 20)
    tmp = tempfile.mkdtemp(prefix="cordbench-egress-")
    os.chmod(tmp, 0o755)
    fn = conftest.FakeNet(tmp)
    try:
        fn.setup()
        import shutil
        shutil.copy(os.path.join(HERE, "egress_client.py"), os.path.join(tmp, "egress_client.py"))
        os.chmod(os.path.join(tmp, "egress_client.py"), 0o644)
        res = {k: [] for k in RUNS}
        for _ in range(rounds):
            for k in RUNS:
                res[k].append(one(fn, tmp, k, n, bulk))
    finally:
        fn.teardown()
        subprocess.run(["rm", "-rf", tmp])
    med = {k: {m: statistics.median(r[m] for r in v) for m in v[0]} for k, v in res.items()}
    print(f"egress relays, {rounds} rounds, {n} keep-alive requests + {bulk >> 20} MiB each (medians)")
    print(f"{'':14}{'handshake ms':>14}{'p50 ms':>10}{'p90 ms':>10}{'bulk MiB/s':>12}")
    for k in RUNS:
        m = med[k]
        print(f"{k:14}{m['handshake_ms']:14.2f}{m['p50_ms']:10.3f}{m['p90_ms']:10.3f}{m['bulk_mib_s']:12.1f}")
    p, i = med["plain"], med["intercepted"]
    print(f"added p50 latency: {i['p50_ms'] - p['p50_ms']:.3f} ms; "
          f"bulk throughput: {100 * i['bulk_mib_s'] / p['bulk_mib_s']:.0f}% of the plain relay")
    o = med["plain+other"]
    print(f"plain relay, sandbox with a secret for another host: p50 {o['p50_ms'] - p['p50_ms']:+.3f} ms, "
          f"bulk {100 * o['bulk_mib_s'] / p['bulk_mib_s']:.0f}% of the plain relay")


if __name__ == "__main__":
    main()
