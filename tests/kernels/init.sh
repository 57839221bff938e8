#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
#
# /init of the kernel-suite guest (tests/kernels/run.sh builds the initramfs around it).
# Runs as PID 1 under busybox sh inside a stock distribution kernel, mounts cgroup2
# (unified only) with the memory, pids and cpu controllers, and runs Cordon's security
# probe and resource-limit tests against `cordon run` as root.
#
# Output, on the console: `INFO <key> <value>` lines, one `TEST <name> PASS|FAIL|SKIP
# <detail>` line per test (a failing test's log follows as `  | ` lines), then
# `RESULT N passed, M failed, K skipped`, and the guest powers off.
#
# The kernel command line may carry `cordon.only=name,name` to run a subset.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C

# --- stage 1: leave the initramfs root -------------------------------------------------
# pivot_root(2) refuses a root that is the initramfs itself (it has no parent mount), and
# every sandbox pivots. Bind the initramfs onto itself and move that bind over /: the root
# is then an ordinary mount, like a booted system's after switch_root.
if [ "$1" != stage2 ]; then
	mount -t proc proc /proc
	mkdir -p /.root
	mount --bind / /.root
	cd /.root || exit 1
	mount --move . /
	umount /proc
	exec chroot . /init stage2
fi

# --- stage 2: the system ----------------------------------------------------------------
mount -t proc -o nosuid,nodev,noexec proc /proc
mount -t sysfs -o nosuid,nodev,noexec sysfs /sys
mount -t devtmpfs -o nosuid,mode=0755 devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts -o nosuid,noexec,gid=5,mode=620,ptmxmode=000 devpts /dev/pts
mount -t tmpfs -o nosuid,nodev shm /dev/shm
mount -t tmpfs -o nosuid,nodev,mode=1777 tmp /tmp
mount -t tmpfs -o nosuid,nodev,mode=0755 run /run
mount -t cgroup2 -o nosuid,nodev,noexec cgroup2 /sys/fs/cgroup
mount -t securityfs -o nosuid,nodev,noexec securityfs /sys/kernel/security 2>/dev/null
exec </dev/null >/dev/console 2>&1
hostname cordon-guest
ip link set lo up 2>/dev/null || ifconfig lo 127.0.0.1 up

CORDON=/opt/cordon/cordon
PROBE=/opt/cordon/cordon-probe
KT=/usr/bin/cordon-ktest
PRELOAD=/opt/cordon/clone3log.so
CG=/sys/fs/cgroup
LOG=/tmp/log
mkdir -p $LOG

info() { echo "INFO $*"; }
finish() {
	echo "RESULT $passed passed, $failed failed, $skipped skipped"
	sync
	poweroff -f
	sleep 10
}

info kernel "$(uname -r)"
info kernel-version "$(cat /proc/version)"
info cmdline "$(cat /proc/cmdline)"
case $(stat -f -c %t $CG 2>/dev/null) in
63677270) mode="v2 (cgroup2 unified at $CG)" ;;
*) mode="not cgroup2: magic $(stat -f -c %t $CG 2>/dev/null)" ;;
esac
info cgroup-mode "$mode, v1 hierarchies mounted: $(grep -c ' cgroup ' /proc/mounts)"
info cgroup-controllers "$(cat $CG/cgroup.controllers)"
if ! echo "+memory +pids +cpu" >$CG/cgroup.subtree_control; then
	info error "could not enable +memory +pids +cpu in $CG/cgroup.subtree_control"
fi
info cgroup-subtree-control "$(cat $CG/cgroup.subtree_control)"
info landlock-abi "$($KT landlock)"
info clone3-into-cgroup "$($KT clone3)"
info nproc "$(nproc) cpus, $(awk '/MemTotal/ {print $2 " kB"}' /proc/meminfo)"
info lsm "$(cat /sys/kernel/security/lsm 2>/dev/null || echo '?')"
for f in cgroup.kill memory.peak memory.oom.group memory.swap.max memory.events; do
	# which of the v2 files cordon uses exist on this kernel (looked at in a scratch cgroup)
	mkdir -p $CG/ktest-scratch
	if [ -e $CG/ktest-scratch/$f ]; then info cgroup-file "$f present"; else info cgroup-file "$f ABSENT"; fi
