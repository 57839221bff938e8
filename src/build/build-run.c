/* RUN: a build step in a jail over the layers so far (build-int.h). */
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/utf8.h"
#include "build/build-int.h"
#include "image/store.h"
#include "image/layer.h"
#include "image/recipe.h"
#include "net/aptsources.h"
#include "net/egressctl.h"

static void add_allow(struct build *b, const char *uri)
{
	char rule[256];
	if (b->n_allow >= MAX_ALLOW || aptsources_rule(uri, rule, sizeof(rule)) < 0)
		return;
	for (size_t i = 0; i < b->n_allow; i++)
		if (strcmp(b->allow[i], rule) == 0)
			return;
	snprintf(b->allow_buf[b->n_allow], sizeof(b->allow_buf[0]), "%s", rule);
	b->allow[b->n_allow] = b->allow_buf[b->n_allow];
	b->n_allow++;
}

static void note_uri(const char *uri, void *arg)
{
	struct build *b = arg;
	size_t n = strlen(uri);
	while (n && uri[n - 1] == '/')
		n--;
	if (strncmp(uri, "http", 4) != 0)
		return;
	add_allow(b, uri);
	if (n >= 16 && strncmp(uri + n - 16, "/debian-security", 16) == 0 && !b->security[0])
		snprintf(b->security, sizeof(b->security), "%.*s", (int)n, uri);
	else if (n >= 7 && strncmp(uri + n - 7, "/debian", 7) == 0 && !b->mirror[0])
		snprintf(b->mirror, sizeof(b->mirror), "%.*s", (int)n, uri);
}

/* The host's mirrors (net/aptsources.c): what RUN steps may reach, and FROM debian's mirror. */
void bld_scan_sources(struct build *b)
{
	aptsources_scan(note_uri, b);
}

static int egress_hook(void *data, const char *ip, const char *ifname, struct cordon_err *err)
{
	struct build *b = data;
	char id[32];
	snprintf(id, sizeof(id), "build-%d", (int)getpid());
	_cleanup_free_ char *line = egressctl_set_line(ip, id, "allow", b->allow, b->n_allow, ifname);
	if (!line)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	return egressctl_request(&b->egress, line, err);
}

/* Running a command in a build jail, its output as log events. */

/* A step's output as a log event: valid UTF-8 (what JSON carries), a bad byte shown as
 * U+FFFD, a character split between two reads joined again. */
void bld_emit_log(struct build *b, const char *buf, size_t n)
{
	char out[3 * (8192 + 4)];
	unsigned char in[8192 + 4];
	size_t m, cut;
	memcpy(in, b->carry, b->n_carry);
	m = b->n_carry + (n > sizeof(in) - b->n_carry ? sizeof(in) - b->n_carry : n);
	memcpy(in + b->n_carry, buf, m - b->n_carry);
	size_t k = utf8_clean(in, m, out, true, &cut);
	b->n_carry = cut; /* a character cut by the end of this read: the rest comes next */
	memcpy(b->carry, in + m - cut, cut);
	if (k)
		bld_emit(b, json_pack("{s:s, s:I, s:s%}", "event", "log", "step", (json_int_t)b->step, "data", out, k));
}

/* What is left of a character cut at the end of the output. */
void bld_flush_log(struct build *b)
{
	if (b->n_carry) {
		b->n_carry = 0;
		bld_emit(b, json_pack("{s:s, s:I, s:s}", "event", "log", "step", (json_int_t)b->step, "data",
				  "\xef\xbf\xbd"));
	}
}

/* Reads the step's output until PID 1 is gone or the deadline passes. */
static void pump_output(struct build *b, struct cordon_sandbox *sb, int rfd, uint64_t timeout_ms)
{
	struct pollfd p[2] = {{.fd = rfd, .events = POLLIN}, {.fd = cordon_sandbox_pidfd(sb), .events = POLLIN}};
	double deadline = bld_now() + timeout_ms / 1000.0;
	char buf[8192];
	for (;;) {
		int left = (int)((deadline - bld_now()) * 1000);
		if (left <= 0)
			return; /* cordon_sandbox_wait() kills it at the deadline */
		if (poll(p, 2, left) < 0 && errno != EINTR)
			return;
		if (p[0].revents & (POLLIN | POLLHUP)) {
			ssize_t n = read(rfd, buf, sizeof(buf));
			if (n > 0) {
				bld_emit_log(b, buf, n);
				continue;
			}
			if (n == 0)
				p[0].fd = -1;
		}
		if (p[1].revents & POLLIN) {
			ssize_t n;
			while ((n = read(rfd, buf, sizeof(buf))) > 0) /* the rest, then done */
				bld_emit_log(b, buf, n);
			return;
		}
		if (p[0].fd < 0 && p[1].fd < 0)
			return;
	}
}

