#pragma once

#include <stddef.h>

/* Blocks @sigs and returns a CLOEXEC, non-blocking signalfd that reads them, or -1. */
int sigfd_block(const int *sigs, size_t n);
