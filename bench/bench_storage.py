#!/usr/bin/python3
"""bench_storage.py: sequential write and read inside a sandbox's disk vs the host's.

Usage (as root, from the repository root, after `ninja -C build`):

    /usr/bin/python3 bench/bench_storage.py            # 1 GiB, 3 rounds
    /usr/bin/python3 bench/bench_storage.py --quick    # 256 MiB, 1 round

Writes SIZE with `dd conv=fsync` (to the disk, not the page cache) and reads it back with
`iflag=direct`, in `cordon run` (the sandbox's ext4 scratch on a loop device, its image in
$CORDON_SCRATCH_DIR, default a temporary directory next to the host file) and then directly
in a temporary directory on the host's filesystem (the one the images live on). Reports
MB/s of each and the ratio [target: inside >= 90% of the host]. Standard library only.
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
BUILD = os.environ.get("CORDON_BUILD", os.path.join(REPO, "build"))
CORDON = os.path.join(BUILD, "cordon")


def script(path, mb):
    return (f"dd if=/dev/zero of={path} bs=1M count={mb} conv=fsync 2>&1 | tail -1; "
            f"dd if={path} of=/dev/null bs=1M iflag=direct 2>&1 | tail -1; rm -f {path}")


def rates(out):
    """MB/s of the two dd summary lines (dd prints e.g. '1.1 GB/s' or '532 MB/s')."""
    got = []
    for m in re.finditer(r"([\d.]+) ([kMG])B/s", out):
        got.append(float(m.group(1)) * {"k": 1e-3, "M": 1, "G": 1e3}[m.group(2)])
    if len(got) != 2:
        sys.exit(f"could not read dd's output: {out!r}")
    return got


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--mb", type=int)
    ap.add_argument("--rounds", type=int)
    a = ap.parse_args()
    mb = a.mb or (256 if a.quick else 1024)
    rounds = a.rounds or (1 if a.quick else 3)
    if os.geteuid() != 0:
        sys.exit("needs root (the disk-backed scratch is root's)")
    tmp = tempfile.mkdtemp(prefix="cordon-bench-storage-", dir="/var/tmp")
    env = dict(os.environ)
    env.setdefault("CORDON_SCRATCH_DIR", os.path.join(tmp, "scratch"))
    os.makedirs(env["CORDON_SCRATCH_DIR"], exist_ok=True)
    inside, host = [], []
    try:
        for _ in range(rounds):
            p = subprocess.run([CORDON, "run", "--disk", f"{mb * 2}M", "--", "sh", "-c",
                                script("/tmp/bench", mb)], capture_output=True, text=True,
                               env=env, timeout=600)
            if p.returncode != 0:
                sys.exit(f"cordon run failed: {p.stderr}")
            inside.append(rates(p.stdout))
            p = subprocess.run(["sh", "-c", script(os.path.join(tmp, "bench"), mb)],
                               capture_output=True, text=True, timeout=600)
            host.append(rates(p.stdout))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    best = lambda xs, i: max(x[i] for x in xs)
    res = {"bench": "storage", "mb": mb, "rounds": rounds,
           "inside_write_mb_s": best(inside, 0), "inside_read_mb_s": best(inside, 1),
           "host_write_mb_s": best(host, 0), "host_read_mb_s": best(host, 1)}
    res["write_ratio"] = round(res["inside_write_mb_s"] / res["host_write_mb_s"], 3)
    res["read_ratio"] = round(res["inside_read_mb_s"] / res["host_read_mb_s"], 3)
    for k in ("write", "read"):
        r = res[f"{k}_ratio"]
        print(f"sequential {k:5} {mb} MiB: inside {res[f'inside_{k}_mb_s']:8.1f} MB/s, "
              f"host {res[f'host_{k}_mb_s']:8.1f} MB/s, {r * 100:5.1f}%   target >= 90%  "
              f"{'ok' if r >= 0.9 else 'MISS'}")
    print(json.dumps(res, sort_keys=True))


if __name__ == "__main__":
    main()
