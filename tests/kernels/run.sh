#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Cordon's tests inside a stock Debian 12 kernel (6.1, cgroup v2 unified), under QEMU.
#
#   bash tests/kernels/run.sh            # as root; `make test-kernels` runs this
#
# 1. installs qemu-system-x86, busybox-static, cpio and gcc with apt when they are missing;
# 2. fetches Debian's kernel package through apt (cached in
#    ${XDG_CACHE_HOME:-/var/cache}/cordon-kernels/) and takes its vmlinuz: everything the
#    suite needs (serial console, namespaces, cgroup2, seccomp, Landlock, tmpfs) is built in,
#    so no module is loaded;
# 3. builds an initramfs: busybox, build/cordon with its shared libraries, cordon-init, the
#    security probe, tests/kernels/ktest.c (static) and clone3log.c (LD_PRELOAD shim),
#    tests/kernels/init.sh as /init;
# 4. boots it (KVM when /dev/kvm can run it, else TCG), console on a file that is streamed
#    here; the guest prints `TEST name PASS|FAIL|SKIP detail` lines and
#    `RESULT N passed, M failed, K skipped`, then powers off.
#
# Exit status: 0 only when the guest printed RESULT with 0 failed. A guest still running at
# the deadline is killed and reported (exit 1).
#
# Environment:
#   CORDON_BUILD            build directory (default: build)
#   CORDON_KERNEL_PACKAGE   apt package of the kernel (default: linux-image-cloud-amd64; a
#                           metapackage is resolved to its versioned linux-image-6.1.0-N-...)
#   CORDON_KERNEL_ACCEL     auto (default), kvm or tcg
#   CORDON_KERNEL_TIMEOUT   deadline of the guest in seconds (default 600)
#   CORDON_KERNEL_ONLY      comma-separated test names to run (default: all)
#   CORDON_KERNEL_KEEP=1    keep the work directory (initramfs, console log)
#   CORDON_KERNEL_JUNIT     write the TEST lines as a JUnit XML file there (tests/run-all.sh)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
BUILD=${CORDON_BUILD:-$REPO/build}
case $BUILD in /*) ;; *) BUILD=$REPO/$BUILD ;; esac
CACHE=${XDG_CACHE_HOME:-/var/cache}/cordon-kernels
PKG=${CORDON_KERNEL_PACKAGE:-linux-image-cloud-amd64}
ACCEL=${CORDON_KERNEL_ACCEL:-auto}
DEADLINE=${CORDON_KERNEL_TIMEOUT:-600}
ONLY=${CORDON_KERNEL_ONLY:-}
T0=$(date +%s)

say() { echo "kernels: $*"; }
die() { echo "kernels: $*" >&2; exit 1; }
elapsed() { echo "$(($(date +%s) - T0))s"; }

# --- 1. tools ------------------------------------------------------------------------------
need=()
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)
[ -x /bin/busybox ] && file -L /bin/busybox 2>/dev/null | grep -q 'statically linked' || need+=(busybox-static)
command -v cpio >/dev/null || need+=(cpio)
command -v gcc >/dev/null || need+=(gcc)
command -v file >/dev/null || need+=(file)
if [ ${#need[@]} -gt 0 ]; then
	[ "$(id -u)" = 0 ] || die "missing ${need[*]}: install them (apt-get install ${need[*]}) or run as root"
	say "installing ${need[*]}"
	apt-get update -qq
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
# `file` itself may just have been installed: check busybox again
file -L /bin/busybox | grep -q 'statically linked' || die "/bin/busybox is not busybox-static"

for f in "$BUILD/cordon" "$BUILD/cordon-init" "$BUILD/tests/security/cordon-probe"; do
	[ -x "$f" ] || die "$f is missing: build first (make build, or ninja -C $BUILD)"
done
file -L "$BUILD/cordon-init" | grep -q 'statically linked' || die "$BUILD/cordon-init is not static"
file -L "$BUILD/tests/security/cordon-probe" | grep -q 'statically linked' ||
	die "$BUILD/tests/security/cordon-probe is not static"

# --- 2. the kernel -------------------------------------------------------------------------
mkdir -p "$CACHE"
# A metapackage (linux-image-cloud-amd64) depends on exactly one versioned image package.
resolve_pkg() {
	case $PKG in
	linux-image-[0-9]*) echo "$PKG" ;;
	*) apt-cache depends "$PKG" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}' ;;
	esac
}
kpkg=$(resolve_pkg)
if [ -z "$kpkg" ] && [ "$(id -u)" = 0 ]; then
	apt-get update -qq || true
	kpkg=$(resolve_pkg)
fi
deb=""
if [ -n "$kpkg" ]; then
	kver=$(apt-cache policy "$kpkg" | awk '/Candidate:/ {print $2}')
	if [ -n "$kver" ] && [ "$kver" != "(none)" ]; then
		deb="$CACHE/${kpkg}_${kver//:/%3a}_amd64.deb"
		if [ ! -s "$deb" ]; then
			say "downloading $kpkg $kver"
			tmp=$(mktemp -d "$CACHE/dl.XXXXXX")
			chmod 0777 "$tmp" # apt's _apt user writes here
			(cd "$tmp" && apt-get download -q "$kpkg" 2>&1 | grep -v '^W: Download is performed unsandboxed' || true)
			mv "$tmp"/*.deb "$deb" 2>/dev/null || true
			rm -rf "$tmp"
		fi
	fi
fi
# Offline, or apt does not know the package: the newest cached one will do.
if [ -z "$deb" ] || [ ! -s "$deb" ]; then
	deb=$(ls -t "$CACHE"/linux-image-*.deb 2>/dev/null | head -n1 || true)
	[ -n "$deb" ] || die "no kernel package: apt could not resolve '$PKG' and $CACHE has none"
	say "apt could not fetch '$PKG'; using the cached $(basename "$deb")"
fi
kdir="$CACHE/$(basename "$deb" .deb)"
if [ ! -f "$kdir/vmlinuz" ] || [ ! -f "$kdir/modules/xfs.ko" ]; then
	rm -rf "$kdir" "$kdir.tmp"; mkdir -p "$kdir.tmp"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$kdir.tmp" --wildcards './boot/*' \
		'./lib/modules/*/kernel/fs/overlayfs/*' './lib/modules/*/kernel/drivers/block/loop.ko*' \
		'./lib/modules/*/kernel/fs/xfs/xfs.ko*' './lib/modules/*/kernel/lib/libcrc32c.ko*'
	mv "$kdir.tmp"/boot/vmlinuz-* "$kdir.tmp/vmlinuz"
	mv "$kdir.tmp"/boot/config-* "$kdir.tmp/config"
	# Debian builds overlayfs and loop as modules: the template build test loads them; xfs
	# (with libcrc32c) for the scratch's project-quota backend (scratch-prjquota).
	mkdir -p "$kdir.tmp/modules"
	find "$kdir.tmp/lib/modules" -name '*.ko*' -exec mv {} "$kdir.tmp/modules/" \;
	for m in "$kdir.tmp"/modules/*.ko.xz; do [ -e "$m" ] && xz -d "$m"; done
	rm -rf "$kdir.tmp/boot" "$kdir.tmp/lib"
	mv "$kdir.tmp" "$kdir"
fi
# Everything the guest needs must be built in: there is no module in the initramfs.
for opt in SERIAL_8250_CONSOLE BLK_DEV_INITRD RD_GZIP DEVTMPFS TMPFS CGROUPS MEMCG CGROUP_PIDS \
	CFS_BANDWIDTH USER_NS PID_NS NET_NS SECCOMP_FILTER; do
	grep -q "^CONFIG_$opt=y" "$kdir/config" || die "$(basename "$deb"): CONFIG_$opt is not built in"
done
say "kernel $(basename "$deb") ($(elapsed))"

# --- 3. the initramfs ----------------------------------------------------------------------
WORK=$(mktemp -d /tmp/cordon-kernels.XXXXXX)
qpid=""
tailpid=""
cleanup() {
	if [ -n "$qpid" ]; then kill -9 "$qpid" 2>/dev/null || true; fi
	if [ -n "$tailpid" ]; then kill "$tailpid" 2>/dev/null || true; fi
	if [ "${CORDON_KERNEL_KEEP:-0}" = 1 ]; then say "work directory kept: $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT
R=$WORK/root
mkdir -p "$R"/{bin,sbin,usr/bin,usr/sbin,lib,lib64,etc,proc,sys,dev,tmp,run,root,opt/cordon,images}

# busybox and its applets, where Debian puts them
cp /bin/busybox "$R/bin/busybox"
/bin/busybox --list-full | while read -r a; do
	[ "$a" = bin/busybox ] || ln -sf /bin/busybox "$R/$a"
done

# the project's binaries; cordon finds cordon-init (and cordon-template) next to itself
cp "$BUILD/cordon" "$BUILD/cordon-init" "$BUILD/cordon-template" "$R/opt/cordon/"
cp "$BUILD/tests/security/cordon-probe" "$R/opt/cordon/"
# mke2fs makes the sandboxes' empty disks (src/runtime/scratch.c)
mke2fs=$(command -v mke2fs || echo /usr/sbin/mke2fs)
mkdir -p "$R/usr/sbin" && cp -L "$mke2fs" "$R/usr/sbin/mke2fs"
# mkfs.xfs for scratch-prjquota (which skips without it: apt-get install xfsprogs)
mkfs_xfs=$(command -v mkfs.xfs || true)
[ -n "$mkfs_xfs" ] && cp -L "$mkfs_xfs" "$R/usr/sbin/mkfs.xfs"
gcc -static -O2 -Wall -o "$R/usr/bin/cordon-ktest" tests/kernels/ktest.c
gcc -shared -fPIC -O2 -Wall -o "$R/opt/cordon/clone3log.so" tests/kernels/clone3log.c -ldl
# shared libraries of the dynamic ones, at the paths the loader will look for them
for bin in "$R/opt/cordon/cordon" "$R/opt/cordon/cordon-template" "$R/opt/cordon/clone3log.so" \
	"$R/usr/sbin/mke2fs" ${mkfs_xfs:+"$R/usr/sbin/mkfs.xfs"}; do
	ldd "$bin" | awk '/=> \// {print $3} /^\t\/[^ ]*ld-linux/ {print $1}'
done | sort -u | while read -r lib; do
	mkdir -p "$R$(dirname "$lib")"
	cp -L "$lib" "$R$lib"
done
# a small --rootfs image: busybox alone
M=$R/images/mini
mkdir -p "$M"/{bin,etc}
cp /bin/busybox "$M/bin/busybox"
for a in sh ls cat echo wc touch id; do ln -s busybox "$M/bin/$a"; done
echo "mini" >"$M/etc/hostname"

# for the template build test: the kernel's overlayfs and loop modules, an empty ext4 image
# for the store (tmpfs cannot be idmapped before 6.3), a context with busybox
mkdir -p "$R/lib/modules" "$R/images/ctx"
cp "$kdir"/modules/*.ko "$R/lib/modules/" 2>/dev/null || true
truncate -s 96M "$R/images/store.ext4"
mkfs.ext4 -q -F "$R/images/store.ext4"
truncate -s 256M "$R/images/disk.ext4"
mkfs.ext4 -q -F "$R/images/disk.ext4"
cp /bin/busybox "$R/images/ctx/busybox"

cat >"$R/etc/passwd" <<'EOF'
root:x:0:0:root:/root:/bin/sh
user:x:1000:1000:user:/home/user:/bin/sh
EOF
printf 'root:x:0:\nuser:x:1000:\ntty:x:5:\nshadow:x:42:\n' >"$R/etc/group"
# host secrets that the security probe looks for (a sandbox must not see them)
printf 'root:*:19000:0:99999:7:::\n' >"$R/etc/shadow"
chmod 0640 "$R/etc/shadow"
mkdir -p "$R/etc/ssh"
echo "# host ssh config" >"$R/etc/ssh/sshd_config"
printf 'PRETTY_NAME="cordon kernel-suite guest"\nID=cordon-guest\n' >"$R/etc/os-release"
cp tests/kernels/init.sh "$R/init"
chmod 0755 "$R/init"
(cd "$R" && find . -print0 | cpio --null -o -H newc -R 0:0 --quiet | gzip -1) >"$WORK/initrd.gz"
say "initramfs $(du -h "$WORK/initrd.gz" | cut -f1) ($(elapsed))"

# --- 4. boot -------------------------------------------------------------------------------
cmdline="console=ttyS0 earlyprintk=serial loglevel=1 panic=-1 rdinit=/init cgroup_no_v1=all"
[ -n "$ONLY" ] && cmdline="$cmdline cordon.only=$ONLY"
LOG=$WORK/console.log

# Every outcome of the KVM probe (hang, abort, early exit, garbage) ends in TCG; a guest that
# KVM started but that stopped without a verdict (QEMU aborted later) runs again under TCG.
. tests/kernels/qemu.sh
qemu_args=(-smp 2 -m 1024 -kernel "$kdir/vmlinuz" -initrd "$WORK/initrd.gz" -append "$cmdline"
	-display none -monitor none -no-reboot -nodefaults)
accel_why=""
choose_accel() {
	if [ "$ACCEL" != auto ]; then
		accel_why="CORDON_KERNEL_ACCEL=$ACCEL"
		qemu_boot "$ACCEL" "$LOG" "$WORK/qemu-$ACCEL.out" "${qemu_args[@]}"
	elif qemu_probe_kvm "$LOG" "$WORK/qemu-kvm.out" "${qemu_args[@]}"; then
		ACCEL=kvm accel_why="KVM runs the guest"
	else
		ACCEL=tcg accel_why="KVM cannot run this guest ($probe_why)"
		qemu_boot tcg "$LOG" "$WORK/qemu-tcg.out" "${qemu_args[@]}"
	fi
}

# Streams the console here while the guest runs; kills it at the deadline ($hung=1).
run_guest() {
	say "booting $(basename "$kdir") with $ACCEL ($accel_why), deadline ${DEADLINE}s ($(elapsed))"
	tail -n +1 -F "$LOG" 2>/dev/null | sed -u 's/\r$//; s/^/guest: /' &
	tailpid=$!
	boot_t0=$(date +%s)
	hung=0
	while kill -0 "$qpid" 2>/dev/null; do
		if [ $(($(date +%s) - boot_t0)) -ge "$DEADLINE" ]; then
			hung=1
			break
		fi
		sleep 1
	done
	qemu_stop
	sleep 0.5
	kill "$tailpid" 2>/dev/null || true
	wait "$tailpid" 2>/dev/null || true
	tailpid=""
	guest_s=$(($(date +%s) - boot_t0))
}

verdict_line() {
	tr -d '\r' <"$LOG" | grep -E '^RESULT [0-9]+ passed, [0-9]+ failed, [0-9]+ skipped$' | tail -n1 || true
}

auto=$ACCEL
choose_accel
run_guest
if [ "$auto" = auto ] && [ "$ACCEL" = kvm ] && [ -z "$(verdict_line)" ]; then
	say "the guest stopped without a verdict under KVM (qemu said: '$(tail -c 300 "$WORK/qemu-kvm.out" | tr -c '\40-\176' ' ')'); running it again under TCG"
	ACCEL=tcg accel_why="KVM stopped the guest without a verdict"
	qemu_boot tcg "$LOG" "$WORK/qemu-tcg.out" "${qemu_args[@]}"
	run_guest
fi

# --- 5. verdict ------------------------------------------------------------------------------
echo
echo "=== kernel suite: $(basename "$kdir"), accelerator $ACCEL ($accel_why), guest ${guest_s}s, total $(elapsed)"
tr -d '\r' <"$LOG" | grep -E '^(INFO|TEST) ' || true
result=$(verdict_line)
junit() { # tests (one "name verdict detail" line each) on stdin: $CORDON_KERNEL_JUNIT
	local esc='s/&/\&amp;/g; s/</\&lt;/g; s/>/\&gt;/g; s/"/\&quot;/g'
	{
		echo '<?xml version="1.0" encoding="UTF-8"?>'
		echo "<testsuite name=\"kernels-$(basename "$kdir")\">"
		while read -r name verdict detail; do
			detail=$(echo "$detail" | sed "$esc")
			echo "<testcase classname=\"kernels\" name=\"$(echo "$name" | sed "$esc")\">"
			case $verdict in
			FAIL) echo "<failure message=\"$detail\"/>" ;;
			SKIP) echo "<skipped message=\"$detail\"/>" ;;
			esac
			echo "</testcase>"
		done
		echo "</testsuite>"
	} >"$CORDON_KERNEL_JUNIT"
}
# (a hung guest fails tests/run-all.sh's stage, which counts once: no test case for it here)
[ -z "${CORDON_KERNEL_JUNIT:-}" ] || tr -cd '\11\12\40-\176' <"$LOG" | sed -n 's/^TEST //p' | junit
if [ $hung = 1 ]; then
	echo "kernels: the guest hung: killed at the ${DEADLINE}s deadline; last console lines:"
	tail -n 30 "$LOG" | sed 's/^/  | /'
	echo "kernel-suite: 0 passed, 1 failed"
	exit 1
fi
if [ -z "$result" ]; then
	echo "kernels: the guest stopped without a RESULT line; last console lines:"
	tail -n 30 "$LOG" | sed 's/^/  | /'
	[ -s "$WORK/qemu-$ACCEL.out" ] && sed 's/^/  qemu: /' "$WORK/qemu-$ACCEL.out"
	echo "kernel-suite: 0 passed, 1 failed"
	exit 1
fi
echo "$result"
nfail=$(echo "$result" | awk '{print $4}')
[ "$nfail" = 0 ]