done
rmdir $CG/ktest-scratch

passed=0 failed=0 skipped=0
only=$(sed -n 's/.*cordon\.only=\([^ ]*\).*/\1/p' /proc/cmdline)

# Host-side canaries for the security probe (the same as tests/security/test_security.py).
tag=$(head -c 6 /dev/urandom | od -An -tx1 | tr -d ' \n')
$KT canary /tmp/canary.port "cordon-canary-$tag" &
canary_pid=$!
echo "host secret" >"/dev/shm/cordon-canary-$tag"
for i in 1 2 3 4 5 6 7 8 9 10; do [ -s /tmp/canary.port ] && break; sleep 0.2; done
host_ns=""
for t in user mnt pid net ipc uts cgroup time; do
	[ -e /proc/self/ns/$t ] && host_ns="$host_ns $(readlink /proc/self/ns/$t)"
done
host_ns=${host_ns# }
probe_env="HOST_PID=$canary_pid HOST_HOSTNAME=$(hostname) CANARY_TCP_PORT=$(cat /tmp/canary.port) CANARY_ABSTRACT=@cordon-canary-$tag"

leftovers() { # prints what a finished sandbox left: cgroups, processes
	l=""
	for d in $CG/cordon/s*; do [ -d "$d" ] && l="$l cgroup:${d#$CG/}"; done
	for p in $($KT leftovers); do l="$l proc:$p"; done
	echo "${l# }"
}
clean_fail=""
clean_checked=0

# run_test NAME: runs t_NAME with its output in $LOG/NAME; t_NAME sets $detail and returns
# 0 (pass), 77 (skip) or anything else (fail). Afterwards nothing may be left behind.
run_test() {
	name=$1
	if [ -n "$only" ]; then
		case ",$only," in *",$name,"*) ;; *) return ;; esac
	fi
	detail=""
	start=$(cut -d' ' -f1 /proc/uptime)
	"t_$(echo "$name" | tr - _)" >"$LOG/$name" 2>&1
	rc=$?
	end=$(cut -d' ' -f1 /proc/uptime)
	secs=$(awk "BEGIN {printf \"%.1f\", $end - $start}")
	left=$(leftovers)
	if [ -n "$left" ]; then
		# give a dying sandbox a moment before calling it a leak
		sleep 1
		left=$(leftovers)
	fi
	clean_checked=$((clean_checked + 1))
	if [ -n "$left" ]; then
		clean_fail="$clean_fail [$name: $left]"
		for d in $CG/cordon/s*; do [ -d "$d" ] && rmdir "$d" 2>/dev/null; done
	fi
	case $rc in
	0) passed=$((passed + 1)); echo "TEST $name PASS ${secs}s $detail" ;;
	77) skipped=$((skipped + 1)); echo "TEST $name SKIP $detail" ;;
	*)
		failed=$((failed + 1))
		echo "TEST $name FAIL ${secs}s $detail"
		tail -n 40 "$LOG/$name" | sed 's/^/  | /'
		;;
	esac
}

jget() { # key file: a scalar of cordon's one-line JSON record
	sed -n "s/.*\"$1\":\([^,}]*\).*/\1/p" "$2"
}

# cordon_bg OPTIONS... -- CMD: starts a sandbox in the background ($bg_pid) and waits until
# its cgroup has a process in it ($bg_cg).
cordon_bg() {
	before=$(ls $CG/cordon 2>/dev/null)
	"$CORDON" run "$@" &
	bg_pid=$!
	bg_cg=""
	for i in $(seq 1 100); do
		for d in $CG/cordon/s*; do
			[ -d "$d" ] || continue
			case " $before " in *" ${d##*/} "*) continue ;; esac
			[ -n "$(cat "$d/cgroup.procs" 2>/dev/null)" ] && { bg_cg=$d; return 0; }
		done
		sleep 0.1
	done
	return 1
}

# --- the tests ----------------------------------------------------------------------------

t_run_true() {
	timeout 60 "$CORDON" run -- /bin/true
	rc=$?
	detail="exit $rc"
	[ $rc = 0 ]
}

