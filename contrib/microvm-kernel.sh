#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The microvm runtime's guest kernel: Debian's linux-image-cloud-amd64 (the package
# tests/kernels/run.sh boots too, fetched through apt into the same cache), its vmlinuz and
# the modules the guest loads (virtio-mmio, blk, console, rng, net, erofs, overlay).
#
#   sudo contrib/microvm-kernel.sh     # -> /var/cache/cordon-kernels/microvm/{vmlinuz,modules/}
#
# The runtime reads $CORDON_MICROVM_KERNEL, else /var/cache/cordon-kernels/microvm (a
# symlink to the extracted package's directory). Environment: CORDON_KERNEL_PACKAGE.
set -euo pipefail
CACHE=${XDG_CACHE_HOME:-/var/cache}/cordon-kernels
PKG=${CORDON_KERNEL_PACKAGE:-linux-image-cloud-amd64}
MODS="virtio_ring virtio virtio_mmio virtio_blk virtio_console virtio-rng failover net_failover
virtio_net libcrc32c erofs overlay"
die() { echo "microvm-kernel: $*" >&2; exit 1; }

mkdir -p "$CACHE"
case $PKG in
linux-image-[0-9]*) kpkg=$PKG ;;
*) kpkg=$(apt-cache depends "$PKG" 2>/dev/null | awk '/Depends: linux-image-[0-9]/ {print $2; exit}') ;;
esac
deb=""
if [ -n "$kpkg" ]; then
	kver=$(apt-cache policy "$kpkg" | awk '/Candidate:/ {print $2}')
	deb="$CACHE/${kpkg}_${kver//:/%3a}_amd64.deb"
	if [ ! -s "$deb" ]; then
		tmp=$(mktemp -d "$CACHE/dl.XXXXXX")
		chmod 0777 "$tmp" # apt's _apt user writes here
		(cd "$tmp" && timeout 600 apt-get download -q "$kpkg") || true
		mv "$tmp"/*.deb "$deb" 2>/dev/null || true
		rm -rf "$tmp"
	fi
fi
if [ -z "$deb" ] || [ ! -s "$deb" ]; then
	deb=$(ls -t "$CACHE"/linux-image-*.deb 2>/dev/null | head -n1 || true)
	[ -n "$deb" ] || die "no kernel package: apt could not resolve '$PKG' and $CACHE has none"
fi
dir="$CACHE/microvm-$(basename "$deb" .deb)"
if [ ! -f "$dir/vmlinuz" ]; then
	rm -rf "$dir.tmp"; mkdir -p "$dir.tmp/modules"
	dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$dir.tmp" --wildcards './boot/vmlinuz-*' './boot/config-*' \
		'./lib/modules/*/kernel/drivers/virtio/*' './lib/modules/*/kernel/drivers/block/virtio_blk.ko*' \
		'./lib/modules/*/kernel/drivers/char/*' './lib/modules/*/kernel/drivers/net/*' \
		'./lib/modules/*/kernel/net/core/failover.ko*' './lib/modules/*/kernel/lib/libcrc32c.ko*' \
		'./lib/modules/*/kernel/fs/erofs/*' './lib/modules/*/kernel/fs/overlayfs/*'
	mv "$dir.tmp"/boot/vmlinuz-* "$dir.tmp/vmlinuz"
	mv "$dir.tmp"/boot/config-* "$dir.tmp/config"
	for m in $MODS; do
		f=$(find "$dir.tmp/lib/modules" -name "$m.ko*" | head -n1)
		[ -n "$f" ] || die "$(basename "$deb") has no module $m"
		case $f in *.xz) xz -dc "$f" >"$dir.tmp/modules/$m.ko" ;; *) mv "$f" "$dir.tmp/modules/$m.ko" ;; esac
	done
	rm -rf "$dir.tmp/boot" "$dir.tmp/lib"
	for opt in EXT4_FS SERIAL_8250_CONSOLE ACPI BLK_DEV_INITRD DEVTMPFS; do
		grep -q "^CONFIG_$opt=y" "$dir.tmp/config" || die "CONFIG_$opt is not built in"
	done
	mv "$dir.tmp" "$dir"
fi
ln -sfn "$(basename "$dir")" "$CACHE/microvm"
echo "microvm-kernel: $CACHE/microvm -> $(basename "$dir")"
