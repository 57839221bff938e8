#!/usr/bin/python3
"""Benchmark of templates: building them, and starting sandboxes from them against `host`.

    /usr/bin/python3 bench/bench_template.py [--quick] [-n N] [--store DIR]

1. Build from nothing: the `python` recipe (recipes/python: debootstrap of Debian 12 and
   Debian's python3, numpy, pandas, matplotlib) into an empty store, timed. --quick builds a
   busybox recipe instead (no network).
2. Cached rebuild: the same recipe again (every layer cached, the template up to date), and
   again under a new name (every layer cached, the rootfs flattened anew). Target < 5 s.
3. Create-to-first-exec: a cordond without a warm pool (the pool holds `host` sandboxes only,
   so both sides are made on demand); POST /v1/sandboxes then POST .../exec `true`, timed
   until the exec returns, interleaved host / template, N each; medians and the ratio.
   Target: within 10% of host.
4. The same through `cordon run --template T -- /bin/true` against `cordon run -- /bin/true`.

The store is a temporary directory unless --store is given (then nothing is removed). The
last line of output is one JSON object with every figure. Standard library only; needs root.
"""

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_daemon import BUILD, REPO, Client, Daemon  # noqa: E402

CORDON = os.path.join(BUILD, "cordon")
TINY = """\
FROM scratch
COPY busybox /bin/busybox
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN mkdir -p /usr/bin && ln -s /bin/true /usr/bin/true
"""


def build(name, recipe, context=None):
    argv = [CORDON, "template", "build", name, "-f", recipe]
    if context:
        argv += ["--context", context]
    t = time.perf_counter()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True, text=True)
    secs = time.perf_counter() - t
    if p.returncode != 0:
        raise RuntimeError(f"build {name} failed: {p.stderr[-2000:]}")
    return secs


def timed_run(template):
    argv = [CORDON, "run"] + (["--template", template] if template else []) + ["--", "true"]
    t = time.perf_counter_ns()
    p = subprocess.run(argv, stdin=subprocess.DEVNULL, capture_output=True)
    ns = time.perf_counter_ns() - t
    if p.returncode != 0:
        raise RuntimeError(f"{argv}: {p.stderr[-500:]!r}")
    return ns / 1e6


def first_exec(client, template):
    t = time.perf_counter()
    sid = client.create({"template": template})
    client.exec_true(sid)
    ms = (time.perf_counter() - t) * 1000
    client.destroy(sid)
    return ms


def interleaved(fn, n):
    a, b = [], []
    for _ in range(3):  # warm-up
        fn(None), fn(True)
    for _ in range(n):
        a.append(fn(None))
        b.append(fn(True))
    return statistics.median(a), statistics.median(b)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="a busybox template, 10 runs each")
    ap.add_argument("-n", type=int, default=0, help="runs per side (default 200, quick 10)")
    ap.add_argument("--store", help="template store to use (kept)")
    args = ap.parse_args()
    n = args.n or (10 if args.quick else 200)
    if os.geteuid() != 0:
        print("bench_template: needs root", file=sys.stderr)
        return 1
    store = args.store or tempfile.mkdtemp(prefix="cordon-bench-store-")
    os.environ["CORDON_TEMPLATES"] = store
    work = tempfile.mkdtemp(prefix="cordon-bench-ctx-")
    res = {"quick": args.quick}
    try:
        if args.quick:
            shutil.copy("/bin/busybox", os.path.join(work, "busybox"))
            recipe = os.path.join(work, "Cordonfile")
            with open(recipe, "w") as f:
                f.write(TINY)
            name, ctx = "bench-tiny", work
        else:
            recipe, name, ctx = os.path.join(REPO, "recipes", "python", "Cordonfile"), "python", None
        res["build_from_nothing_s"] = round(build(name, recipe, ctx), 2)
        print(f"build {name} from nothing: {res['build_from_nothing_s']:.1f} s", flush=True)
        res["rebuild_up_to_date_s"] = round(min(build(name, recipe, ctx) for _ in range(3)), 3)
        res["rebuild_new_name_s"] = round(build(name + "-again", recipe, ctx), 3)
        ok = res["rebuild_new_name_s"] < 5
        print(f"cached rebuild: {res['rebuild_up_to_date_s']:.3f} s (up to date), "
              f"{res['rebuild_new_name_s']:.3f} s (all layers cached, rootfs flattened anew); "
              f"target < 5 s: {'met' if ok else 'MISSED'}", flush=True)

        d = Daemon(os.path.join(BUILD, "cordond"), pool=0, max_sandboxes=16)
        d.start()
        try:
            c = Client(d.sock)
            host_ms, tpl_ms = interleaved(lambda t: first_exec(c, name if t else "host"), n)
            c.close()
        finally:
            d.stop()
        res.update(daemon_host_ms=round(host_ms, 2), daemon_template_ms=round(tpl_ms, 2),
                   daemon_ratio=round(tpl_ms / host_ms, 3))
        print(f"cordond create-to-first-exec, median of {n}: host {host_ms:.2f} ms, {name} "
              f"{tpl_ms:.2f} ms, ratio {tpl_ms / host_ms:.3f} (target <= 1.10: "
              f"{'met' if tpl_ms <= 1.10 * host_ms else 'MISSED'})", flush=True)
        host_ms, tpl_ms = interleaved(lambda t: timed_run(name if t else None), n)
        res.update(run_host_ms=round(host_ms, 2), run_template_ms=round(tpl_ms, 2),
                   run_ratio=round(tpl_ms / host_ms, 3))
        print(f"cordon run -- true, median of {n}: host {host_ms:.2f} ms, {name} {tpl_ms:.2f} ms, "
              f"ratio {tpl_ms / host_ms:.3f}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        if not args.store:
            shutil.rmtree(store, ignore_errors=True)
    print(json.dumps(res))
    return 0


if __name__ == "__main__":
    sys.exit(main())
