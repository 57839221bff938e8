/* The `microvm` runtime: cordon-init in a guest of its own, a Linux kernel under QEMU's
 * `microvm` machine (KVM where it runs the guest, TCG otherwise).
 *
 * The guest's disks are the template as a read-only erofs image (made once per template
 * version, image.c) and the sandbox's sparse ext4 scratch; its initramfs is cordon-init,
 * whose guest stage (src/init/vm.c) loads the virtio modules, mounts the overlay and runs
 * cordon-init with fd 3 on the virtio-serial port MICROVM_PORT_CHANNEL: the agent's frame
 * stream in agent mode, the one-shot status otherwise (the jail's contract, initproto.h).
 * cordon-init's argv and environment go first on that channel (microvm_args_send()).
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "runtime/microvm/microvm.h"
#include "runtime/runtime.h"

static int microvm_available(struct cordon_err *err)
{
	return microvm_probe(NULL, err);
}

static const char *microvm_mode(char *why, size_t size)
{
	const struct microvm_host *h;
	if (microvm_probe(&h, NULL) < 0)
		return "";
	snprintf(why, size, "%s", h->why_tcg);
	return h->accel;
}

static int microvm_start(struct cordon_sandbox *sb, const struct cordon_spec *spec,
			 struct cordon_err *err)
{
	(void)sb;
	(void)spec;
	return cordon_err_setf(err, -EOPNOTSUPP, "runtime 'microvm': sandboxes not built yet");
}

const struct runtime_ops microvm_ops = {
    .name = "microvm",
    .strength = 30,
    .caps = 0,
    .size = sizeof(struct cordon_sandbox),
    .available = microvm_available,
    .mode = microvm_mode,
    .start = microvm_start,
};
