/* preload.h */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "init/preload.h"

#define VAR "LD_PRELOAD="

static char lib[PATH_MAX];

void preload_take(void)
{
	const char *p = getenv("CORDON_INIT_PRELOAD");
	/* ld.so splits the list on spaces and colons: a path with either is not ours */
	if (p && p[0] == '/' && strlen(p) < sizeof(lib) && !strpbrk(p, ": \t\n"))
		strcpy(lib, p);
	unsetenv("CORDON_INIT_PRELOAD");
}

char **preload_env(char *const envp[])
{
	size_t n = 0, k = 0;
	if (!lib[0])
		return (char **)envp;
	while (envp[n])
		n++;
	char **e = calloc(n + 2, sizeof(*e));
	char *var = malloc(sizeof(VAR) + strlen(lib) + 1);
	if (!e || !var)
		return (char **)envp;
	strcpy(stpcpy(var, VAR), lib);
	e[k++] = var;
	for (size_t i = 0; i < n; i++) {
		const char *theirs = envp[i] + sizeof(VAR) - 1;
		if (strncmp(envp[i], VAR, sizeof(VAR) - 1) != 0) {
			e[k++] = envp[i];
		} else if (*theirs && (var = malloc(strlen(e[0]) + strlen(theirs) + 2))) {
			sprintf(var, "%s:%s", e[0], theirs);
			e[0] = var;
		}
	}
	return e;
}
