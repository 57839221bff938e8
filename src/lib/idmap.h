/* Host uid/gid ranges for sandboxes, and the user namespace maps that use them.
 *
 * As root, every live sandbox holds one slot: a lock file in /run/cordon/slots (host-wide) and the
 * host id range CORDON_IDMAP_BASE + slot * 65536 .. + 65535, so that sandbox root is never host
 * root and two live sandboxes never share a host uid. The slot is a flock(2): the kernel drops
 * it when the holder dies, even by SIGKILL, so a crash cannot leak a range.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

/* 0x70000000 stays clear of systemd's container range (0x80000..0x6fffffff) and of its
 * foreign range (0x7ffe0000..), see docs/ARCHITECTURE.md. */
#define CORDON_IDMAP_BASE  0x70000000u
#define CORDON_IDMAP_SIZE  65536u
#define CORDON_IDMAP_SLOTS 2048u

struct idmap_slot {
	int lock_fd; /* -1 when not held */
	unsigned slot;
};

/* Takes a free slot. */
int idmap_slot_acquire(struct idmap_slot *ret, struct cordon_err *err);
void idmap_slot_release(struct idmap_slot *s);
/* True if nobody holds @slot (then it is ours until idmap_slot_release()). */
int idmap_slot_try(unsigned slot, struct idmap_slot *ret);

uid_t idmap_slot_base(const struct idmap_slot *s);

/* Writes @pid's uid_map and gid_map: the whole range when @s is set, else the single mapping
 * @inside_id -> the caller's uid/gid (setgroups denied, as the kernel requires). */
int idmap_write(pid_t pid, const struct idmap_slot *s, uid_t inside_id, struct cordon_err *err);