t_exit_codes() {
	timeout 60 "$CORDON" run -- /bin/sh -c 'exit 42'; a=$?
	timeout 60 "$CORDON" run -- /bin/sh -c 'kill -9 $$'; b=$?
	timeout 60 "$CORDON" run -- /nonexistent/cmd; c=$?
	timeout 60 "$CORDON" run --no-such-option -- /bin/true; d=$?
	detail="exit 42 -> $a, SIGKILL -> $b, not found -> $c, bad usage -> $d"
	[ $a = 42 ] && [ $b = 137 ] && [ $c = 127 ] && [ $d = 2 ]
}

t_identity() {
	u=$(timeout 60 "$CORDON" run -- /usr/bin/id -u)
	r=$(timeout 60 "$CORDON" run --user root -- /usr/bin/id -u)
	h=$(timeout 60 "$CORDON" run -- /bin/hostname)
	m=$(timeout 60 "$CORDON" run -- /bin/cat /proc/self/uid_map)
	echo "uid $u, root $r, hostname $h, uid_map: $m"
	detail="uid $u, --user root $r, hostname '$h', uid_map '$(echo $m)'"
	[ "$u" = 1000 ] && [ "$r" = 0 ] && [ "$h" != "$(hostname)" ] && [ -n "$m" ]
}

t_cgroup_v2_files() {
	cordon_bg --memory 64M --pids 32 --cpus 0.5 --timeout 30s -- /bin/sleep 5 || {
		detail="no sandbox cgroup appeared under $CG/cordon"
		kill $bg_pid 2>/dev/null; wait $bg_pid; return 1
	}
	ok=0
	v_mem=$(cat $bg_cg/memory.max) v_pids=$(cat $bg_cg/pids.max) v_cpu=$(cat $bg_cg/cpu.max)
	v_oom=$(cat $bg_cg/memory.oom.group 2>/dev/null) v_swap=$(cat $bg_cg/memory.swap.max 2>/dev/null)
	v_ctl=$(cat $CG/cordon/cgroup.subtree_control)
	echo "memory.max=$v_mem pids.max=$v_pids cpu.max=$v_cpu memory.oom.group=$v_oom memory.swap.max=$v_swap cordon/cgroup.subtree_control=$v_ctl"
	[ "$v_mem" = 67108864 ] && [ "$v_pids" = 32 ] && [ "$v_cpu" = "50000 100000" ] &&
		[ "$v_oom" = 1 ] && [ "$v_swap" = 0 ] || ok=1
	case "$v_ctl" in *memory*) ;; *) ok=1 ;; esac
	case "$v_ctl" in *pids*) ;; *) ok=1 ;; esac
	case "$v_ctl" in *cpu*) ;; *) ok=1 ;; esac
	# only the sandbox is in there, and cordon itself is not
	grep -qx "$bg_pid" $bg_cg/cgroup.procs && { echo "cordon run itself is in the sandbox's cgroup"; ok=1; }
	detail="memory.max=$v_mem pids.max=$v_pids cpu.max='$v_cpu' oom.group=$v_oom swap.max=$v_swap subtree='$v_ctl'"
	wait $bg_pid
	rc=$?
	[ $rc = 0 ] || { echo "sleep in the sandbox exited $rc"; ok=1; }
	return $ok
}

