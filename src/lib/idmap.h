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

/* Which slots were locked when it was read: /proc/locks' flocks matched to the slot files'
 * inodes, two reads instead of an open, flock and close per slot. A hint only, never the
 * decision: a slot it calls free is still taken by flock(), and one freed since it was read
 * waits for the next look. All zero (every slot worth a try) where it cannot be read. */
struct idmap_held {
	uint64_t bits[CORDON_IDMAP_SLOTS / 64];
};

void idmap_held_load(struct idmap_held *ret);
bool idmap_held_test(const struct idmap_held *h, unsigned slot);

/* Takes a free slot. */
int idmap_slot_acquire(struct idmap_slot *ret, struct cordon_err *err);
void idmap_slot_release(struct idmap_slot *s);
/* True if nobody holds @slot (then it is ours until idmap_slot_release()). */
int idmap_slot_try(unsigned slot, struct idmap_slot *ret);

uid_t idmap_slot_base(const struct idmap_slot *s);

/* Writes @pid's uid_map and gid_map: the whole range when @s is set, else the single mapping
 * @inside_id -> the caller's uid/gid (setgroups denied, as the kernel requires). */
int idmap_write(pid_t pid, const struct idmap_slot *s, uid_t inside_id, struct cordon_err *err);
