/* What cordon-init tells the host in one-shot mode, on fd 3, just before it exits: how the
 * command ended. The host trusts none of it beyond choosing an exit code (the sandbox is
 * already hostile territory), and it clamps every value. */
#pragma once

#include <stdint.h>

#define INIT_STATUS_FD 3
#define INIT_AGENT_FD  3

enum init_status_kind {
	INIT_EXITED = 1,      /* value: exit code */
	INIT_SIGNALED = 2,    /* value: signal number */
	INIT_EXEC_FAILED = 3, /* value: errno of execve */
	INIT_CWD_FAILED = 4,  /* value: errno of chdir */
};

struct init_status {
	int32_t kind;
	int32_t value;
};