t_clone_into_cgroup() {
	rm -f /tmp/clone3.log
	export CLONE3_LOG=/tmp/clone3.log LD_PRELOAD=$PRELOAD
	cordon_bg --timeout 30s -- /bin/sleep 3
	started=$?
	unset CLONE3_LOG LD_PRELOAD
	[ $started = 0 ] || { detail="no sandbox cgroup appeared"; wait $bg_pid; return 1; }
	pid1=$(head -n1 $bg_cg/cgroup.procs)
	where=$(cat /proc/$pid1/cgroup 2>/dev/null)
	echo "sandbox pid 1 is host pid $pid1, /proc/$pid1/cgroup: $where"
	wait $bg_pid
	rc=$?
	log=$(cat /tmp/clone3.log 2>/dev/null)
	echo "clone3log: $log"
	detail="pid1 cgroup '$where'; cordon's call: $(echo $log)"
	[ $rc = 0 ] || return 1
	[ "$where" = "0::/cordon/${bg_cg##*/}" ] || return 1
	# Moved by the host (the fallback of a kernel without CLONE_INTO_CGROUP): not born there.
	case "$log" in *procs-write*) return 1 ;; esac
	case "$log" in *"clone3 "*"into_cgroup=1 ret="[0-9]*) return 0 ;; esac
	# libcordon's own clone3 (spawn.c) is not seen by the shim: born in its cgroup, since
	# nothing moved it there, and no fallback clone through syscall() either.
	case "$log" in *"clone "*|*"clone3 "*) return 1 ;; esac
	detail="$detail (born in its cgroup: no cgroup.procs write)"
	return 0
}

probe_in_sandbox() { # extra cordon options...
	env CORDON_CANARY=leaked-$tag timeout 300 "$CORDON" run --ro-bind "$PROBE:/tmp/cordon-probe" \
		--timeout 240s "$@" $(for e in $probe_env; do echo --env "$e"; done) \
		--env "HOST_NS=$host_ns" -- /tmp/cordon-probe >/tmp/probe.out 2>/tmp/probe.err
	rc=$?
	cat /tmp/probe.out /tmp/probe.err
	grep -E '^(ESCAPE|skip) ' /tmp/probe.out # again at the end of the log, which a failure shows
	sum=$(grep '^probe: ' /tmp/probe.out)
	# $granted: what root is given by design (tests/security/test_security.py, GRANTED_TO_ROOT)
	bad=$(grep '^ESCAPE ' /tmp/probe.out | cut -d: -f1 | cut -d' ' -f2 | while read -r n; do
		case " $granted " in *" $n "*) ;; *) echo "$n" ;; esac; done)
	esc=$(echo $bad | wc -w)
	skp=$(grep -c '^skip ' /tmp/probe.out)
	nok=$(grep -c '^ok ' /tmp/probe.out)
	detail="exit $rc, '$sum', $nok ok, $esc escape, $skp skip"
	[ $esc = 0 ] && detail="$detail" || detail="$detail: $(echo $bad)"
	[ $skp = 0 ] || detail="$detail; skipped: $(grep '^skip ' /tmp/probe.out | cut -d: -f1 | cut -d' ' -f2 | tr '\n' ' ')"
	# root's capabilities are exactly the sandbox root's set (CAPS_SANDBOX_ROOT)
	if grep -E '^ESCAPE (caps-status|capget):' /tmp/probe.out | grep -oE '[0-9a-f]{16}' |
		grep -vqE '^(00000000800405fb|0000000000000000)$'; then
		detail="$detail; capabilities beyond the sandbox root's"; return 1
	fi
	{ [ $rc = 0 ] || { [ -n "$granted" ] && [ $rc = 1 ]; }; } && [ -n "$sum" ] && [ $esc = 0 ] &&
		[ $skp = 0 ] && [ $nok -ge 45 ]
}

t_probe_sandbox_user() { granted=""; probe_in_sandbox; }
t_probe_sandbox_root() {
	granted="ro-usr-bin ro-rootdir ro-bin-sh ro-libc caps-status capget setuid setgid setgroups chroot"
	probe_in_sandbox --user root
}

t_probe_native() {
	env $probe_env "HOST_NS=$host_ns" CORDON_CANARY=leaked-$tag timeout 300 "$PROBE" --native >/tmp/native.out 2>&1
	rc=$?
	cat /tmp/native.out
	esc=$(grep -c '^ESCAPE ' /tmp/native.out)
	nok=$(grep -c '^ok ' /tmp/native.out)
	missing=""
	for p in mount umount2 pivot_root unshare-user unshare-mnt unshare-net clone-newuser \
		setns-badfd sock-raw-inet sock-packet-raw tiocsti ptrace-attach ptrace-traceme \
		host-pid-kill host-pid-proc ns-user ns-mnt ns-pid ns-net ns-uts ns-ipc \
		host-etc-shadow host-dev-shm env-canary env-allowlist hostname net-host-tcp \
		net-host-abstract ro-etc-passwd caps-status capget no-new-privs seccomp-mode setuid \
		chroot sethostname uid-map personality mknod-char; do
		grep -q "^ESCAPE $p:" /tmp/native.out || missing="$missing $p"
	done
	detail="exit $rc, $esc ESCAPE lines natively ($nok ok)"
	[ -n "$missing" ] && detail="$detail; blind natively:$missing"
	[ $rc = 1 ] && [ $esc -ge 30 ] && [ -z "$missing" ]
}