static int result_error(struct build *b, const struct cordon_result *res)
{
	if (res->timed_out)
		return cordon_err_setf(b->err, -ETIMEDOUT, "timed out");
	if (res->oom_killed)
		return cordon_err_setf(b->err, -ENOMEM, "killed at the memory limit");
	if (res->signal)
		return cordon_err_setf(b->err, -ECANCELED, "killed by signal %d", res->signal);
	return cordon_err_setf(b->err, -ECANCELED, "exited with status %d", res->exit_code);
}

/* Runs @jr in a jail on the overlay of the layers so far with the scratch upper. Returns
 * the sandbox's host root id (for layer_capture), or -errno. */
int64_t bld_run_in_jail(struct build *b, const struct jail_run *jr)
{
	char upper[PATH_MAX], workd[PATH_MAX];
	const char *lower[MAX_LAYERS];
	for (size_t i = 0; i < b->n_lowers; i++)
		lower[i] = b->lowers[b->n_lowers - 1 - i];
	snprintf(upper, sizeof(upper), "%s/up/diff", b->work);
	snprintf(workd, sizeof(workd), "%s/up/work", b->work);
	char stage[PATH_MAX];
	snprintf(stage, sizeof(stage), "%s/up", b->work);
	struct cordon_overlay ov = {.lower = lower, .n_lower = b->n_lowers, .upper = upper, .work = workd,
				    .stage = stage};
	struct cordon_spec spec;
	cordon_spec_init(&spec);
	spec.runtime = "jail"; /* RUN steps need the overlay build mode, which only the jail has */
	spec.overlay = &ov;
	spec.argv = jr->argv;
	spec.user = jr->user;
	spec.workdir = jr->workdir ? jr->workdir : "/";
	spec.env = jr->env;
	spec.n_env = jr->n_env;
	spec.memory_bytes = b->o->memory_bytes ? b->o->memory_bytes : 4ULL << 30;
	spec.cpus_milli = b->o->cpus_milli ? b->o->cpus_milli : 2000;
	spec.pids = b->o->pids ? b->o->pids : 4096;
	spec.timeout_ms = b->o->step_timeout_ms ? b->o->step_timeout_ms : 3600 * 1000;
	spec.hostname = "cordon-build";
	if (jr->network && b->n_allow > 0) {
		if (b->egress.fd < 0 && egressctl_spawn(&b->egress, b->err) < 0)
			return b->err->code;
		spec.net = CORDON_NET_EGRESS;
		spec.net_hook = egress_hook;
		spec.net_hook_data = b;
	}
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return cordon_err_set(b->err, -errno, "pipe");
	_cleanup_close_ int rfd = pipefd[0];
	struct cordon_sandbox *sb = NULL;
	/* stdin /dev/null (the -1 of cordon_spec_init()), stdout and stderr the log pipe. */
	spec.stdio[1] = spec.stdio[2] = pipefd[1];
	int r = cordon_sandbox_create(&spec, &sb, b->err);
	close(pipefd[1]);
	if (r < 0)
		return r;
	pump_output(b, sb, rfd, spec.timeout_ms);
	bld_flush_log(b);
	struct cordon_result res;
	uid_t base = cordon_sandbox_host_uid(sb);
	r = cordon_sandbox_wait(sb, -1, &res);
	cordon_sandbox_free(sb);
	if (r < 0)
		return cordon_err_set(b->err, r, "wait");
	if (res.exit_code != 0 || res.signal || res.timed_out)
		return result_error(b, &res);
	return base;
}

/* The environment of a step: ENV, then build arguments (the first of a name wins, and the
 * jail adds PATH, HOME and LANG where they are not set). */
static size_t step_env(struct build *b, const char **env, size_t max)
{
	size_t n = 0;
	for (size_t i = 0; i < json_array_size(b->env) && n < max; i++)
		env[n++] = json_string_value(json_array_get(b->env, i));
	for (size_t i = 0; i < b->recipe->n_build_env && n < max; i++)
		if (bld_arg_in_scope(b, b->recipe->build_env[i]))
			env[n++] = b->recipe->build_env[i];
	return n;
}

int bld_run_step(struct build *b, const struct recipe_step *s, const char *key)
{
	const char *env[CORDON_MAX_ENV];
	struct jail_run jr = {.argv = s->argv, .network = true, .workdir = b->workdir, .env = env};
	if (store_user(b->user, &jr.user) < 0)
		return cordon_err_setf(b->err, -EINVAL, "USER '%s': steps run as root (0) or user (1000)", b->user);
	jr.n_env = step_env(b, env, ELEMENTSOF(env));
	char up[PATH_MAX];
	int r = bld_mount_scratch(b, up, sizeof(up));
	int64_t base = r < 0 ? r : bld_run_in_jail(b, &jr);
	if (base >= 0)
		r = bld_capture_commit(b, key, s->text, (uid_t)base);
	else
		r = (int)base;
	bld_umount_scratch(b);
	return r;
}

