/* Capabilities and resource limits of a sandbox's first process. Async-signal-safe. */
#pragma once

#include <stdint.h>
#include <linux/capability.h>

#include <cordon/err.h>

#include "lib/initproto.h" /* CAP_BIT, CAPS_SANDBOX_ROOT: shared with cordon-init */

/* Drops every capability not in @keep from the bounding and ambient sets. Needs CAP_SETPCAP:
 * call it before giving up root. */
int caps_drop_bounding(uint64_t keep, struct cordon_err *err);

/* Sets the permitted and effective sets to @keep and the inheritable set to nothing. */
int caps_set(uint64_t keep, struct cordon_err *err);

struct rlimit_spec {
	uint64_t nofile, nproc, fsize, core, memlock, msgqueue, sigpending;
};

int rlimits_apply(const struct rlimit_spec *r, struct cordon_err *err);