t_memory_oom() {
	timeout 120 "$CORDON" run --memory 32M --json-result 3 -- $KT memhog 256 3>/tmp/mem.json
	rc=$?
	j=$(cat /tmp/mem.json)
	echo "json: $j"
	detail="exit $rc, oom_killed=$(jget oom_killed /tmp/mem.json) signal=$(jget signal /tmp/mem.json) peak=$(jget peak_memory_bytes /tmp/mem.json)"
	[ $rc = 123 ] && [ "$(jget oom_killed /tmp/mem.json)" = true ]
}

t_memory_under_limit() {
	# a program that stays under its limit is left alone and not reported as OOM-killed
	timeout 120 "$CORDON" run --memory 64M --json-result 3 -- $KT memhog 16 3>/tmp/mem2.json
	rc=$?
	detail="exit $rc (memhog says 1 when it was not killed), oom_killed=$(jget oom_killed /tmp/mem2.json), peak_memory_bytes=$(jget peak_memory_bytes /tmp/mem2.json)"
	[ $rc = 1 ] && [ "$(jget oom_killed /tmp/mem2.json)" = false ]
}

t_pids() {
	cordon_bg --pids 32 --timeout 60s -- $KT forkbomb 2 >/tmp/pids.out || {
		detail="no sandbox cgroup appeared"; wait $bg_pid; return 1
	}
	max=$(cat $bg_cg/pids.max)
	wait $bg_pid
	rc=$?
	out=$(cat /tmp/pids.out)
	n=$(echo "$out" | sed -n 's/forkbomb: \([0-9]*\) children.*/\1/p')
	echo "$out"
	detail="pids.max=$max, exit $rc, $out"
	[ "$max" = 32 ] && [ $rc = 0 ] && [ -n "$n" ] && [ "$n" -lt 32 ]
}

t_cpu_quota() {
	timeout 120 "$CORDON" run --cpus 0.5 --json-result 3 -- $KT spin 4 3>/tmp/cpu.json >/tmp/cpu.out
	rc=$?
	cat /tmp/cpu.json /tmp/cpu.out
	c=$(jget cpu_ms /tmp/cpu.json) w=$(jget wall_ms /tmp/cpu.json)
	ratio=$(awk "BEGIN {printf \"%.2f\", ${c:-0} / (${w:-0} + 0.001)}")
	detail="exit $rc, cpu_ms=$c wall_ms=$w ratio $ratio (want 0.5, 0.25..0.75 accepted); $(cat /tmp/cpu.out)"
	[ $rc = 0 ] && awk "BEGIN {exit !($ratio >= 0.25 && $ratio <= 0.75)}"
}

t_timeout() {
	s=$(cut -d' ' -f1 /proc/uptime)
	timeout 120 "$CORDON" run --timeout 2s --json-result 3 -- $KT spin 60 3>/tmp/to.json
	rc=$?
	e=$(cut -d' ' -f1 /proc/uptime)
	took=$(awk "BEGIN {printf \"%.1f\", $e - $s}")
	detail="exit $rc after ${took}s, timed_out=$(jget timed_out /tmp/to.json)"
	[ $rc = 124 ] && [ "$(jget timed_out /tmp/to.json)" = true ] && awk "BEGIN {exit !($took < 20)}"
}

t_disk() {
	out=$(timeout 120 "$CORDON" run --disk 8M -- $KT fill /tmp/fill)
	rc=$?
	out2=$(timeout 120 "$CORDON" run --disk 8M -- $KT fill /home/user/fill)
	rc2=$?
	echo "$out"; echo "$out2"
	detail="/tmp: exit $rc, $out; /home/user: exit $rc2, $out2"
	[ $rc = 0 ] && [ $rc2 = 0 ] && case "$out$out2" in *"4 GiB"*) false ;; *) true ;; esac
}

