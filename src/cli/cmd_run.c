/* cordon run [OPTIONS] [--] CMD [ARGS...]: one command, one fresh sandbox, nothing left after. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/parse.h"
#include "basic/host.h"
#include "basic/log.h"
#include "basic/sigfd.h"
#include "cli/cli.h"
#include "cli/opts.h"
#include "cli/run-secrets.h"
#include "cli/tty.h"
#include "lib/rootfs.h"
#include "net/egressctl.h"
#include "image/store.h"
#include "policy/egress.h"


enum run_net { RUN_NET_NONE, RUN_NET_ALLOW, RUN_NET_PUBLIC };

struct run_ctx {
	struct cordon_spec spec;
	const char *env[CORDON_MAX_ENV];
	char *bind_buf[CORDON_MAX_BINDS];
	enum run_net net;
	const char *allow[EGRESS_RULES_MAX];
	size_t n_allow;
	struct egressctl egress;
	struct store_version version; /* the template's, held until the sandbox is gone */
	bool net_set;
	struct run_secrets secrets;
	struct run_volumes volumes;
	const char *template_name;
	bool user_set, workdir_set;
	struct store_config template; /* what its template.json says */
	char **wrapped;         /* argv with the template's START and READY in front */
	int json_fd;
	bool tty;               /* -t: the command's stdio is a PTY of ours, relayed */
};

/* ---- the options (opts.h) into the spec: what only a one-shot run checks ---- */

/* Below @min the jail refuses anyway; say so as a usage error. */
static int size_at_least(const char *name, uint64_t v, uint64_t min)
{
	if (v >= min)
		return 0;
	log_error("--%s: expected a size of at least %lluM, such as 512 (MiB), 512M or 2G", name,
		  (unsigned long long)(min >> 20));
	return -EINVAL;
}

/* More than the host has could never be honoured: refused, as cordond refuses it. */
static int use_memory(struct run_ctx *c, const struct cli_values *v)
{
	uint64_t host;
	if (v->memory_bytes == CLI_UNSET)
		return 0;
	c->spec.memory_bytes = v->memory_bytes;
	if (size_at_least("memory", v->memory_bytes, 8ULL << 20) < 0)
		return -EINVAL;
	if (host_memory_bytes(&host) == 0 && v->memory_bytes > host) {
		log_error("--memory %lluM: this host has %llu MiB of memory",
			  (unsigned long long)(v->memory_bytes >> 20), (unsigned long long)(host >> 20));
		return -EINVAL;
	}
	return 0;
}

static int use_disk(struct run_ctx *c, const struct cli_values *v)
{
	if (v->disk_bytes == CLI_UNSET)
		return 0;
	c->spec.disk_bytes = v->disk_bytes;
	return size_at_least("disk", v->disk_bytes, 1ULL << 20);
}

static int use_cpus(struct run_ctx *c, const struct cli_values *v)
{
	uint32_t host = host_cpus_milli();
	if (v->cpus_milli == CLI_UNSET)
		return 0;
	c->spec.cpus_milli = (uint32_t)v->cpus_milli;
	if (c->spec.cpus_milli > host) {
		log_error("--cpus '%g': this host has %g CPUs", v->cpus_milli / 1000.0, host / 1000.0);
		return -EINVAL;
	}
	return 0;
}

static int use_numbers(struct run_ctx *c, const struct cli_values *v)
{
	if (v->pids != CLI_UNSET)
		c->spec.pids = v->pids;
	if (v->timeout_ms != CLI_UNSET)
		c->spec.timeout_ms = v->timeout_ms;
	if (v->json_result_fd == CLI_UNSET)
		return 0;
	if (fcntl((int)v->json_result_fd, F_GETFD) < 0) {
		log_error("--json-result '%llu': expected an open file descriptor",
			  (unsigned long long)v->json_result_fd);
		return -EBADF;
	}
	c->json_fd = (int)v->json_result_fd;
	return 0;
}

/* Resolved now, so that a runtime this host cannot run is a usage error naming the ones it can. */
static int use_runtime(struct run_ctx *c, const struct cli_values *v)
{
	struct cordon_err err = {};
	if (v->runtime && cordon_runtime_resolve(v->runtime, &c->spec.runtime, &err) < 0) {
		log_error("--runtime: %s", err.msg);
		return -EINVAL;
	}
	return 0;
}

