/* cordon-init's argv and environment (initargs.h). */
#include <ctype.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "basic/cleanup.h"
#include "lib/initproto.h"
#include "runtime/initargs.h"

static bool valid_term(const char *t)
{
	if (!t || !*t || strlen(t) > 64)
		return false;
	for (; *t; t++)
		if (!(isalnum((unsigned char)*t) || strchr("._+-", *t)))
			return false;
	return true;
}

static bool env_has(const struct cordon_spec *spec, const char *kv)
{
	size_t len = strcspn(kv, "=") + 1;
	for (size_t i = 0; i < spec->n_env; i++)
		if (strncmp(spec->env[i], kv, len) == 0)
			return true;
	return false;
}

int init_args_make(struct init_args *a, const struct cordon_spec *spec, const char *agent_socket,
		   struct cordon_err *err)
{
	bool root = spec->user == CORDON_USER_ROOT;
	const char *term = getenv("TERM");
	size_t n = 0;

	a->envp = calloc(spec->n_env + 5, sizeof(char *));
	if (!a->envp)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	/* The caller's entries first, then the defaults it did not set. */
	for (size_t i = 0; i < spec->n_env; i++)
		a->envp[n++] = strdup(spec->env[i]);
	char *defaults[] = {
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		root ? "HOME=/root" : "HOME=/home/user",
		"LANG=C.UTF-8",
		NULL,
	};
	char termvar[80];
	snprintf(termvar, sizeof(termvar), "TERM=%s", valid_term(term) ? term : "dumb");
	defaults[3] = termvar;
	for (size_t d = 0; d < ELEMENTSOF(defaults); d++)
		if (!env_has(spec, defaults[d]))
			a->envp[n++] = strdup(defaults[d]);
	for (size_t i = 0; i < n; i++)
		if (!a->envp[i])
			return cordon_err_setf(err, -ENOMEM, "out of memory");

	size_t argc = 0;
	for (char *const *p = spec->argv; p && *p; p++)
		argc++;
	a->argv = calloc(argc + 6, sizeof(char *));
	if (!a->argv)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	size_t k = 0;
	a->argv[k++] = "cordon-init";
	if (!spec->argv) {
		a->argv[k++] = "--agent";
		if (agent_socket) {
			a->argv[k++] = "--connect";
			a->argv[k++] = (char *)agent_socket;
		}
		return 0;
	}
	a->argv[k++] = "--run";
	a->argv[k++] = "--workdir";
	a->argv[k++] = (char *)(spec->workdir ? spec->workdir : root ? "/root" : "/home/user");
	a->argv[k++] = "--";
	for (size_t i = 0; i < argc; i++)
		a->argv[k++] = spec->argv[i];
	return 0;
}

void init_args_free(struct init_args *a)
{
	for (char **e = a->envp; e && *e; e++)
		free(*e);
	free(a->envp);
	free(a->argv);
	a->envp = a->argv = NULL;
}

uint64_t init_caps(const struct cordon_spec *spec)
{
	uint64_t root = CAPS_SANDBOX_ROOT;
	if (!spec->argv)
		return CAPS_INIT_AGENT | root;
	return spec->user == CORDON_USER_ROOT ? root : 0;
}

int init_status_read(int fd, struct cordon_result *res)
{
	struct init_status st = {};
	if (recv(fd, &st, sizeof(st), MSG_DONTWAIT) != (ssize_t)sizeof(st))
		return -ENODATA;
	if (st.kind == INIT_EXITED)
		res->exit_code = st.value & 0xff;
	else if (st.kind == INIT_SIGNALED && st.value > 0 && st.value < 65)
		res->signal = st.value;
	else if (st.kind == INIT_EXEC_FAILED)
		res->exit_code = st.value == ENOENT ? CORDON_EXIT_NOTFOUND : CORDON_EXIT_NOEXEC;
	else if (st.kind == INIT_CWD_FAILED)
		res->exit_code = CORDON_EXIT_SETUP;
	else
		return -ENODATA;
	return 0;
}