t_fds() {
	out=$(timeout 60 "$CORDON" run -- $KT fds)
	rc=$?
	detail="exit $rc, $out"
	[ $rc = 0 ]
}

t_rootfs_image() {
	out=$(timeout 60 "$CORDON" run --rootfs /images/mini -- /bin/sh -c 'echo hello from $(ls /bin | wc -l) applets; touch /bin/x 2>&1 || echo ro')
	rc=$?
	detail="exit $rc, '$(echo $out)'"
	[ $rc = 0 ] && case "$out" in "hello from "*ro*) true ;; *) false ;; esac
}

# A sandbox's disk on this kernel: an ext4 scratch on a loop device (src/runtime/scratch.c),
# the --rootfs image a writable overlay over its idmapped self (5.19+), a full disk ENOSPC,
# and nothing left after.
t_scratch_disk() {
	for m in /lib/modules/overlay.ko /lib/modules/loop.ko; do
		[ -e "$m" ] && insmod "$m" 2>/dev/null
	done
	mkdir -p /var/disk
	grep -q ' /var/disk ' /proc/mounts || mount -o loop -t ext4 /images/disk.ext4 /var/disk ||
		{ detail="mount the ext4 image"; return 1; }
	mkdir -p /var/disk/scratch /var/disk/mini && cp -a /images/mini/. /var/disk/mini/
	out=$(CORDON_SCRATCH_DIR=/var/disk/scratch timeout 60 "$CORDON" run --rootfs /var/disk/mini \
		--user root --disk 32M -- /bin/sh -c '/bin/busybox grep -c " / ext4 " /proc/mounts;
		echo x > /bin/new && echo image-rw; /bin/busybox dd if=/dev/zero of=/tmp/f bs=1M \
		count=64 2>&1 | /bin/busybox grep -c "No space"' 2>&1)
	rc=$?
	sleep 1
	left=$(ls /var/disk/scratch | grep -v '^golden-')
	loops=$(cat /sys/block/loop*/loop/backing_file 2>/dev/null | grep -c /var/disk/scratch)
	detail="exit $rc: $(echo $out); left '$left', loops $loops, image $(ls /var/disk/mini/bin | tr '\n' ' ')"
	[ $rc = 0 ] && [ "$(echo $out)" = "1 image-rw 1" ] && [ -z "$left" ] && [ "$loops" = 0 ] &&
		[ ! -e /var/disk/mini/bin/new ]
}

# The scratch's project-quota backend (src/runtime/scratch.c): the scratch directory on an
# xfs mounted prjquota, so a disk is a directory with a project quota; writing past --disk is
# ENOSPC, `/` is that xfs, and nothing is left after (the directory, its limit).
t_scratch_prjquota() {
	[ -x /usr/sbin/mkfs.xfs ] || { detail="no mkfs.xfs in the initramfs (xfsprogs)"; return 77; }
	for m in /lib/modules/overlay.ko /lib/modules/loop.ko /lib/modules/libcrc32c.ko \
		/lib/modules/xfs.ko; do
		[ -e "$m" ] && insmod "$m" 2>/dev/null
	done
	grep -qw xfs /proc/filesystems || { detail="no xfs in this kernel"; return 77; }
	mkdir -p /var/xfs
	# 96 MiB: the initramfs holds little room; mkfs.xfs takes under 300 MiB only from fstests.
	truncate -s 96M /var/xfs.img && err=$(TEST_DIR=/tmp TEST_DEV=/dev/null QA_CHECK_FS=1 \
		/usr/sbin/mkfs.xfs -q /var/xfs.img 2>&1) ||
		{ detail="mkfs.xfs: $(echo $err | cut -c1-200)"; return 1; }
	mount -o loop,prjquota -t xfs /var/xfs.img /var/xfs || { detail="mount xfs -o prjquota"; return 1; }
	mkdir -p /var/xfs/scratch /var/xfs/mini && cp -a /images/mini/. /var/xfs/mini/
	# what a killed holder of a free slot left: the run's sweep removes it
	mkdir -p /var/xfs/scratch/q2000/root/tmp && echo left >/var/xfs/scratch/q2000/root/tmp/f
	out=$(CORDON_SCRATCH_DIR=/var/xfs/scratch timeout 60 "$CORDON" run --rootfs /var/xfs/mini \
		--user root --disk 32M -- /bin/sh -c '/bin/busybox stat -f -c %T /;
		echo x > /bin/new && echo image-rw; /bin/busybox dd if=/dev/zero of=/tmp/f bs=1M \
		count=64 2>&1 | /bin/busybox grep -c "No space"; /bin/busybox df -k / | /bin/busybox tail -1 |
		/bin/busybox awk "{print \$2}"; rm -f /tmp/f; i=0; while [ $i -lt 9000 ]; do
		true 2>/dev/null >/tmp/e$i || break; i=$((i + 1)); done; echo $i' 2>&1)
	rc=$?
	sleep 1
	left=$(ls /var/xfs/scratch | grep -v '^golden-')
	loops=$(cat /sys/block/loop*/loop/backing_file 2>/dev/null | grep -c /var/xfs/scratch)
	umount /var/xfs && rm -f /var/xfs.img
	detail="exit $rc: $(echo $out); left '$left', loops $loops"
	# 32 MiB: 8192 + 64 inodes, a few the tree's own
	[ $rc = 0 ] && [ "$(echo $out | cut -d' ' -f1-4)" = "xfs image-rw 1 32768" ] &&
		n=$(echo $out | cut -d' ' -f5) && [ "$n" -gt 8000 ] && [ "$n" -lt 8256 ] && [ -z "$left" ] && [ "$loops" = 0 ]
}

# cordon template build on this kernel: RUN in a jail over an overlay of idmapped lower
# layers (5.19+), the store on ext4, a whiteout and a root-only file, then a sandbox from it.
t_template_build() {
	for m in /lib/modules/overlay.ko /lib/modules/loop.ko; do
		[ -e "$m" ] && insmod "$m" 2>/dev/null
	done
	grep -q overlay /proc/filesystems || { detail="overlayfs unavailable"; return 1; }
	mkdir -p /var/store
	mount -o loop -t ext4 /images/store.ext4 /var/store || { detail="mount the ext4 store"; return 1; }
	printf '%s\n' 'FROM scratch' 'COPY busybox /bin/busybox' \
		'RUN ["/bin/busybox", "--install", "-s", "/bin"]' \
		'RUN echo built > /built && chmod 600 /built && rm /bin/ls' >/images/ctx/Cordonfile
	export CORDON_TEMPLATES=/var/store/templates
	"$CORDON" template build k61 -f /images/ctx/Cordonfile >$LOG/template_build.out 2>&1
	rc=$?
	out=$(timeout 60 "$CORDON" run --template k61 --user root -- /bin/sh -c \
		'stat -c "%u %a" /built; cat /built; [ -e /bin/ls ] || echo whiteout' 2>&1)
	rc2=$?
	again=$("$CORDON" template build k61 -f /images/ctx/Cordonfile 2>&1 | grep built)
	unset CORDON_TEMPLATES
	umount /var/store
	detail="build exit $rc ($(tail -n 1 $LOG/template_build.out); $(dmesg | grep -i overlay | tail -n 2 | tr "\n" " ")), run exit $rc2, '$(echo $out)', rebuild '$again'"
	[ $rc = 0 ] && [ $rc2 = 0 ] && [ "$(echo $out)" = "0 600 built whiteout" ] &&
		case "$again" in *"up to date"*) true ;; *) false ;; esac
}