static int use_env(struct run_ctx *c, const struct cli_values *v)
{
	if (v->env.n > CORDON_MAX_ENV) {
		log_error("--env: at most %d entries", CORDON_MAX_ENV);
		return -E2BIG;
	}
	for (size_t i = 0; i < v->env.n; i++)
		c->env[c->spec.n_env++] = v->env.v[i];
	return 0;
}

/* -t: a terminal, and our TERM in the command's environment unless --env gave one. */
static int use_tty(struct run_ctx *c, const struct cli_values *v)
{
	static char term[128];
	const char *t = getenv("TERM");
	/* runsc shows a donated terminal to the sandbox as a plain file (no tty ioctls), and
	 * microvm's stdio is a pump: only the jail hands the command a terminal */
	if (v->tty && c->spec.runtime && strcmp(c->spec.runtime, "jail") != 0) {
		log_error("-t: only the jail runtime gives a one-shot command a terminal "
			  "(cordond's `cordon exec -t` works on every runtime)");
		return -EINVAL;
	}
	c->tty = v->tty;
	if (!v->tty || !t || !*t || strlen(t) >= sizeof(term) - 5)
		return 0;
	for (size_t i = 0; i < c->spec.n_env; i++)
		if (strncmp(c->env[i], "TERM=", 5) == 0)
			return 0;
	if (c->spec.n_env >= CORDON_MAX_ENV)
		return 0;
	snprintf(term, sizeof(term), "TERM=%s", t);
	c->env[c->spec.n_env++] = term;
	return 0;
}

static int use_user(struct run_ctx *c, const struct cli_values *v)
{
	if (v->workdir) {
		c->spec.workdir = v->workdir;
		c->workdir_set = true;
	}
	if (v->user) {
		c->spec.user = strcmp(v->user, "root") == 0 ? CORDON_USER_ROOT : CORDON_USER_USER;
		c->user_set = true;
	}
	return 0;
}

static int use_bind(struct run_ctx *c, const char *a)
{
	const char *colon = strchr(a, ':');
	struct cordon_err err = {};

	if (c->spec.n_binds >= CORDON_MAX_BINDS) {
		log_error("--ro-bind: at most %d", CORDON_MAX_BINDS);
		return -E2BIG;
	}
	char *host = strndup(a, colon - a);
	if (!host)
		return -ENOMEM;
	c->bind_buf[c->spec.n_binds] = host;
	c->spec.binds[c->spec.n_binds++] = (struct cordon_bind){host, (char *)colon + 1};
	if (rootfs_check_sandbox_path(colon + 1, &err) < 0) {
		log_error("--ro-bind %s", err.msg);
		return -EINVAL;
	}
	return 0;
}

static int use_binds(struct run_ctx *c, const struct cli_values *v)
{
	for (size_t i = 0; i < v->ro_bind.n; i++)
		if (use_bind(c, v->ro_bind.v[i]) < 0)
			return -EINVAL;
	return 0;
}

static int use_volumes(struct run_ctx *c, const struct cli_values *v)
{
	for (size_t i = 0; i < v->volume.n; i++)
		if (run_volumes_add(&c->volumes, v->volume.v[i]) < 0)
			return -EINVAL;
	return 0;
}

static int use_net(struct run_ctx *c, const struct cli_values *v)
{
	static const char *const names[] = {"none", "allow", "public"};
	for (size_t i = 0; v->net && i < ELEMENTSOF(names); i++)
		if (strcmp(v->net, names[i]) == 0)
			c->net = (enum run_net)i;
	c->net_set = v->net;
	for (size_t i = 0; i < v->allow.n; i++)
		c->allow[c->n_allow++] = v->allow.v[i];
	if (v->allow.n && !v->net)
		c->net = RUN_NET_ALLOW;
	return 0;
}

/* Every --secret before the --secret-in that names it. An inline value is overwritten in
 * argv's own (writable) bytes. */
static int use_secrets(struct run_ctx *c, const struct cli_values *v)
{
	for (size_t i = 0; i < v->secret.n; i++)
		if (run_secret_add(&c->secrets, (char *)v->secret.v[i]) < 0)
			return -EINVAL;
	for (size_t i = 0; i < v->secret_in.n; i++)
		if (run_secret_in(&c->secrets, v->secret_in.v[i]) < 0)
			return -EINVAL;
	return 0;
}

/* The version the template's name points to now is held until we exit: a rebuild or a
 * removal meanwhile does not touch the sandbox's tree. --rootfs, when given too, wins. */
