#!/usr/bin/env bash
# The whole suite: unit tests (cmocka), integration and security tests (pytest) against the
# real binaries, the same under ASan+UBSan, every fuzzer over its corpus, and each benchmark
# once in quick mode. Ends with one line: "N passed, N failed, N skipped".
set -uo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
results=results.d
rm -rf "$results"; mkdir -p "$results"
stage_fail=0
# One code-interpreter template for the run: the first suite that needs it builds it there
# from Debian's mirror (tests/daemon/test_code.py), the later ones find it (the sanitizer
# stage, the TypeScript SDK's and the MCP tests, bench_code.py); removed at the end.
if [ -z "${CORDON_TEST_CODE_STORE:-}" ]; then
	CORDON_TEST_CODE_STORE=$(mktemp -d /var/tmp/cordon-code-store.XXXXXX)
	trap 'rm -rf "$CORDON_TEST_CODE_STORE"' EXIT
fi
export CORDON_TEST_CODE_STORE

stage() { # name, command...
	local name=$1; shift
	echo "=== $name"
	if "$@"; then echo "=== $name: ok"; else echo "=== $name: FAILED"; stage_fail=$((stage_fail + 1)); echo "$name" >>"$results/failed-stages"; fi
}

unit() { # build dir, junit name
	meson test -C "$1" --print-errorlogs --num-processes 2
	local r=$?; [ -f "$1/meson-logs/testlog.junit.xml" ] && cp "$1/meson-logs/testlog.junit.xml" "$results/$2.xml"; return $r
}

pytests() { # build dir, junit name, paths...
	local b=$1 n=$2; shift 2
	CORDON_BUILD="$PWD/$b" $PY -m pytest -q -p no:cacheprovider --junitxml="$results/$n.xml" "$@"
	local r=$?; [ $r = 5 ] && return 1; return $r  # 5: no tests ran, never a pass
}

asan_build() {
	[ -f build-asan/build.ninja ] || meson setup build-asan -Db_sanitize=address,undefined -Db_lundef=false --buildtype=debug --werror >/dev/null
	ninja -C build-asan
}

