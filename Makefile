# Cordon's front door. `make quickstart` sets up a fresh Debian 12 machine and runs a command
# in a sandbox; `make test` runs the whole suite (what CI runs).
BUILD ?= build
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

# Debian 12 packages the build and the tests need.
DEPS := meson ninja-build gcc clang pkg-config musl-tools libseccomp-dev libjansson-dev \
	libevent-dev libsqlite3-dev libssl-dev libmnl-dev libnftables-dev libarchive-dev libcmocka-dev \
	libclang-rt-14-dev python3-pytest bubblewrap busybox-static iproute2 nftables \
	qemu-system-x86 cpio debootstrap e2fsprogs xz-utils runsc erofs-utils

.PHONY: all deps build quickstart test test-kernels bench templates clean

all: build

deps:
	@missing=$$(for p in $(DEPS); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "installing:$$missing"; \
		$(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi

$(BUILD)/build.ninja:
	meson setup $(BUILD) --buildtype=debugoptimized

build: deps $(BUILD)/build.ninja
	ninja -C $(BUILD)

quickstart: build
	$(BUILD)/cordon run -- python3 -c 'import os, socket; print("hello from a sandbox: uid", os.getuid(), "host", socket.gethostname())'

test: build
	bash tests/run-all.sh

# Debian 12's kernel (6.1) with cgroup v2 under QEMU: tests/kernels/ (make test runs it too).
test-kernels: build
	bash tests/kernels/run.sh

bench: build
	/usr/bin/python3 bench/bench_run.py
	/usr/bin/python3 bench/bench_daemon.py
	/usr/bin/python3 bench/bench_template.py

# The shipped recipes (recipes/): base, then python and code-interpreter (Debian's packages,
# a minute or two each).
templates: build
	$(BUILD)/cordon template build base -f recipes/base/Cordonfile
	$(BUILD)/cordon template build python -f recipes/python/Cordonfile
	$(BUILD)/cordon template build code-interpreter -f recipes/code-interpreter/Cordonfile

clean:
	rm -rf $(BUILD) build-asan build-fuzz