static int use_template(struct run_ctx *c, const struct cli_values *v)
{
	struct cordon_err err = {};
	const char *a = v->template;
	if (a && strcmp(a, "host") != 0) {
		int r = store_version_open(a, &c->version, &err);
		if (r == -ENOENT)
			log_error("--template '%s': no such template (cordon template ls)", a);
		else if (r == -EINVAL && !store_name_valid(a))
			log_error("--template '%s': not a template name ([a-z0-9][a-z0-9._-]*)", a);
		else if (r < 0)
			log_error("--template '%s': %s", a, err.msg);
		if (r < 0)
			return r;
		c->spec.rootfs = c->version.rootfs;
		c->template_name = a;
	}
	if (v->rootfs)
		c->spec.rootfs = v->rootfs;
	return 0;
}

static int (*const run_uses[])(struct run_ctx *c, const struct cli_values *v) = {
	use_memory, use_disk, use_cpus, use_numbers, use_runtime, use_env, use_user, use_binds,
	use_volumes, use_net, use_secrets, use_template, use_tty,
};

static int use_options(struct run_ctx *c, const struct cli_values *v)
{
	for (size_t i = 0; i < ELEMENTSOF(run_uses); i++)
		if (run_uses[i](c, v) < 0)
			return -EINVAL;
	return 0;
}

/* A growing string for the script below. */
struct script {
	char *buf;
	size_t len;
	bool oom;
};

static void script_add(struct script *sc, const char *s, size_t n)
{
	char *nb = sc->oom ? NULL : realloc(sc->buf, sc->len + n + 1);
	if (!nb) {
		sc->oom = true;
		return;
	}
	memcpy(nb + sc->len, s, n);
	sc->buf = nb;
	sc->len += n;
	nb[sc->len] = '\0';
}

static void script_str(struct script *sc, const char *s)
{
	script_add(sc, s, strlen(s));
}

/* Each word quoted for the shell: it's -> 'it'\''s'. */
static int script_argv(struct script *sc, json_t *argv)
{
	size_t i;
	json_t *a;
	json_array_foreach(argv, i, a) {
		if (!json_is_string(a))
			return -EINVAL;
		script_str(sc, " '");
		for (const char *w = json_string_value(a); *w; w++)
			*w == '\'' ? script_str(sc, "'\\''") : script_add(sc, w, 1);
		script_str(sc, "'");
	}
	return 0;
}

/* A template's START and READY in one-shot mode: a shell starts START in the background,
 * waits until READY succeeds (30 s at most), then execs the command. */
static int wrap_start_ready(struct run_ctx *c, char **argv)
{
	json_t *start = c->template.start, *ready = c->template.ready;
	struct script sc = {0};
	size_t argc = 0;
	if (!start && !ready)
		return 0;
	if (start) {
		script_str(&sc, "(exec");
		if (script_argv(&sc, start) < 0)
			goto bad;
		script_str(&sc, ") </dev/null >/dev/null 2>&1 &\n");
	}
	if (ready) {
		script_str(&sc, "i=0; until");
		if (script_argv(&sc, ready) < 0)
			goto bad;
		script_str(&sc, " >/dev/null 2>&1; do i=$((i+1)); if [ $i -ge 300 ]; then "
				"echo 'cordon: the template'\\''s READY check did not pass in 30 s' >&2; "
				"exit 125; fi; sleep 0.1; done\n");
	}
	script_str(&sc, "exec \"$@\"");
	for (char **a = argv; *a; a++)
		argc++;
	if (sc.oom || !(c->wrapped = calloc(argc + 5, sizeof(char *))))
		goto bad;
	c->wrapped[0] = "/bin/sh";
	c->wrapped[1] = "-c";
	c->wrapped[2] = sc.buf;
	c->wrapped[3] = "sh";
	memcpy(c->wrapped + 4, argv, argc * sizeof(char *));
	c->spec.argv = c->wrapped;
	return 0;
bad:
	free(sc.buf);
	return -EINVAL;
}

/* What a template says about running it (template.json): its environment under --env, its
 * working directory and user unless given, START and READY around the command. */
