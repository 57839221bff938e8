# SPDX-License-Identifier: Apache-2.0
#
# Booting the kernel suite's guest, and choosing KVM or TCG for it. Sourced by run.sh (and by
# tests/integration/test_kernel_probe.py, which runs the probe against fake QEMUs); safe
# under `set -euo pipefail`: no outcome of QEMU (hang, abort, early exit, garbage on the
# console, already dead when killed) ends the caller.
#
#   QEMU          the QEMU binary (default qemu-system-x86_64)
#   PROBE_S       seconds the guest has to reach its init under KVM (default 20)
#   KVM_DEV       the KVM device (default /dev/kvm)
#   qemu_boot ACCEL LOG OUT ARGS...   starts QEMU in the background; its pid in $qpid
#   qemu_stop                        kills $qpid if it still runs and reaps it
#   qemu_probe_kvm LOG OUT ARGS...   0 when KVM ran the guest to its init ($qpid is that QEMU,
#                                    left running); 1 otherwise, with the reason in $probe_why
#                                    and no QEMU left behind

QEMU=${QEMU:-qemu-system-x86_64}
PROBE_S=${PROBE_S:-20}
KVM_DEV=${KVM_DEV:-/dev/kvm}
GUEST_UP=CORDON-GUEST-UP
qpid=""
probe_why=""

qemu_boot() {
	local accel=$1 log=$2 out=$3 cpu=max
	shift 3
	[ "$accel" = kvm ] && cpu=host
	: >"$log"
	"$QEMU" -M q35 -accel "$accel" -cpu "$cpu" "$@" -serial "file:$log" \
		</dev/null >"$out" 2>&1 &
	qpid=$!
}

qemu_stop() {
	[ -n "$qpid" ] || return 0
	kill -9 "$qpid" 2>/dev/null || true
	wait "$qpid" 2>/dev/null || true
	qpid=""
}

# Some hosts' /dev/kvm (nested, paravirtual) opens but cannot run a stock guest: QEMU hangs
# after the bootloader on some, aborts at once on others (`failed to set MSR 0x10a`, an
# assertion in kvm_buf_set_msrs). Only the guest's own word that its init runs counts.
qemu_probe_kvm() {
	local log=$1 out=$2 t
	shift 2
	probe_why=""
	if [ ! -r "$KVM_DEV" ] || [ ! -w "$KVM_DEV" ]; then
		probe_why="no usable $KVM_DEV"
		return 1
	fi
	qemu_boot kvm "$log" "$out" "$@"
	for ((t = 0; t < PROBE_S * 2; t++)); do
		if tr -cd '\11\12\40-\176' <"$log" 2>/dev/null | grep -q "$GUEST_UP"; then
			return 0
		fi
		if ! kill -0 "$qpid" 2>/dev/null; then
			local rc=0
			wait "$qpid" 2>/dev/null || rc=$?
			qpid=""
			probe_why="qemu exited (status $rc) before the guest's init started"
			break
		fi
		sleep 0.5
	done
	[ -n "$probe_why" ] || probe_why="the guest's init did not start in ${PROBE_S}s"
	qemu_stop
	probe_why="$probe_why; qemu said: '$(tail -c 300 "$out" 2>/dev/null | tr -c '\40-\176' ' ')'"
	return 1
}