t_orphans() {
	# a daemonised grandchild must die with the sandbox, not outlive it
	s=$(cut -d' ' -f1 /proc/uptime)
	timeout 60 "$CORDON" run -- /bin/sh -c 'setsid /bin/sleep 300 </dev/null >/dev/null 2>&1 & /bin/sleep 300 & exit 0'
	rc=$?
	e=$(cut -d' ' -f1 /proc/uptime)
	detail="exit $rc after $(awk "BEGIN {printf \"%.1f\", $e - $s}")s"
	[ $rc = 0 ]
}

t_unprivileged() {
	# an ordinary user: single-uid mapping, no cgroup limits (said on stderr), rlimits only
	out=$(timeout 60 su -s /bin/sh user -c "$CORDON run -- /usr/bin/id -u" 2>/tmp/unpriv.err)
	rc=$?
	cat /tmp/unpriv.err
	detail="exit $rc, id -u '$out', stderr: $(head -c 200 /tmp/unpriv.err | tr '\n' ' ')"
	[ $rc = 0 ] && [ -n "$out" ]
}

t_sweep_stale() {
	# a cgroup left by a dead sandbox (its uid slot is free) is removed by the next run
	mkdir -p $CG/cordon/s1999
	timeout 60 "$CORDON" run -- /bin/true
	rc=$?
	if [ -d $CG/cordon/s1999 ]; then left=yes; rmdir $CG/cordon/s1999; else left=no; fi
	detail="exit $rc, stale cordon/s1999 left: $left"
	[ $rc = 0 ] && [ $left = no ]
}