static int apply_template(struct run_ctx *c, char **argv)
{
	struct cordon_err err = {};
	if (!c->template_name)
		return 0;
	if (store_config_read(&c->version, &c->template, &err) < 0) {
		log_error("--template '%s': %s", c->template_name, err.msg);
		return CORDON_EXIT_USAGE;
	}
	for (size_t i = 0; i < c->template.n_env && c->spec.n_env < CORDON_MAX_ENV; i++)
		c->env[c->spec.n_env++] = c->template.env[i]; /* after --env: theirs win */
	if (!c->workdir_set && c->template.workdir)
		c->spec.workdir = c->template.workdir;
	if (!c->user_set && c->template.user_set)
		c->spec.user = c->template.user;
	if (wrap_start_ready(c, argv) < 0) {
		log_error("--template '%s': bad START or READY in template.json", c->template_name);
		return CORDON_EXIT_USAGE;
	}
	return 0;
}

static int run_usage(FILE *f)
{
	cli_print_usage(f, CLI_RUN, "run [OPTIONS] [--] CMD [ARGS...]");
	fprintf(f, "\nSIZE: a bare number is MiB (512); K, M, G, T suffixes are binary (256M, 2G);\n"
		   "B is bytes. DURATION: 30s, 500ms, 5m, 2h; a bare number is seconds.\n");
	fprintf(f, "\nexit status: CMD's; 128+N if it died of signal N; %d timeout, %d out of memory,\n"
		   "%d sandbox setup failed, %d not executable, %d not found, %d usage.\n",
		CORDON_EXIT_TIMEOUT, CORDON_EXIT_OOM, CORDON_EXIT_SETUP, CORDON_EXIT_NOEXEC,
		CORDON_EXIT_NOTFOUND, CORDON_EXIT_USAGE);
	return f == stderr ? CORDON_EXIT_USAGE : 0;
}

static int exit_status(const struct cordon_spec *spec, const struct cordon_result *res)
{
	if (res->timed_out) {
		log_error("timed out after %llu ms", (unsigned long long)spec->timeout_ms);
		return CORDON_EXIT_TIMEOUT;
	}
	if (res->oom_killed && res->signal == SIGKILL) {
		log_error("out of memory: the sandbox hit its %llu MiB limit",
			  (unsigned long long)(spec->memory_bytes >> 20));
		return CORDON_EXIT_OOM;
	}
	return res->signal ? 128 + res->signal : res->exit_code;
}

static void write_json(int fd, const struct cordon_result *res, int status)
{
	_cleanup_(json_decrefp) json_t *o = json_pack(
		"{s:o, s:i, s:b, s:b, s:I, s:I, s:I, s:i}", "exit_code",
		res->signal ? json_null() : json_integer(res->exit_code), "signal", res->signal,
		"timed_out", res->timed_out, "oom_killed", res->oom_killed, "wall_ms",
		(json_int_t)res->wall_ms, "cpu_ms", (json_int_t)res->cpu_ms, "peak_memory_bytes",
		(json_int_t)res->peak_memory_bytes, "status", status);
	_cleanup_free_ char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
	if (s)
		dprintf(fd, "%s\n", s);
}

static int egress_hook(void *data, const char *ip, const char *ifname, struct cordon_err *err)
{
	struct run_ctx *c = data;
	static const char *const modes[] = {"deny", "allow", "public"};
	char id[32];
	snprintf(id, sizeof(id), "run-%d", (int)getpid());
	/* Our proxy also owns the interface's nftables entries: it adds them now and removes
	 * them when we are gone. */
	_cleanup_(json_decrefp) json_t *secrets = c->secrets.n ? run_secrets_json(&c->secrets) : NULL;
	char *line = (!c->secrets.n || secrets) ?
		egressctl_set_line_secrets(ip, id, modes[c->net], c->allow, c->n_allow, ifname, secrets) : NULL;
	if (!line)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	int r = egressctl_request(&c->egress, line, err);
	explicit_bzero(line, strlen(line)); /* it holds the secrets' values */
	free(line);
	return r;
}

/* --secret without --net: the network is --net allow with HOST:443 for each secret's hosts
 * (and any --allow given); with --net none it is a usage error. */
static int secrets_network(struct run_ctx *c)
{
	size_t n;
	if (c->net_set && c->net == RUN_NET_NONE) {
		log_error("--secret: needs a network, and --net none was given");
		return CORDON_EXIT_USAGE;
	}
	if (c->net_set)
		return 0;
	const char *const *rules = run_secrets_rules(&c->secrets, &n);
	c->net = RUN_NET_ALLOW;
	for (size_t i = 0; i < n; i++) {
		if (c->n_allow >= EGRESS_RULES_MAX) {
			log_error("--secret: at most %d --allow rules with the secrets' hosts", EGRESS_RULES_MAX);
			return CORDON_EXIT_USAGE;
		}
		c->allow[c->n_allow++] = rules[i];
	}
	return 0;
}

