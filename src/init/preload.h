/* A library every program cordon-init starts preloads, when the runtime names one: the gvisor
 * runtime's stat shim (src/runtime/gvisor/stat-compat.c). */
#pragma once

/* Takes CORDON_INIT_PRELOAD out of our environment (an absolute path, else ignored): called
 * once, first thing. */
void preload_take(void);
/* @envp with our library first in LD_PRELOAD, ahead of one the caller set; @envp itself when
 * there is none (or no memory). Made before the child starts (it runs in our memory and
 * allocates nothing); preload_env_free() after. */
char **preload_env(char *const envp[]);
void preload_env_free(char **e, char *const envp[]);
