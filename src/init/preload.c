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

/* One allocation: the pointer array, then the LD_PRELOAD entry (ours, and theirs after it
 * when they set one; a second LD_PRELOAD of theirs is dropped, the first is what ld.so
 * reads). */
char **preload_env(char *const envp[])
{
	size_t n = 0, k = 0;
	const char *theirs = NULL;
	if (!lib[0])
		return (char **)envp;
	for (; envp[n]; n++)
		if (!theirs && strncmp(envp[n], VAR, sizeof(VAR) - 1) == 0)
			theirs = envp[n] + sizeof(VAR) - 1;
	size_t var_len = sizeof(VAR) + strlen(lib) + (theirs && *theirs ? strlen(theirs) + 1 : 0);
	char **e = malloc((n + 2) * sizeof(*e) + var_len);
	if (!e)
		return (char **)envp;
	char *var = (char *)(e + n + 2);
	if (theirs && *theirs)
		sprintf(var, "%s%s:%s", VAR, lib, theirs);
	else
		sprintf(var, "%s%s", VAR, lib);
	e[k++] = var;
	for (size_t i = 0; i < n; i++)
		if (strncmp(envp[i], VAR, sizeof(VAR) - 1) != 0)
			e[k++] = envp[i];
	e[k] = NULL;
	return e;
}

void preload_env_free(char **e, char *const envp[])
{
	if (e != (char **)envp)
		free(e);
}