/* A network for the sandbox: the rules are checked here first, for a usage error rather
 * than a failed setup; then the host's nftables table and a proxy of our own. */
static int setup_network(struct run_ctx *c)
{
	struct cordon_err err = {};
	struct egress_policy *p = NULL;
	int r = c->secrets.n ? secrets_network(c) : 0;
	if (r)
		return r;
	enum egress_mode mode = c->net == RUN_NET_PUBLIC ? EGRESS_PUBLIC : EGRESS_ALLOW;
	if (c->net == RUN_NET_NONE)
		return 0;
	if (egress_policy_parse(mode, c->allow, c->n_allow, &p, &err) < 0) {
		log_error("--allow %s", err.msg);
		return CORDON_EXIT_USAGE;
	}
	egress_policy_free(p);
	if (geteuid() != 0) {
		log_error("--net %s: only root can give a sandbox a network", c->net == RUN_NET_PUBLIC ? "public" : "allow");
		return CORDON_EXIT_USAGE;
	}
	const char *ca_dir = getenv("CORDON_EGRESS_CA_DIR") ?: EGRESSCTL_CA_DIR;
	if (egressctl_spawn_ca(&c->egress, c->secrets.n ? ca_dir : NULL, &err) < 0) {
		log_error("sandbox setup failed: %s", err.msg);
		return CORDON_EXIT_SETUP;
	}
	if (c->secrets.n && run_secrets_prepare(&c->secrets, ca_dir, c->spec.rootfs, &c->spec, c->env, c->bind_buf) < 0)
		return CORDON_EXIT_SETUP;
	c->spec.net = CORDON_NET_EGRESS;
	c->spec.net_hook = egress_hook;
	c->spec.net_hook_data = c;
	return 0;
}

/* ---- -t: a PTY on the host whose slave is the command's stdio, relayed by a child ---- */

struct host_pty {
	int master, slave;
	pid_t relay;
};

static int pty_open(struct host_pty *p)
{
	char name[64];
	struct winsize ws;
	p->master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (p->master < 0 || grantpt(p->master) < 0 || unlockpt(p->master) < 0 ||
	    ptsname_r(p->master, name, sizeof(name)) != 0)
		return -errno;
	p->slave = open(name, O_RDWR | O_NOCTTY | O_CLOEXEC);
	if (p->slave < 0)
		return -errno;
	tty_size(STDIN_FILENO, &ws);
	return ioctl(p->master, TIOCSWINSZ, &ws) < 0 ? -errno : 0;
}

/* The relay: our stdin to the master, the master to our stdout, our window's size to the
 * master (checked every 200 ms: SIGWINCH is the sandbox's, forwarded by the wait). It ends
 * when the master reads EIO: every copy of the slave, the sandbox's included, is closed. */
static _Noreturn void pty_relay(int master)
{
	char buf[16384];
	struct winsize last, ws;
	bool in_open = true;
	tty_size(STDIN_FILENO, &last);
	(void)prctl(PR_SET_PDEATHSIG, SIGKILL);
	for (;;) {
		struct pollfd p[2] = {{in_open ? STDIN_FILENO : -1, POLLIN, 0}, {master, POLLIN, 0}};
		if (poll(p, 2, 200) < 0 && errno != EINTR)
			_exit(1);
		tty_size(STDIN_FILENO, &ws);
		if (ws.ws_col != last.ws_col || ws.ws_row != last.ws_row) {
			(void)ioctl(master, TIOCSWINSZ, &ws);
			last = ws;
		}
		if (p[0].revents) {
			ssize_t n = read(STDIN_FILENO, buf, sizeof(buf));
			in_open = n > 0;
			if (n > 0 && write_all(master, buf, (size_t)n) < 0)
				_exit(0);
		}
		if (p[1].revents) {
			ssize_t n = read(master, buf, sizeof(buf));
			if (n <= 0 || write_all(STDOUT_FILENO, buf, (size_t)n) < 0)
				_exit(0);
		}
	}
}

/* The relay child holds the master; we keep the slave until the sandbox has its copies. */
static int pty_start_relay(struct host_pty *p)
{
	p->relay = fork();
	if (p->relay < 0)
		return -errno;
	if (p->relay == 0) {
		close(p->slave);
		pty_relay(p->master);
	}
	close(p->master);
	p->master = -1;
	return 0;
}

/* The sandbox holds the slave now, alone (so that the master reads EIO once it is gone);
 * our terminal is raw while the command has it. */
