/* cordon-init as a microVM's /init (src/runtime/microvm): the guest stage before cordon-init
 * proper. PID 1 mounts /dev, /proc and /sys, loads the modules of /lib/modules/order, mounts
 * the template's read-only disk and the scratch disk (found by their virtio-blk serials) and
 * an overlay of both, opens the virtio-serial ports by name, reads cordon-init's argv and
 * environment from the channel port, says hello on it, and runs cordon-init in the overlay
 * with the channel on fd 3 (and in one-shot mode the stdio ports on 0-2). It reaps orphans
 * and powers the VM off when cordon-init ends; any failure powers it off too, with a line on
 * the console. The port and disk names are the host's (microvm.h: the same strings). */
#pragma once

_Noreturn void vm_main(void);