t_leak_loop() {
	m0=$(wc -l </proc/self/mountinfo)
	f0=$(ls /proc/$$/fd | wc -l)
	s=$(cut -d' ' -f1 /proc/uptime)
	bad=0
	for i in $(seq 1 20); do
		"$CORDON" run -- /bin/true || bad=$((bad + 1))
		l=$(leftovers)
		[ -z "$l" ] || { echo "run $i left: $l"; bad=$((bad + 1)); }
	done
	e=$(cut -d' ' -f1 /proc/uptime)
	m1=$(wc -l </proc/self/mountinfo)
	slots=$(ls /run/cordon/slots 2>/dev/null | wc -l)
	cgs=$(ls -d $CG/cordon/s* 2>/dev/null | wc -l)
	avg=$(awk "BEGIN {printf \"%.0f\", ($e - $s) * 1000 / 20}")
	detail="20 runs, $bad bad, ${avg} ms per run, mounts $m0 -> $m1, cgroups left $cgs, slot files $slots"
	[ $bad = 0 ] && [ "$m0" = "$m1" ] && [ "$cgs" = 0 ]
}

# The kernel's own rlimits for PID 1 (what a systemd machine of this size gives its services
# too): RLIMIT_SIGPENDING and RLIMIT_NPROC are derived from the memory size, about 3900 here.
t_rlimit_kernel_defaults() {
	out=$(timeout 60 "$CORDON" run -- /bin/true 2>&1)
	rc=$?
	echo "$out"
	detail="with the kernel's default limits (ulimit -i $(ulimit -i), -u $(ulimit -u), -n $(ulimit -n)): exit $rc $out"
	[ $rc = 0 ]
}

echo "CORDON-GUEST-UP"
run_test rlimit-kernel-defaults
# Raised for the rest of the suite, so that one failure does not hide every other test.
ulimit -i 65536
ulimit -u 65536
info rlimits "raised for the rest of the suite: sigpending $(ulimit -i), nproc $(ulimit -u), nofile $(ulimit -n)"
for t in run-true exit-codes identity cgroup-v2-files clone-into-cgroup probe-sandbox-user \
	probe-sandbox-root probe-native memory-oom memory-under-limit pids cpu-quota timeout \
	disk fds rootfs-image template-build scratch-disk scratch-prjquota orphans unprivileged sweep-stale leak-loop; do
	run_test $t
done

if [ -n "$clean_fail" ]; then
	failed=$((failed + 1))
	echo "TEST cleanup FAIL after $clean_checked tests, left behind:$clean_fail"
else
	passed=$((passed + 1))
	echo "TEST cleanup PASS nothing left behind (no $CG/cordon/s* cgroup, no process) after each of $clean_checked tests"
fi

kill $canary_pid 2>/dev/null
echo "--- kernel log (warnings and worse)"
dmesg -r 2>/dev/null | awk -F'>' '/^<[0-4]>/ {sub(/^<[0-9]>/, ""); print "KMSG " $0}' | tail -n 60
finish
