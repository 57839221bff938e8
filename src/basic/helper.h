/* Finding our own helper binaries (cordon-init, cordon-egress, cordon-audit). */
#pragma once

#include <stddef.h>

/* $@env (an absolute path) if set, else @name beside our own binary, else the installed
 * copy in CORDON_LIBEXECDIR. Fills @path; returns 0, or -ENOENT (with the last tried path). */
int helper_path(const char *name, const char *env, char *path, size_t size);
