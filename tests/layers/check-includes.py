#!/usr/bin/python3
"""The layer rule, checked on the sources: prints which layer includes which (the include
matrix) and fails on an include that goes up or sideways.

    tests/layers/check-includes.py [SRCROOT]     # the tree's root, default: this checkout
    tests/layers/check-includes.py --self-test   # plants upward includes in a copy: must fail

The build enforces the same rule (each library gets only the include paths of its layer and
those below: meson.build, include/layers/); this check is what CI prints and what catches
the includes that include paths cannot (a "../" path, "src/...", a quoted header of another
directory found beside the file). The layers are those of docs/ARCHITECTURE.md:

    basic <- lib, spec, policy, audit <- runtime, net, image <- build <- daemon, cli
    init: basic and the frame codec only
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

# What each layer may include, beside itself. "err" is the public cordon/err.h, "types" the
# public cordon/spec.h (the plain data of a sandbox's spec), "cordon" the public cordon.h (the
# runtime's entry points: the runtime layer's own API, so only it and what stands on it).
BELOW = {
    "basic": {"err"},
    "lib": {"basic", "err"},
    "audit": {"basic", "err"},
    "spec": {"basic", "err", "types"},
    "policy": {"basic", "err", "types"},
}
LAYER1 = {"basic", "err", "types", "lib", "spec", "policy", "audit"}
BELOW.update({"runtime": LAYER1 | {"cordon"}, "net": LAYER1, "image": LAYER1})
LAYER2 = LAYER1 | {"cordon", "runtime", "net", "image"}
BELOW["build"] = LAYER2
BELOW["daemon"] = LAYER2 | {"build"}
BELOW["cli"] = LAYER2 | {"build"}
BELOW["init"] = {"basic", "err", "lib/frame.h", "lib/initproto.h"}  # files, not all of lib

LAYERS = ["basic", "lib", "spec", "policy", "audit", "runtime", "net", "image", "build",
          "daemon", "cli", "init"]
COLUMNS = ["err", "types", "cordon"] + LAYERS

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def target_of(delim, path):
    """The layer (or public header) an include names; None for a system header."""
    if path == "cordon/err.h":
        return "err"
    if path == "cordon/spec.h":
        return "types"
    if path == "cordon/cordon.h":
        return "cordon"
    if delim == "<":
        return None  # <net/if.h> is the system's: our layers are included with quotes
    first = path.split("/", 1)[0]
    if "/" in path and first in LAYERS:
        return first
    return "." if "/" not in path else "?"  # "x.h": the including file's own directory


def allowed(layer, target, path):
    if target in (layer, "."):
        return True
    if target == "?":
        return False
    ok = BELOW[layer]
    return target in ok or path in ok


def scan(root):
    matrix = {l: {c: 0 for c in COLUMNS} for l in LAYERS}
    bad = []
    src = os.path.join(root, "src")
    for dirpath, _, files in os.walk(src):
        rel = os.path.relpath(dirpath, src)
        if rel == ".":
            continue
        layer = rel.split(os.sep)[0]
        if layer not in BELOW:
            bad.append(f"src/{rel}: a directory of no layer (add it to the layer table)")
            continue
        for name in sorted(files):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(dirpath, name)
            with open(path, encoding="utf-8", errors="replace") as f:
                for n, line in enumerate(f, 1):
                    m = INCLUDE.match(line)
                    if not m:
                        continue
                    delim, inc = m.groups()
                    target = target_of(delim, inc)
                    if target is None:
                        continue
                    if target in matrix[layer]:
                        matrix[layer][target] += 1
                    if not allowed(layer, target, inc):
                        bad.append(f"{os.path.relpath(path, root)}:{n}: {layer} includes {inc}")
    return matrix, bad


def print_matrix(matrix):
    width = max(len(c) for c in COLUMNS)
    print("includes".ljust(8), " ".join(c.rjust(width) for c in COLUMNS))
    for l in LAYERS:
        cells = []
        for c in COLUMNS:
            v = matrix[l][c]
            cells.append(("-" if v == 0 else str(v)).rjust(width))
        print(l.ljust(8), " ".join(cells))


def check(root):
    matrix, bad = scan(root)
    print_matrix(matrix)
    for b in bad:
        print("upward include:", b)
    print(f"{len(bad)} include(s) against the layer rule")
    return 1 if bad else 0


PLANTS = [
    ("src/basic/log.c", '#include "daemon/daemon.h"\n'),   # basic -> daemon
    ("src/lib/ns.c", '#include "runtime/runtime.h"\n'),     # lib -> runtime
    ("src/runtime/host.c", '#include "net/nft.h"\n'),       # runtime -> net (sideways)
    ("src/init/agent.c", '#include "lib/caps.h"\n'),        # init -> lib beyond the codec
    ("src/basic/parse.c", "#include <cordon/cordon.h>\n"),  # basic -> the runtime's API
    ("src/spec/api.h", "#include <cordon/cordon.h>\n"),    # spec -> the runtime's API
    ("src/image/store.h", "#include <cordon/cordon.h>\n"), # image -> the runtime's (sideways)
    ("src/net/nft.c", '#include "../daemon/daemon.h"\n'),   # a relative path
]


def self_test(root):
    """Each planted include alone must make the check fail; the clean copy must pass."""
    failures = 0
    with tempfile.TemporaryDirectory(prefix="cordon-layers-") as tmp:
        copy = os.path.join(tmp, "tree")
        shutil.copytree(os.path.join(root, "src"), os.path.join(copy, "src"), symlinks=True)
        run = lambda: subprocess.run([sys.executable, __file__, copy], capture_output=True, text=True)
        r = run()
        if r.returncode != 0:
            print("the clean copy fails:\n" + r.stdout)
            return 1
        for rel, line in PLANTS:
            path = os.path.join(copy, rel)
            with open(path) as f:
                orig = f.read()
            with open(path, "w") as f:
                f.write(line + orig)
            r = run()
            with open(path, "w") as f:
                f.write(orig)
            caught = r.returncode == 1 and rel in r.stdout
            print(f"planted {line.strip()} in {rel}: {'caught' if caught else 'MISSED'}")
            failures += not caught
    return 1 if failures else 0


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_root = os.path.dirname(os.path.dirname(here))
    args = sys.argv[1:]
    if args[:1] == ["--self-test"]:
        return self_test(args[1] if len(args) > 1 else default_root)
    return check(args[0] if args else default_root)


if __name__ == "__main__":
    sys.exit(main())