static void pty_handed_over(struct host_pty *p)
{
	close(p->slave);
	p->slave = -1;
	(void)tty_raw(STDIN_FILENO);
}

/* After the sandbox: the relay writes what is left (2 s at most), then the terminal is ours. */
static void pty_finish(struct host_pty *p)
{
	for (int i = 0; p->relay > 0 && i < 200; i++) {
		if (waitpid(p->relay, NULL, WNOHANG) == p->relay) {
			p->relay = -1;
			break;
		}
		usleep(10000);
	}
	if (p->relay > 0) {
		kill(p->relay, SIGKILL);
		waitpid(p->relay, NULL, 0);
	}
	if (p->master >= 0)
		close(p->master);
	if (p->slave >= 0)
		close(p->slave);
	tty_restore();
}

static int block_signals(void)
{
	static const int sigs[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGWINCH, SIGCONT};
	return sigfd_block(sigs, ELEMENTSOF(sigs));
}

static int run_sandbox(struct run_ctx *c)
{
	struct cordon_err err = {};
	struct cordon_result res;
	struct cordon_sandbox *sb = NULL;
	int status;

	if (geteuid() != 0)
		log_warning("not running as root: no cgroup limits (memory, cpus, pids) for "
			    "this sandbox, and one uid for all of it");
	_cleanup_close_ int sigfd = block_signals();
	struct host_pty pty = {-1, -1, -1};
	cordon_sweep_stale();
	if (c->tty && (pty_open(&pty) < 0 || pty_start_relay(&pty) < 0)) {
		log_error("-t: cannot open a pseudo-terminal: %m");
		pty_finish(&pty);
		return CORDON_EXIT_SETUP;
	}
	for (int i = 0; i < 3; i++)
		c->spec.stdio[i] = c->tty ? pty.slave : i; /* the command's stdio is ours */
	int r = cordon_sandbox_create(&c->spec, &sb, &err);
	if (r == 0 && c->tty)
		pty_handed_over(&pty);
	if (r < 0) {
		log_error("sandbox setup failed: %s", err.msg);
		status = CORDON_EXIT_SETUP;
	} else if (cordon_sandbox_wait(sb, sigfd, &res) < 0) {
		log_error("waiting for the sandbox: %m");
		status = CORDON_EXIT_SETUP;
	} else {
		status = exit_status(&c->spec, &res);
		if (c->json_fd >= 0)
			write_json(c->json_fd, &res, status);
	}
	if (c->tty)
		pty_finish(&pty);
	cordon_sandbox_free(sb);
	return status;
}

int cmd_run(int argc, char **argv)
{
	struct run_ctx c = {.json_fd = -1, .egress = {.fd = -1}, .version = STORE_VERSION_INIT};
	int status;

	struct cli_values v;
	_cleanup_(cli_args_done) struct cli_args a = {};

	cordon_spec_init(&c.spec);
	/* The jail unless asked: auto would pick gvisor where runsc works, a slower start and
	 * a different kernel under the caller's commands (README, gvisor). */
	c.spec.runtime = "jail";
	cli_values_init(&v);
	int r = cli_parse(CLI_RUN, argc, argv, 0, &v, &a);
	if (r == 1)
		status = run_usage(stdout);
	else if (r < 0 || use_options(&c, &v) < 0)
		status = CORDON_EXIT_USAGE;
	else if (a.n_rest == 0) {
		log_error("run: no command given");
		status = run_usage(stderr);
	} else {
		c.spec.env = c.env;
		c.spec.argv = a.rest;
		status = apply_template(&c, a.rest);
		if (status == 0)
			status = setup_network(&c);
		if (status == 0)
			status = run_volumes_open(&c.volumes, &c.spec);
		if (status == 0)
			status = run_sandbox(&c);
		run_volumes_close(&c.volumes);
	}
	if (c.egress.fd >= 0 && c.secrets.n)
		egressctl_drain_events(&c.egress, 200, run_secrets_event, &c.secrets);
	if (c.egress.fd >= 0) /* the proxy ends when its control socket closes */
		close(c.egress.fd);
	if (c.wrapped)
		free(c.wrapped[2]);
	free(c.wrapped);
	store_config_done(&c.template);
	run_secrets_done(&c.secrets);
	store_version_close(&c.version, false); /* the sandbox is gone: a replaced version may go */
	for (size_t i = 0; i < c.spec.n_binds; i++)
		free(c.bind_buf[i]);
	return status;
}