fuzz_corpus() {
	[ -f build-fuzz/build.ninja ] || CC=clang meson setup build-fuzz -Dfuzzing=true --buildtype=debug >/dev/null
	ninja -C build-fuzz || return 1
	local ok=0
	for f in build-fuzz/fuzz/*/fuzz-*; do
		[ -f "$f" ] && [ -x "$f" ] || continue
		local name; name=$(basename "$(dirname "$f")")
		echo "fuzz $name over fuzz/$name/corpus"
		"$f" -runs=0 "fuzz/$name/corpus" >"$results/fuzz-$name.log" 2>&1 || { tail -20 "$results/fuzz-$name.log"; ok=1; }
		grep -q "Done\|INITED" "$results/fuzz-$name.log" || ok=1
	done
	return $ok
}

stage "layers (include matrix)" $PY tests/layers/check-includes.py
stage "unit" unit build unit
# One pytest run per directory: each has its own conftest.py, imported as "conftest".
stage "integration" pytests build pytest-integration tests/integration
stage "security" pytests build pytest-security tests/security
stage "daemon" pytests build pytest-daemon tests/daemon
stage "net" pytests build pytest-net tests/net
# E2B's own SDK (npm, pinned) against cordond's E2B surface: skips, saying why, without npm.
stage "e2b" pytests build pytest-e2b tests/e2b
# gVisor (runsc): its own tests, and the egress suite again with every sandbox on gvisor.
# Both skip with a reason where runsc is not installed.
stage "gvisor" pytests build pytest-gvisor tests/gvisor
net_gvisor() { CORDON_TEST_RUNTIME=gvisor pytests build pytest-net-gvisor tests/net; }
stage "net (gvisor)" net_gvisor
# The daemon tests marked any_runtime (exec, streams, stdin, signals, files, limits, TTL) and
# the SDK suite once more with cordond's --default-runtime gvisor (tests/daemon/conftest.py).
daemon_gvisor() { CORDON_TEST_RUNTIME=gvisor pytests build pytest-daemon-gvisor tests/daemon; }
stage "daemon (gvisor)" daemon_gvisor
sdk_gvisor() { CORDON_TEST_RUNTIME=gvisor pytests build pytest-sdk-gvisor sdk/python/tests/test_sdk.py; }
stage "sdk (gvisor)" sdk_gvisor
# The microVM (QEMU + Debian's cloud kernel, fetched through apt into the kernels' cache
# first, as root): skips with a reason where they cannot be had.
microvm_tests() {
	if [ "$(id -u)" = 0 ]; then
		timeout 900 bash contrib/microvm-kernel.sh || echo "microvm: no guest kernel (the tests skip)"
	fi
	pytests build pytest-microvm tests/microvm
}
stage "microvm" microvm_tests
# cordond's any_runtime tests with every sandbox a microVM (skips where microvm cannot run).
daemon_microvm() { CORDON_TEST_RUNTIME=microvm pytests build pytest-daemon-microvm tests/daemon; }
stage "daemon (microvm)" daemon_microvm
stage "sdk" pytests build pytest-sdk sdk/python/tests
# Node: the TypeScript SDK (tsc, node --test against a real cordond, npm pack) and `cordon mcp`
# against the official MCP client. Each installs its pinned devDependencies with `npm ci` from
# the registry first; without npm, or when the registry does not answer, the stage skips.
node_suite() { # dir, junit name, build command or "", test files...
	local dir=$1 n=$2 build=$3; shift 3
	local skip="" top=$PWD out; out=$(cd "$results" && pwd)
	command -v npm >/dev/null || skip="no npm"
	[ -z "$skip" ] && [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ] &&
		skip="node $(node --version 2>/dev/null) is older than 20"
	[ -z "$skip" ] && ! (cd "$dir" && timeout 30 npm ping >/dev/null 2>&1) && skip="the npm registry is unreachable"
	if [ -n "$skip" ]; then
		echo "skipped: $skip"
		printf '<testsuites><testcase name="%s" classname="%s"><skipped message="%s"/></testcase></testsuites>\n' "$n" "$n" "$skip" >"$out/$n.xml"
		return 0
	fi
	(cd "$dir" && timeout 300 npm ci --no-audit --no-fund) || return 1
	if [ -n "$build" ]; then (cd "$dir" && timeout 300 $build) || return 1; fi
	(cd "$dir" && CORDON_BUILD="$top/build" timeout 1800 node --test --test-concurrency=1 \
		--test-reporter=spec --test-reporter-destination=stdout \
		--test-reporter=junit --test-reporter-destination="$out/$n.xml" "$@")
}
stage "sdk (typescript)" node_suite sdk/typescript node-sdk "npx tsc -p tsconfig.json" test/unit.test.mjs test/sdk.test.mjs test/templates.test.mjs test/pack.test.mjs
stage "mcp (official MCP client)" node_suite tests/mcp node-mcp "" mcp.test.mjs
stage "kernels (Debian 12 kernel, cgroup v2, QEMU)" env CORDON_KERNEL_JUNIT="$results/kernels.xml" bash tests/kernels/run.sh
stage "asan build" asan_build
stage "unit (asan+ubsan)" unit build-asan unit-asan
stage "security (asan+ubsan)" pytests build-asan pytest-asan tests/security
# The builder reads what build steps leave (hostile trees) and archives: under the sanitizers too.
stage "template builds (asan+ubsan)" pytests build-asan pytest-build-asan tests/integration/test_build.py -k "not debian"
# cordond's C under the sanitizers; the gvisor runs of these tests exercise runsc's timing
# more than cordond's code, and ran once above.
LSAN_OPTIONS="suppressions=$PWD/tests/lsan.supp" stage "daemon (asan+ubsan)" pytests build-asan pytest-daemon-asan tests/daemon -k "not gvisor"
stage "fuzz corpora" fuzz_corpus
stage "bench (quick)" $PY bench/bench_run.py --quick
stage "bench daemon (quick)" $PY bench/bench_daemon.py --quick
bench_scale() { $PY bench/bench_scale.py --quick; local r=$?; [ $r = 2 ] && { echo "skipped: not root"; return 0; }; return $r; }
stage "bench scale (quick)" bench_scale
bench_floor() { build/bench-floor --quick; local r=$?; [ $r = 2 ] && { echo "skipped: not root"; return 0; }; return $r; }
stage "bench floor (quick)" bench_floor
stage "bench templates (quick)" $PY bench/bench_template.py --quick
bench_gvisor() { $PY bench/bench_gvisor.py --quick; local r=$?; [ $r = 2 ] && { echo "skipped: no runsc or not root"; return 0; }; return $r; }
stage "bench gvisor (quick)" bench_gvisor
bench_sdk() { $PY bench/bench_sdk.py --quick; local r=$?; [ $r = 2 ] && return 0; return $r; }
stage "bench sdk (quick)" bench_sdk
stage "bench egress (quick)" $PY bench/bench_egress.py --quick
stage "bench snapshots (quick)" $PY bench/bench_snapshot.py --quick
stage "bench storage (quick)" $PY bench/bench_storage.py --quick
stage "bench e2b (quick)" $PY bench/bench_e2b.py --quick
bench_code() { $PY bench/bench_code.py --quick --store "$CORDON_TEST_CODE_STORE"; local r=$?; [ $r = 2 ] && { echo "skipped: not root, or no code-interpreter template to be had"; return 0; }; return $r; }
stage "bench code (quick)" bench_code

$PY - "$results" "$stage_fail" <<'PYEOF'
import sys, glob, xml.etree.ElementTree as ET
passed = failed = skipped = 0
for f in glob.glob(sys.argv[1] + "/*.xml"):
    for tc in ET.parse(f).getroot().iter("testcase"):
        kids = {c.tag for c in tc}
        if kids & {"failure", "error"}: failed += 1
        elif "skipped" in kids: skipped += 1
        else: passed += 1
failed += int(sys.argv[2])  # a stage that failed outside any test case counts once
print(f"{passed} passed, {failed} failed, {skipped} skipped")
sys.exit(1 if failed else 0)
PYEOF
