/* The template builder (build.h): recipe steps into cached layers, layers into a template. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <glob.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/mount.h>
#include <linux/openat2.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "basic/tree.h"
#include "basic/utf8.h"
#include "image/build.h"
#include "image/layer.h"
#include "image/oci.h"
#include "image/recipe.h"
#include "image/store.h"
#include "lib/overlay.h"
#include "net/egressctl.h"

#define MAX_LAYERS     OVERLAY_MAX_LOWER
#define MAX_ALLOW      16
#define DEFAULT_PATH   "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
#define IMPORT_MAX     (16ULL << 30)
#define CONTEXT_MAX_BYTES (256ULL << 20) /* unpacked from --context-tar */

struct build {
	const struct build_opts *o;
	struct recipe *recipe;
	int sfd, lock_fd, ctx_fd;
	int base_fd;                 /* FROM <template>: its rootfs, pinned */
	char store[2048];            /* short enough that every path under it fits PATH_MAX */
	char work[2304];             /* <store>/.tmp-build-XXXXXX: tmpfs mounts and scratch */
	char key[LAYER_KEY_LEN + 1]; /* of everything so far */
	char *lowers[MAX_LAYERS];    /* bottom first */
	size_t n_lowers;
	json_t *layers;              /* keys of the layers made or reused, bottom first */
	json_t *env;                 /* ENV, "K=V" */
	json_t *args;                /* names of the ARGs declared so far: only those reach RUN */
	char *workdir, *user;
	json_t *start, *ready;
	size_t step;                 /* 1-based, for events */
	unsigned char carry[4];      /* a UTF-8 character split between two reads of output */
	size_t n_carry;
	bool cached;                 /* the step's layer was there */
	uint64_t step_bytes;         /* what the step's layer holds */
	struct egressctl egress;
	const char *allow[MAX_ALLOW];
	char allow_buf[MAX_ALLOW][256];
	size_t n_allow;
	char mirror[256], security[256];
	struct cordon_err *err;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void emit(struct build *b, json_t *ev)
{
	if (ev && b->o->emit)
		b->o->emit(b->o->emit_data, ev);
	json_decref(ev);
}

/* Keys. */

struct hasher {
	EVP_MD_CTX *c;
};

static int hash_begin(struct hasher *h, const char *parent)
{
	h->c = EVP_MD_CTX_new();
	if (!h->c || EVP_DigestInit_ex(h->c, EVP_sha256(), NULL) != 1)
		return -ENOMEM;
	EVP_DigestUpdate(h->c, parent, strlen(parent) + 1);
	return 0;
}

/* Each field with its terminating NUL, so that ("ab","c") and ("a","bc") differ. */
static void hash_str(struct hasher *h, const char *s)
{
	EVP_DigestUpdate(h->c, s ? s : "", s ? strlen(s) + 1 : 1);
}

static void hash_bytes(struct hasher *h, const void *p, size_t n)
{
	EVP_DigestUpdate(h->c, p, n);
}

static void hash_end(struct hasher *h, char out[LAYER_KEY_LEN + 1])
{
	unsigned char md[32];
	EVP_DigestFinal_ex(h->c, md, NULL);
	EVP_MD_CTX_free(h->c);
	h->c = NULL;
	for (int i = 0; i < 32; i++)
		snprintf(out + 2 * i, 3, "%02x", md[i]);
}

static void hash_json(struct hasher *h, json_t *j)
{
	_cleanup_free_ char *s = j ? json_dumps(j, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
	hash_str(h, s);
}

/* The config a RUN sees is part of its key: the same command in another environment is
 * another layer. */
static bool arg_in_scope(struct build *b, const char *kv)
{
	char name[128];
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(kv, "="), kv);
	return json_object_get(b->args, name) != NULL;
}

static void hash_config(struct hasher *h, struct build *b)
{
	hash_json(h, b->env);
	for (size_t i = 0; i < b->recipe->n_build_env; i++)
		if (arg_in_scope(b, b->recipe->build_env[i]))
			hash_str(h, b->recipe->build_env[i]);
	hash_str(h, b->workdir);
	hash_str(h, b->user);
}

/* Layers in the store. */

static void layer_path(struct build *b, const char *key, char *buf, size_t size)
{
	snprintf(buf, size, "%s/" STORE_LAYERS "/%s/diff", b->store, key);
}

static bool layer_exists(struct build *b, const char *key)
{
	char p[PATH_MAX];
	struct stat st;
	layer_path(b, key, p, sizeof(p));
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

static int push_lower(struct build *b, const char *path)
{
	if (b->n_lowers >= MAX_LAYERS)
		return cordon_err_setf(b->err, -E2BIG, "more than %u layers", MAX_LAYERS);
	if (!(b->lowers[b->n_lowers] = strdup(path)))
		return cordon_err_setf(b->err, -ENOMEM, "out of memory");
	b->n_lowers++;
	return 0;
}

static int push_layer(struct build *b, const char *key)
{
	char p[PATH_MAX];
	layer_path(b, key, p, sizeof(p));
	json_array_append_new(b->layers, json_string(key));
	return push_lower(b, p);
}

static void remove_path(const char *path)
{
	(void)tree_remove_at(AT_FDCWD, path, 0);
}

/* A new layer's directory: <store>/.tmp-XXXXXX with diff/ inside. */
static int layer_tmp(struct build *b, char *tmp, size_t size, int *ret_diff)
{
	snprintf(tmp, size, "%s/" STORE_TMP_PREFIX "XXXXXX", b->store);
	if (!mkdtemp(tmp))
		return cordon_err_set(b->err, -errno, "mkdtemp in the store");
	char diff[PATH_MAX];
	snprintf(diff, sizeof(diff), "%s/diff", tmp);
	if (mkdir(diff, 0755) < 0 || (*ret_diff = open(diff, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		int r = cordon_err_set(b->err, -errno, "mkdir '%s'", diff);
		remove_path(tmp);
		return r;
	}
	return 0;
}

/* Moves a finished layer into place. Another build may have made the same key meanwhile:
 * same key, same content, so theirs is kept and ours dropped; with --no-cache ours replaces
 * theirs, which is moved aside (".rm-*") for the store's sweep, never deleted under a build
 * that may be reading it. @extra (may be NULL) is added to its layer.json. */
static int layer_commit(struct build *b, const char *tmp, const char *key, const char *what,
			uint64_t bytes, json_t *extra)
{
	char dst[PATH_MAX], layers[2200], mp[PATH_MAX];
	_cleanup_(json_decrefp) json_t *meta = json_pack("{s:s, s:s, s:s, s:I}", "key", key, "parent", b->key,
							 "instruction", what, "size_bytes", (json_int_t)bytes);
	if (meta && extra)
		json_object_update(meta, extra);
	snprintf(layers, sizeof(layers), "%s/" STORE_LAYERS, b->store);
	snprintf(dst, sizeof(dst), "%s/%s", layers, key);
	snprintf(mp, sizeof(mp), "%s/layer.json", tmp);
	if (!meta || json_dump_file(meta, mp, JSON_COMPACT) < 0)
		return cordon_err_setf(b->err, -EIO, "write '%s'", mp);
	if (mkdir(layers, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", layers);
	if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_NOREPLACE) == 0)
		return 0;
	if (errno != EEXIST && errno != ENOTEMPTY)
		return cordon_err_set(b->err, -errno, "commit layer '%s'", key);
	if (!b->o->no_cache) {
		remove_path(tmp);
		return 0;
	}
	char aside[PATH_MAX];
	snprintf(aside, sizeof(aside), "%s/.rm-%s", b->store, strrchr(tmp, '/') + 1 + strlen(STORE_TMP_PREFIX));
	if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) < 0 || rename(tmp, aside) < 0)
		return cordon_err_set(b->err, -errno, "replace layer '%s'", key);
	return 0;
}

static json_t *layer_meta(struct build *b, const char *key)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/" STORE_LAYERS "/%s/layer.json", b->store, key);
	return json_load_file(p, 0, NULL);
}

/* The build's scratch tmpfs: what one step may write, in RAM, bounded. */
static int mount_scratch(struct build *b, char *up, size_t size)
{
	char opts[96];
	snprintf(up, size, "%s/up", b->work);
	snprintf(opts, sizeof(opts), "mode=0755,size=%llu",
		 (unsigned long long)(b->o->disk_bytes ? b->o->disk_bytes : 8ULL << 30));
	if (mkdir(up, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", up);
	if (mount("cordon-build", up, "tmpfs", MS_NOSUID | MS_NODEV, opts) < 0)
		return cordon_err_set(b->err, -errno, "mount the build's tmpfs");
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/diff", up);
	if (mkdir(p, 0755) < 0)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", p);
	snprintf(p, sizeof(p), "%s/work", up);
	if (mkdir(p, 0700) < 0)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", p);
	return 0;
}

static void umount_scratch(struct build *b)
{
	char up[PATH_MAX];
	snprintf(up, sizeof(up), "%s/up", b->work);
	(void)umount2(up, MNT_DETACH);
}

/* What a step left in the scratch upper directory becomes the layer @key. */
static int capture_commit(struct build *b, const char *key, const char *what, uid_t base)
{
	char tmp[PATH_MAX], diff[PATH_MAX];
	_cleanup_close_ int dfd = -1;
	uint64_t bytes = 0;
	int r = layer_tmp(b, tmp, sizeof(tmp), &dfd);
	if (r < 0)
		return r;
	snprintf(diff, sizeof(diff), "%s/up/diff", b->work);
	_cleanup_close_ int sfd = open(diff, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		r = cordon_err_set(b->err, -errno, "open '%s'", diff);
	else
		r = layer_capture(sfd, dfd, base, &bytes, b->err);
	if (r >= 0)
		r = layer_commit(b, tmp, key, what, bytes, NULL);
	if (r < 0)
		remove_path(tmp);
	b->step_bytes = bytes;
	return r;
}

/* Steps. */

static int step_key(struct build *b, const char *text, bool with_config, char out[LAYER_KEY_LEN + 1])
{
	struct hasher h;
	if (hash_begin(&h, b->key) < 0)
		return cordon_err_setf(b->err, -ENOMEM, "out of memory");
	hash_str(&h, text);
	if (with_config)
		hash_config(&h, b);
	hash_end(&h, out);
	return 0;
}

static char *argv_text(const struct recipe_step *s)
{
	json_t *a = json_array();
	for (size_t i = 0; i < s->argc; i++)
		json_array_append_new(a, json_string(s->argv[i]));
	char *t = json_dumps(a, JSON_COMPACT);
	json_decref(a);
	return t;
}

static int fail_step(struct build *b, const struct recipe_step *s, int r)
{
	char msg[sizeof(b->err->msg)];
	snprintf(msg, sizeof(msg), "%s", b->err->msg);
	return cordon_err_setf(b->err, r, "line %u: %s: %s", s->line, recipe_kind_name(s->kind), msg);
}

/* The uid a USER names: the jail runs steps and sandboxes as root (0) or user (1000). */
static int user_of(const char *user, enum cordon_user *ret)
{
	static const struct {
		const char *name;
		enum cordon_user u;
	} names[] = {{"root", CORDON_USER_ROOT}, {"0", CORDON_USER_ROOT},
		     {"user", CORDON_USER_USER}, {"1000", CORDON_USER_USER}};
	char u[64];
	snprintf(u, sizeof(u), "%s", user ? user : "root");
	u[strcspn(u, ":")] = '\0';
	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if (strcmp(u, names[i].name) == 0) {
			*ret = names[i].u;
			return 0;
		}
	return -EINVAL;
}

/* The registry: hosts of the host's apt sources, as egress rules (name:port). */

static void add_allow(struct build *b, const char *uri)
{
	char host[200];
	int port;
	const char *p = strstr(uri, "://");
	if (!p || b->n_allow >= MAX_ALLOW)
		return;
	port = strncmp(uri, "https", 5) == 0 ? 443 : 80;
	p += 3;
	size_t n = strcspn(p, "/:");
	if (n == 0 || n >= sizeof(host))
		return;
	memcpy(host, p, n);
	host[n] = '\0';
	if (p[n] == ':')
		port = atoi(p + n + 1);
	char rule[256];
	snprintf(rule, sizeof(rule), "%s:%d", host, port);
	for (size_t i = 0; i < b->n_allow; i++)
		if (strcmp(b->allow[i], rule) == 0)
			return;
	snprintf(b->allow_buf[b->n_allow], sizeof(b->allow_buf[0]), "%s", rule);
	b->allow[b->n_allow] = b->allow_buf[b->n_allow];
	b->n_allow++;
}

static void note_uri(struct build *b, const char *uri)
{
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

/* One-line ("deb [opts] URI suite ...") and deb822 ("URIs: a b") sources alike. */
static void scan_sources_file(struct build *b, const char *path)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char line[1024];
	while (f && fgets(line, sizeof(line), f)) {
		char *save = NULL, *w = strtok_r(line, " \t\r\n", &save);
		if (!w || w[0] == '#')
			continue;
		bool deb822 = strcasecmp(w, "URIs:") == 0;
		if (!deb822 && strcmp(w, "deb") != 0)
			continue;
		while ((w = strtok_r(NULL, " \t\r\n", &save))) {
			if (w[0] == '[') {
				while (w && !strchr(w, ']'))
					w = strtok_r(NULL, " \t\r\n", &save);
				continue;
			}
			note_uri(b, w);
			if (!deb822)
				break;
		}
	}
}

static void scan_sources(struct build *b)
{
	const char *env = getenv("CORDON_APT_SOURCES"); /* tests: another host's sources */
	if (env) {
		scan_sources_file(b, env);
		return;
	}
	scan_sources_file(b, "/etc/apt/sources.list");
	glob_t g = {0};
	if (glob("/etc/apt/sources.list.d/*.list", 0, NULL, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc; i++)
			scan_sources_file(b, g.gl_pathv[i]);
	globfree(&g);
	if (glob("/etc/apt/sources.list.d/*.sources", 0, NULL, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc; i++)
			scan_sources_file(b, g.gl_pathv[i]);
	globfree(&g);
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

struct jail_run {
	char *const *argv;
	bool network;
	enum cordon_user user;
	const char *workdir;
	const char **env;
	size_t n_env;
};

static int swap_stdio(int fd0, int fd12, int saved[3])
{
	for (int i = 0; i < 3; i++)
		if ((saved[i] = fcntl(i, F_DUPFD_CLOEXEC, 3)) < 0)
			return -errno;
	if (dup2(fd0, 0) < 0 || dup2(fd12, 1) < 0 || dup2(fd12, 2) < 0)
		return -errno;
	return 0;
}

static void restore_stdio(int saved[3])
{
	for (int i = 0; i < 3; i++)
		if (saved[i] >= 0) {
			dup2(saved[i], i);
			close(saved[i]);
			saved[i] = -1;
		}
}

/* A step's output as a log event: valid UTF-8 (what JSON carries), a bad byte shown as
 * U+FFFD, a character split between two reads joined again. */
static void emit_log(struct build *b, const char *buf, size_t n)
{
	char out[3 * 8192 + 16];
	unsigned char in[8192 + 4];
	size_t m = 0, k = 0;
	memcpy(in, b->carry, b->n_carry);
	m = b->n_carry + (n > sizeof(in) - b->n_carry ? sizeof(in) - b->n_carry : n);
	memcpy(in + b->n_carry, buf, m - b->n_carry);
	b->n_carry = 0;
	for (size_t i = 0; i < m;) {
		int len = utf8_seq(in + i, m - i);
		if (len == 0) { /* cut by the end of this read: the rest comes next */
			b->n_carry = m - i;
			memcpy(b->carry, in + i, b->n_carry);
			break;
		}
		if (len <= 0) {
			memcpy(out + k, "\xef\xbf\xbd", 3);
			k += 3;
			i++;
			continue;
		}
		memcpy(out + k, in + i, len);
		k += len;
		i += len;
	}
	if (k)
		emit(b, json_pack("{s:s, s:I, s:s%}", "event", "log", "step", (json_int_t)b->step, "data", out, k));
}

/* What is left of a character cut at the end of the output. */
static void flush_log(struct build *b)
{
	if (b->n_carry) {
		b->n_carry = 0;
		emit(b, json_pack("{s:s, s:I, s:s}", "event", "log", "step", (json_int_t)b->step, "data",
				  "\xef\xbf\xbd"));
	}
}

/* Reads the step's output until PID 1 is gone or the deadline passes. */
static void pump_output(struct build *b, struct cordon_sandbox *sb, int rfd, uint64_t timeout_ms)
{
	struct pollfd p[2] = {{.fd = rfd, .events = POLLIN}, {.fd = cordon_sandbox_pidfd(sb), .events = POLLIN}};
	double deadline = now_s() + timeout_ms / 1000.0;
	char buf[8192];
	for (;;) {
		int left = (int)((deadline - now_s()) * 1000);
		if (left <= 0)
			return; /* cordon_sandbox_wait() kills it at the deadline */
		if (poll(p, 2, left) < 0 && errno != EINTR)
			return;
		if (p[0].revents & (POLLIN | POLLHUP)) {
			ssize_t n = read(rfd, buf, sizeof(buf));
			if (n > 0) {
				emit_log(b, buf, n);
				continue;
			}
			if (n == 0)
				p[0].fd = -1;
		}
		if (p[1].revents & POLLIN) {
			ssize_t n;
			while ((n = read(rfd, buf, sizeof(buf))) > 0) /* the rest, then done */
				emit_log(b, buf, n);
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
static int64_t run_in_jail(struct build *b, const struct jail_run *jr)
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
	int pipefd[2], saved[3] = {-1, -1, -1};
	_cleanup_close_ int null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (null < 0 || pipe2(pipefd, O_CLOEXEC) < 0)
		return cordon_err_set(b->err, -errno, "pipe");
	_cleanup_close_ int rfd = pipefd[0];
	struct cordon_sandbox *sb = NULL;
	int r = swap_stdio(null, pipefd[1], saved);
	if (r >= 0)
		r = cordon_sandbox_create(&spec, &sb, b->err);
	restore_stdio(saved);
	close(pipefd[1]);
	if (r < 0)
		return r;
	pump_output(b, sb, rfd, spec.timeout_ms);
	flush_log(b);
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
		if (arg_in_scope(b, b->recipe->build_env[i]))
			env[n++] = b->recipe->build_env[i];
	return n;
}

static int do_run(struct build *b, const struct recipe_step *s, const char *key)
{
	const char *env[CORDON_MAX_ENV];
	struct jail_run jr = {.argv = s->argv, .network = true, .workdir = b->workdir, .env = env};
	if (user_of(b->user, &jr.user) < 0)
		return cordon_err_setf(b->err, -EINVAL, "USER '%s': steps run as root (0) or user (1000)", b->user);
	jr.n_env = step_env(b, env, ELEMENTSOF(env));
	char up[PATH_MAX];
	int r = mount_scratch(b, up, sizeof(up));
	int64_t base = r < 0 ? r : run_in_jail(b, &jr);
	if (base >= 0)
		r = capture_commit(b, key, s->text, (uid_t)base);
	else
		r = (int)base;
	umount_scratch(b);
	return r;
}

/* COPY: sources from the context (never outside it), through an overlay of the layers so
 * far, written as root of the template with the owner --chown names. Destinations resolve
 * inside the template's root (its symlinks followed there, as Docker does), never outside. */

struct copy_ctx {
	struct build *b;
	const struct recipe_step *s;
	int root;       /* the merged tree */
	uid_t uid;
	gid_t gid;
	mode_t chmod;   /* 0: keep */
	struct hasher *h; /* hashing pass: no writes */
	uint64_t bytes;
};

static int open_beneath(int dirfd, const char *path, int flags, uint64_t resolve)
{
	struct open_how how = {.flags = (uint64_t)(flags | O_CLOEXEC), .resolve = resolve};
	int fd = syscall(SYS_openat2, dirfd, path, &how, sizeof(how));
	return fd < 0 ? -errno : fd;
}

/* At most @limit bytes: an archive named by FROM oci-archive may be a device or a fifo. */
static int hash_file(struct hasher *h, int fd, uint64_t limit)
{
	char buf[65536];
	ssize_t n;
	uint64_t total = 0;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		if ((total += n) > limit)
			return -EFBIG;
		hash_bytes(h, buf, n);
	}
	return n < 0 ? -errno : 0;
}

/* Makes @path (absolute, normalised) a directory under the template's root, resolving
 * every component inside that root only (its symlinks included), and returns its fd;
 * *@created says whether the last component was made here. */
static int mkdir_in_root(struct copy_ctx *c, const char *path, bool *created)
{
	char prefix[PATH_MAX] = "";
	const uint64_t in_root = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
	bool made = false;
	for (const char *p = path; *p;) {
		while (*p == '/')
			p++;
		size_t n = strcspn(p, "/");
		if (n == 0)
			break;
		size_t len = strlen(prefix);
		if (len + 1 + n >= sizeof(prefix))
			return cordon_err_setf(c->b->err, -ENAMETOOLONG, "'%s': too long", path);
		_cleanup_close_ int parent = open_beneath(c->root, len ? prefix : "/", O_PATH | O_DIRECTORY, in_root);
		snprintf(prefix + len, sizeof(prefix) - len, "/%.*s", (int)n, p);
		if (parent < 0)
			return cordon_err_set(c->b->err, parent, "'%s'", prefix);
		made = mkdirat(parent, prefix + len + 1, 0755) == 0;
		if (!made && errno != EEXIST)
			return cordon_err_set(c->b->err, -errno, "mkdir '%s'", prefix);
		p += n;
	}
	if (created)
		*created = made;
	int fd = open_beneath(c->root, prefix[0] ? prefix : "/", O_RDONLY | O_DIRECTORY, in_root);
	return fd < 0 ? cordon_err_set(c->b->err, fd, "'%s' is not a directory", prefix) : fd;
}

static int copy_tree(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dpath,
		     const char *rel, unsigned depth);

static int copy_file(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dname,
		     const char *rel)
{
	struct stat st;
	_cleanup_close_ int in = openat(sdir, name, O_RDONLY | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
	if (in < 0 || fstat(in, &st) < 0)
		return cordon_err_set(c->b->err, -errno, "open '%s'", rel);
	if (!S_ISREG(st.st_mode))
		return 0; /* changed under us */
	mode_t mode = c->chmod ? c->chmod : st.st_mode & 0777;
	if (c->h) {
		char meta[64];
		snprintf(meta, sizeof(meta), "f %o %lld", (unsigned)mode, (long long)st.st_size);
		hash_str(c->h, rel);
		hash_str(c->h, meta);
		return hash_file(c->h, in, UINT64_MAX);
	}
	(void)unlinkat(ddir, dname, 0); /* a symlink there is replaced, never written through */
	_cleanup_close_ int out = openat(ddir, dname, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (out < 0)
		return cordon_err_set(c->b->err, -errno, "create '%s'", dname);
	char buf[65536];
	ssize_t n;
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write_all(out, buf, n) < 0)
			return cordon_err_set(c->b->err, -errno, "write '%s'", dname);
	if (n < 0)
		return cordon_err_set(c->b->err, -errno, "read '%s'", rel);
	c->bytes += st.st_size;
	struct timespec ts[2] = {st.st_atim, st.st_mtim};
	if (fchown(out, c->uid, c->gid) < 0 || fchmod(out, mode) < 0 || futimens(out, ts) < 0)
		return cordon_err_set(c->b->err, -errno, "set owner and mode of '%s'", dname);
	return 0;
}

static int copy_symlink(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dname,
			const char *rel)
{
	char target[PATH_MAX];
	ssize_t n = readlinkat(sdir, name, target, sizeof(target) - 1);
	if (n < 0)
		return cordon_err_set(c->b->err, -errno, "readlink '%s'", rel);
	target[n] = '\0';
	if (c->h) {
		hash_str(c->h, rel);
		hash_str(c->h, "l");
		hash_str(c->h, target);
		return 0;
	}
	(void)unlinkat(ddir, dname, 0);
	if (symlinkat(target, ddir, dname) < 0 || fchownat(ddir, dname, c->uid, c->gid, AT_SYMLINK_NOFOLLOW) < 0)
		return cordon_err_set(c->b->err, -errno, "symlink '%s'", dname);
	return 0;
}

static int sorted_names(int dfd, char ***ret, size_t *ret_n);

/* The entries of the source directory @sfd into the destination directory @dfd, whose path
 * in the template is @dpath. */
static int copy_dir_contents(struct copy_ctx *c, int sfd, int dfd, const char *dpath, const char *rel,
			     unsigned depth)
{
	char **names = NULL;
	size_t n = 0;
	int r = sorted_names(sfd, &names, &n);
	if (r < 0)
		return cordon_err_set(c->b->err, r, "read '%s'", rel);
	for (size_t i = 0; i < n && r >= 0; i++) {
		char sub[PATH_MAX], dsub[PATH_MAX];
		if ((size_t)snprintf(sub, sizeof(sub), "%s/%s", rel, names[i]) >= sizeof(sub) ||
		    (size_t)snprintf(dsub, sizeof(dsub), "%s/%s", strcmp(dpath, "/") ? dpath : "", names[i]) >= sizeof(dsub))
			r = cordon_err_setf(c->b->err, -ENAMETOOLONG, "'%s': path too long", rel);
		else
			r = copy_tree(c, sfd, names[i], dfd, dsub, sub, depth + 1);
	}
	for (size_t i = 0; i < n; i++)
		free(names[i]);
	free(names);
	return r;
}

/* A directory: the destination resolved in the template (an existing directory, or a
 * symlink to one, is entered and keeps its owner and mode; a new one gets the source's). */
static int copy_subdir(struct copy_ctx *c, int sdir, const char *name, const char *dpath,
		       const struct stat *st, const char *rel, unsigned depth)
{
	_cleanup_close_ int sfd = openat(sdir, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		return cordon_err_set(c->b->err, -errno, "open '%s'", rel);
	if (c->h) {
		char meta[32];
		snprintf(meta, sizeof(meta), "d %o", (unsigned)(c->chmod ? c->chmod : st->st_mode & 07777));
		hash_str(c->h, rel);
		hash_str(c->h, meta);
		return copy_dir_contents(c, sfd, -1, dpath, rel, depth);
	}
	bool created = false;
	_cleanup_close_ int dfd = mkdir_in_root(c, dpath, &created);
	if (dfd < 0)
		return dfd;
	mode_t mode = c->chmod ? c->chmod : st->st_mode & 07777;
	if (created && (fchown(dfd, c->uid, c->gid) < 0 || fchmod(dfd, mode) < 0))
		return cordon_err_set(c->b->err, -errno, "set owner and mode of '%s'", dpath);
	return copy_dir_contents(c, sfd, dfd, dpath, rel, depth);
}

static int copy_tree(struct copy_ctx *c, int sdir, const char *name, int ddir, const char *dpath,
		     const char *rel, unsigned depth)
{
	struct stat st;
	const char *dname = strrchr(dpath, '/') + 1;
	if (depth > LAYER_MAX_DEPTH)
		return cordon_err_setf(c->b->err, -ELOOP, "'%s': too deep", rel);
	if (fstatat(sdir, name, &st, AT_SYMLINK_NOFOLLOW) < 0)
		return cordon_err_set(c->b->err, -errno, "stat '%s'", rel);
	if (S_ISREG(st.st_mode))
		return copy_file(c, sdir, name, ddir, dname, rel);
	if (S_ISLNK(st.st_mode))
		return copy_symlink(c, sdir, name, ddir, dname, rel);
	if (S_ISDIR(st.st_mode))
		return copy_subdir(c, sdir, name, dpath, &st, rel, depth);
	return 0; /* no devices, fifos or sockets from the context */
}

static int cmp_strp(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static int sorted_names(int dfd, char ***ret, size_t *ret_n)
{
	_cleanup_closedir_ DIR *d = tree_opendir_dup(dfd);
	if (!d)
		return -errno;
	char **v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		if (strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
			continue;
		if (n == cap) {
			cap = cap ? cap * 2 : 32;
			char **nv = realloc(v, cap * sizeof(*v));
			if (!nv)
				goto oom;
			v = nv;
		}
		if (!(v[n] = strdup(de->d_name)))
			goto oom;
		n++;
	}
	if (n)
		qsort(v, n, sizeof(*v), cmp_strp);
	*ret = v;
	*ret_n = n;
	return 0;
oom:
	for (size_t i = 0; i < n; i++)
		free(v[i]);
	free(v);
	return -ENOMEM;
}

static bool has_glob(const char *s)
{
	return strpbrk(s, "*?[") != NULL;
}

/* The context entries a source names: itself, or with a pattern in its last component,
 * the matching names of its directory (sorted). Nothing outside the context: the whole
 * path is resolved beneath it first ("..", absolute symlinks and magic links refused). */
static int expand_source(struct copy_ctx *c, const char *src, int *ret_dir, char ***names, size_t *n)
{
	char path[PATH_MAX];
	const uint64_t beneath = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
	while (*src == '/')
		src++;
	snprintf(path, sizeof(path), "%s", *src ? src : ".");
	for (size_t len = strlen(path); len > 1 && path[len - 1] == '/'; len--)
		path[len - 1] = '\0';
	char *slash = strrchr(path, '/');
	const char *last = slash ? slash + 1 : path;
	if (!has_glob(last)) {
		int fd = open_beneath(c->b->ctx_fd, path, O_PATH | O_NOFOLLOW, beneath);
		if (fd < 0)
			return cordon_err_set(c->b->err, fd, "source '%s' (in the build context)", src);
		close(fd);
		if (strcmp(last, "..") == 0 || strcmp(last, ".") == 0) {
			/* "a/.." or ".": the directory itself, named from its own fd */
			*ret_dir = open_beneath(c->b->ctx_fd, path, O_RDONLY | O_DIRECTORY, beneath);
			last = ".";
			if (*ret_dir < 0)
				return cordon_err_set(c->b->err, *ret_dir, "source '%s'", src);
		}
	}
	if (slash && strcmp(last, ".") != 0)
		*slash = '\0';
	if (*ret_dir < 0) {
		const char *dir = slash ? path : ".";
		int dfd = open_beneath(c->b->ctx_fd, dir, O_RDONLY | O_DIRECTORY, beneath);
		if (dfd < 0)
			return cordon_err_set(c->b->err, dfd, "source '%s' (in the build context)", src);
		*ret_dir = dfd;
	}
	if (!has_glob(last)) {
		*names = calloc(1, sizeof(char *));
		if (!*names || !((*names)[0] = strdup(last)))
			return -ENOMEM;
		*n = 1;
		return 0;
	}
	char **all;
	size_t k = 0, m;
	int r = sorted_names(*ret_dir, &all, &m);
	if (r < 0)
		return cordon_err_set(c->b->err, r, "read the directory of '%s'", src);
	for (size_t i = 0; i < m; i++) {
		if (fnmatch(last, all[i], FNM_PERIOD) == 0)
			all[k++] = all[i];
		else
			free(all[i]);
	}
	*names = all;
	*n = k;
	return k ? 0 : cordon_err_setf(c->b->err, -ENOENT, "no source matches '%s'", src);
}

/* One pass over every source: hashing (c->h set) or copying into the tree. A directory's
 * contents go into the destination, as in Docker. */
static int copy_sources(struct copy_ctx *c, const char *dest, bool dest_dir)
{
	const struct recipe_step *s = c->s;
	int r = 0;
	_cleanup_close_ int dfd = -1;
	char parent[PATH_MAX];
	snprintf(parent, sizeof(parent), "%s", dest);
	if (!dest_dir) {
		char *last = strrchr(parent, '/');
		last[last == parent ? 1 : 0] = '\0';
	}
	if (!c->h && (dfd = mkdir_in_root(c, parent, NULL)) < 0)
		return dfd;
	for (size_t i = 0; i + 1 < s->argc && r >= 0; i++) {
		_cleanup_close_ int sdir = -1;
		char **names = NULL;
		size_t n = 0;
		r = expand_source(c, s->argv[i], &sdir, &names, &n);
		for (size_t j = 0; j < n && r >= 0; j++) {
			struct stat st;
			char dpath[PATH_MAX];
			const char *nm = names[j];
			if (fstatat(sdir, nm, &st, AT_SYMLINK_NOFOLLOW) < 0) {
				r = cordon_err_set(c->b->err, -errno, "source '%s'", nm);
				break;
			}
			if (S_ISDIR(st.st_mode)) {
				_cleanup_close_ int sub = openat(sdir, nm, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
				_cleanup_close_ int into = c->h ? -1 : mkdir_in_root(c, dest, NULL);
				if (sub < 0 || (!c->h && into < 0))
					r = sub < 0 ? cordon_err_set(c->b->err, -errno, "open '%s'", nm) : into;
				else
					r = copy_dir_contents(c, sub, into, dest, nm, 0);
				continue;
			}
			if (dest_dir)
				snprintf(dpath, sizeof(dpath), "%s/%s", strcmp(dest, "/") ? dest : "", nm);
			else
				snprintf(dpath, sizeof(dpath), "%s", dest);
			r = copy_tree(c, sdir, nm, dfd, dpath, nm, 0);
		}
		for (size_t j = 0; j < n; j++)
			free(names[j]);
		free(names);
	}
	return r;
}

/* --chown U[:G]: numbers, or root/user (the two ids the jail has names for). */
static int parse_owner(const char *spec, uid_t *uid, gid_t *gid)
{
	char buf[64];
	*uid = *gid = 0;
	if (!spec)
		return 0;
	snprintf(buf, sizeof(buf), "%s", spec);
	char *g = strchr(buf, ':');
	if (g)
		*g++ = '\0';
	const char *parts[2] = {buf, g};
	unsigned long ids[2] = {0, 0};
	for (int i = 0; i < 2; i++) {
		const char *p = parts[i] ? parts[i] : parts[0];
		char *end;
		if (strcmp(p, "root") == 0)
			ids[i] = 0;
		else if (strcmp(p, "user") == 0)
			ids[i] = 1000;
		else if ((ids[i] = strtoul(p, &end, 10)) > 65535 || *end || !*p)
			return -EINVAL;
	}
	*uid = ids[0];
	*gid = ids[1];
	return 0;
}

static int copy_dest(struct build *b, const struct recipe_step *s, char *dest, size_t size, bool *dest_dir)
{
	const char *d = s->argv[s->argc - 1];
	size_t n = strlen(d);
	*dest_dir = (n && d[n - 1] == '/') || s->argc > 2 || has_glob(s->argv[0]);
	if (d[0] == '/')
		snprintf(dest, size, "%s", d);
	else
		snprintf(dest, size, "%s/%s", b->workdir && strcmp(b->workdir, "/") ? b->workdir : "", d);
	/* Normalise: no "." or ".." components, no trailing slash (the kernel refuses the
	 * rest: every lookup below is RESOLVE_IN_ROOT). */
	n = strlen(dest);
	while (n > 1 && dest[n - 1] == '/')
		dest[--n] = '\0';
	if (strstr(dest, "/../") || (n >= 3 && strcmp(dest + n - 3, "/..") == 0))
		return cordon_err_setf(b->err, -EINVAL, "destination '%s': '..' is not allowed", d);
	if (strcmp(dest, "/") == 0)
		*dest_dir = true;
	return 0;
}

static int copy_key(struct build *b, const struct recipe_step *s, const char *dest, bool dest_dir,
		    char out[LAYER_KEY_LEN + 1])
{
	struct hasher h;
	if (hash_begin(&h, b->key) < 0)
		return cordon_err_setf(b->err, -ENOMEM, "out of memory");
	hash_str(&h, "COPY");
	hash_str(&h, s->chown);
	hash_str(&h, s->chmod);
	hash_str(&h, dest);
	hash_str(&h, dest_dir ? "dir" : "file");
	struct copy_ctx c = {.b = b, .s = s, .h = &h, .root = -1};
	int r = copy_sources(&c, dest, dest_dir);
	hash_end(&h, out);
	return r;
}

static int do_copy(struct build *b, const struct recipe_step *s, const char *key, const char *dest,
		   bool dest_dir)
{
	struct copy_ctx c = {.b = b, .s = s, .root = -1};
	char up[PATH_MAX], upper[PATH_MAX], workd[PATH_MAX];
	const char *lower[MAX_LAYERS];
	if (parse_owner(s->chown, &c.uid, &c.gid) < 0)
		return cordon_err_setf(b->err, -EINVAL, "--chown '%s': expected root, user or numbers up "
				       "to 65535", s->chown);
	c.chmod = s->chmod ? (mode_t)strtoul(s->chmod, NULL, 8) : 0;
	for (size_t i = 0; i < b->n_lowers; i++)
		lower[i] = b->lowers[b->n_lowers - 1 - i];
	snprintf(upper, sizeof(upper), "%s/up/diff", b->work);
	snprintf(workd, sizeof(workd), "%s/up/work", b->work);
	int r = mount_scratch(b, up, sizeof(up));
	/* Written through a detached overlay, never attached anywhere: the fd is the root. */
	if (r >= 0)
		r = c.root = overlay_tree(lower, b->n_lowers, upper, workd, -1, up, b->err);
	if (r >= 0)
		r = copy_sources(&c, dest, dest_dir);
	if (c.root >= 0)
		close(c.root);
	if (r >= 0)
		r = capture_commit(b, key, s->text, 0);
	umount_scratch(b);
	return r;
}

/* FROM */

static int from_scratch(struct build *b)
{
	char empty[PATH_MAX];
	snprintf(empty, sizeof(empty), "%s/empty", b->work);
	if (mkdir(empty, 0755) < 0 && errno != EEXIST)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", empty);
	return push_lower(b, empty);
}

/* The base template is pinned: its directory is opened once, template.json read through
 * it, and the layer named by its fd (/proc/self/fd/N) for every step and the flatten, so
 * that a template replaced meanwhile cannot change a build half-way. */
static int from_template(struct build *b, const char *name)
{
	char root[PATH_MAX], lower[64];
	int r = store_path(name, root, sizeof(root));
	if (r < 0)
		return cordon_err_setf(b->err, r, "'%s' is not a template (cordon template ls), nor "
				       "scratch, debian:SUITE[-slim] or oci-archive:PATH", name);
	/* By path: the store's fd was opened before our mount namespace, and open_tree()
	 * clones only mounts of our own. */
	char tdir[PATH_MAX];
	snprintf(tdir, sizeof(tdir), "%s/%s", b->store, name);
	_cleanup_close_ int dir = open(tdir, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_close_ int mfd = dir < 0 ? -1 : openat(dir, "template.json", O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	b->base_fd = dir < 0 ? -1 : openat(dir, "rootfs", O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (mfd < 0 || b->base_fd < 0)
		return cordon_err_set(b->err, -errno, "template '%s'", name);
	_cleanup_(json_decrefp) json_t *meta = json_loadfd(mfd, 0, NULL);
	/* The base's own identity: its key when built, its digest when imported. */
	const char *id = json_string_value(json_object_get(meta, "key"));
	if (!id)
		id = json_string_value(json_object_get(meta, "digest"));
	if (!id)
		id = json_string_value(json_object_get(meta, "created"));
	if (!id)
		return cordon_err_setf(b->err, -EINVAL, "template '%s': unreadable template.json", name);
	struct hasher h;
	if (hash_begin(&h, "template") < 0)
		return -ENOMEM;
	hash_str(&h, name);
	hash_str(&h, id);
	hash_end(&h, b->key);
	snprintf(lower, sizeof(lower), "/proc/self/fd/%d", b->base_fd);
	return push_lower(b, lower);
}

/* FROM oci-archive:PATH: a regular file (beneath the context when the build is confined,
 * as through the API), imported once into a layer keyed by its sha256; its ENV is kept in
 * the layer's layer.json for cached builds. */
static int from_oci(struct build *b, const char *path)
{
	struct hasher h;
	struct stat st;
	char fdpath[64];
	_cleanup_close_ int fd = b->o->confine
		? open_beneath(b->ctx_fd, path, O_RDONLY | O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
		: open_beneath(AT_FDCWD, path, O_RDONLY, 0);
	if (fd < 0)
		return cordon_err_set(b->err, fd, "oci-archive '%s'%s", path,
				      b->o->confine ? " (in the build context)" : "");
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return cordon_err_setf(b->err, -EINVAL, "oci-archive '%s': not a regular file", path);
	if (hash_begin(&h, "oci-archive") < 0)
		return -ENOMEM;
	int r = hash_file(&h, fd, IMPORT_MAX);
	hash_end(&h, b->key);
	if (r < 0)
		return cordon_err_set(b->err, r, "read '%s'", path);
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	b->cached = layer_exists(b, b->key) && !b->o->no_cache;
	if (!b->cached) {
		char tmp[PATH_MAX], key[LAYER_KEY_LEN + 1];
		_cleanup_close_ int diff = -1;
		struct oci_config cfg = {0};
		if ((r = layer_tmp(b, tmp, sizeof(tmp), &diff)) < 0)
			return r;
		r = oci_import(fdpath, diff, IMPORT_MAX, &cfg, b->err);
		json_t *env = json_array();
		for (size_t i = 0; r >= 0 && cfg.env && cfg.env[i]; i++)
			json_array_append_new(env, json_string(cfg.env[i]));
		oci_config_done(&cfg);
		memcpy(key, b->key, sizeof(key));
		_cleanup_(json_decrefp) json_t *extra = json_pack("{s:o}", "env", env);
		if (r >= 0)
			r = layer_commit(b, tmp, key, "FROM oci-archive", 0, extra);
		if (r < 0) {
			remove_path(tmp);
			return r;
		}
	}
	_cleanup_(json_decrefp) json_t *meta = layer_meta(b, b->key);
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(meta, "env"), i, e)
		if (json_is_string(e))
			json_array_append(b->env, e);
	json_array_append_new(b->layers, json_string(b->key));
	char p[PATH_MAX];
	layer_path(b, b->key, p, sizeof(p));
	return push_lower(b, p);
}

/* FROM debian:SUITE[-slim]: debootstrap's first stage on the host (it downloads Debian's
 * packages, checks their signatures against the host's keyring and unpacks them), its second
 * stage (dpkg, maintainer scripts) in a jail over that tree. */

static int run_host_command(struct build *b, char *const argv[])
{
	int pipefd[2];
	if (pipe2(pipefd, O_CLOEXEC) < 0)
		return cordon_err_set(b->err, -errno, "pipe");
	pid_t pid = fork();
	if (pid < 0) {
		int r = cordon_err_set(b->err, -errno, "fork");
		close(pipefd[0]);
		close(pipefd[1]);
		return r;
	}
	if (pid == 0) {
		int null = open("/dev/null", O_RDONLY);
		dup2(null, 0);
		dup2(pipefd[1], 1);
		dup2(pipefd[1], 2);
		execvp(argv[0], argv);
		dprintf(2, "%s: %s\n", argv[0], strerror(errno));
		_exit(127);
	}
	close(pipefd[1]);
	char buf[8192];
	ssize_t n;
	while ((n = TEMP_FAILURE_RETRY(read(pipefd[0], buf, sizeof(buf)))) > 0)
		emit_log(b, buf, n);
	flush_log(b);
	close(pipefd[0]);
	int status;
	if (TEMP_FAILURE_RETRY(waitpid(pid, &status, 0)) < 0)
		return cordon_err_set(b->err, -errno, "wait for %s", argv[0]);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return cordon_err_setf(b->err, -ECANCELED, "%s failed (status %d)", argv[0],
				       WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return 0;
}

static int write_in_root(int dirfd, const char *path, const char *content)
{
	_cleanup_close_ int fd = open_beneath(dirfd, path, O_WRONLY | O_CREAT | O_TRUNC, RESOLVE_IN_ROOT);
	if (fd < 0)
		return fd;
	if (fchmod(fd, 0644) < 0)
		return -errno;
	return write_all(fd, content, strlen(content));
}

/* The first stage's tree in @diff; the second stage's changes, owners mapped back, laid
 * over it. */
static int second_stage(struct build *b, const char *root, int diff, bool slim)
{
	char second[1024], changes[PATH_MAX] = "", updiff[PATH_MAX], up[PATH_MAX];
	_cleanup_close_ int cfd = -1, ufd = -1;
	uint64_t bytes = 0;
	snprintf(second, sizeof(second), "/debootstrap/debootstrap --second-stage%s",
		 slim ? " && rm -rf /usr/share/doc/* /usr/share/man/* /usr/share/info/* "
			"/usr/share/locale/* /var/cache/apt/*.bin /var/lib/apt/lists/*"
		      : " && rm -rf /var/cache/apt/*.bin");
	char *argv[] = {"/bin/sh", "-c", second, NULL};
	/* container=lxc: debootstrap then knows it cannot mknod (its sanity check would). */
	const char *env[] = {DEFAULT_PATH, "DEBIAN_FRONTEND=noninteractive", "LANG=C.UTF-8", "container=lxc"};
	struct jail_run jr = {.argv = argv, .user = CORDON_USER_ROOT, .env = env, .n_env = ELEMENTSOF(env)};
	int r = push_lower(b, root);
	if (r < 0)
		return r;
	r = mount_scratch(b, up, sizeof(up));
	int64_t base = r < 0 ? r : run_in_jail(b, &jr);
	free(b->lowers[--b->n_lowers]);
	r = base < 0 ? (int)base : layer_tmp(b, changes, sizeof(changes), &cfd);
	snprintf(updiff, sizeof(updiff), "%s/up/diff", b->work);
	if (r >= 0 && (ufd = open(updiff, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = cordon_err_set(b->err, -errno, "open '%s'", updiff);
	if (r >= 0)
		r = layer_capture(ufd, cfd, (uid_t)base, &bytes, b->err);
	umount_scratch(b);
	if (r >= 0)
		r = layer_apply(cfd, diff, b->err);
	if (changes[0])
		remove_path(changes);
	return r;
}

static int debootstrap_layer(struct build *b, const char *suite, bool slim, const char *key)
{
	char tmp[2400], root[PATH_MAX], sources[1024], what[128];
	char variant[] = "--variant=minbase", comps[] = "--components=main", foreign[] = "--foreign";
	_cleanup_close_ int diff = -1, dev = -1;
	int r = layer_tmp(b, tmp, sizeof(tmp), &diff);
	if (r < 0)
		return r;
	snprintf(root, sizeof(root), "%s/diff", tmp);
	char *first[] = {"debootstrap", foreign, variant, comps, (char *)suite, root, b->mirror, NULL};
	if ((r = run_host_command(b, first)) < 0)
		goto fail;
	/* The host's mknod'ed nodes go: every sandbox gets its own /dev. In a container
	 * debootstrap makes /proc a symlink to the host's; it is a mount point here. */
	if ((dev = openat(diff, "dev", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
		(void)tree_empty(dev, 0);
	struct stat st;
	if (fstatat(diff, "proc", &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode) &&
	    (unlinkat(diff, "proc", 0) < 0 || mkdirat(diff, "proc", 0555) < 0)) {
		r = cordon_err_set(b->err, -errno, "replace /proc");
		goto fail;
	}
	if ((r = second_stage(b, root, diff, slim)) < 0)
		goto fail;
	snprintf(sources, sizeof(sources), "deb %s %s main\ndeb %s %s-updates main\n", b->mirror, suite,
		 b->mirror, suite);
	if (b->security[0])
		snprintf(sources + strlen(sources), sizeof(sources) - strlen(sources),
			 "deb %s %s-security main\n", b->security, suite);
	if ((r = write_in_root(diff, "/etc/apt/sources.list", sources)) < 0 ||
	    (r = write_in_root(diff, "/etc/resolv.conf", "")) < 0) {
		r = cordon_err_set(b->err, r, "write /etc/apt/sources.list");
		goto fail;
	}
	snprintf(what, sizeof(what), "FROM debian:%s%s", suite, slim ? "-slim" : "");
	if ((r = layer_commit(b, tmp, key, what, 0, NULL)) >= 0)
		return r;
fail:
	remove_path(tmp);
	return r;
}

static int from_debian(struct build *b, const char *tag)
{
	char suite[32];
	snprintf(suite, sizeof(suite), "%s", tag);
	size_t n = strlen(suite);
	bool slim = n > 5 && strcmp(suite + n - 5, "-slim") == 0;
	if (slim)
		suite[n - 5] = '\0';
	static const char *const suites[] = {"bookworm", "trixie", "bullseye", "stable", "oldstable"};
	bool known = false;
	for (size_t i = 0; i < ELEMENTSOF(suites); i++)
		known |= strcmp(suite, suites[i]) == 0;
	if (!known)
		return cordon_err_setf(b->err, -EINVAL, "debian:%s: expected bookworm, trixie, bullseye, "
				       "stable or oldstable (optionally -slim)", tag);
	if (!b->mirror[0])
		return cordon_err_setf(b->err, -ENOENT, "debian:%s: the host's apt sources name no "
				       "Debian mirror (.../debian)", tag);
	struct hasher h;
	if (hash_begin(&h, "debootstrap") < 0)
		return -ENOMEM;
	hash_str(&h, suite);
	hash_str(&h, slim ? "slim" : "minbase");
	hash_str(&h, b->mirror);
	hash_str(&h, b->security);
	hash_end(&h, b->key);
	char key[LAYER_KEY_LEN + 1];
	memcpy(key, b->key, sizeof(key));
	if (!layer_exists(b, key) || b->o->no_cache) {
		int r = debootstrap_layer(b, suite, slim, key); /* --no-cache: replaces the cached one */
		if (r < 0)
			return r;
	} else {
		b->cached = true;
	}
	return push_layer(b, key);
}

static int do_from(struct build *b, const struct recipe_step *s)
{
	const char *img = s->argv[0];
	if (strcmp(img, "scratch") == 0) {
		struct hasher h;
		if (hash_begin(&h, "scratch") < 0)
			return -ENOMEM;
		hash_end(&h, b->key);
		return from_scratch(b);
	}
	if (strncmp(img, "debian:", 7) == 0)
		return from_debian(b, img + 7);
	if (strncmp(img, "oci-archive:", 12) == 0)
		return from_oci(b, img + 12);
	return from_template(b, img);
}

/* The steps that only change the config: no layer, but every later key depends on them. */
static int do_config(struct build *b, const struct recipe_step *s)
{
	switch (s->kind) {
	case RECIPE_ENV:
		for (size_t i = 0; i < s->argc; i++) {
			size_t klen = strcspn(s->argv[i], "=");
			for (size_t j = 0; j < json_array_size(b->env); j++) {
				const char *e = json_string_value(json_array_get(b->env, j));
				if (strncmp(e, s->argv[i], klen + 1) == 0) {
					json_array_remove(b->env, j);
					break;
				}
			}
			json_array_append_new(b->env, json_string(s->argv[i]));
		}
		return 0;
	case RECIPE_WORKDIR:
		free(b->workdir);
		return (b->workdir = strdup(s->argv[0])) ? 0 : -ENOMEM;
	case RECIPE_USER: {
		enum cordon_user u;
		if (user_of(s->argv[0], &u) < 0)
			return cordon_err_setf(b->err, -EINVAL, "'%s': sandboxes run as root (0) or user "
					       "(1000)", s->argv[0]);
		free(b->user);
		return (b->user = strdup(s->argv[0])) ? 0 : -ENOMEM;
	}
	case RECIPE_START:
	case RECIPE_READY: {
		json_t *a = json_array();
		for (size_t i = 0; i < s->argc; i++)
			json_array_append_new(a, json_string(s->argv[i]));
		json_t **slot = s->kind == RECIPE_START ? &b->start : &b->ready;
		json_decref(*slot);
		*slot = a;
		return 0;
	}
	case RECIPE_ARG: {
		char name[128];
		snprintf(name, sizeof(name), "%.*s", (int)strcspn(s->argv[0], "="), s->argv[0]);
		return json_object_set_new(b->args, name, json_true()) < 0 ? -ENOMEM : 0;
	}
	default:
		return 0;
	}
}

/* "NAME=value" of an ARG step as the build sees it (a --build-arg, its default or unset). */
static const char *arg_value(struct build *b, const struct recipe_step *s)
{
	size_t n = strcspn(s->argv[0], "=");
	for (size_t i = 0; i < b->recipe->n_build_env; i++)
		if (strncmp(b->recipe->build_env[i], s->argv[0], n) == 0 && b->recipe->build_env[i][n] == '=')
			return b->recipe->build_env[i];
	return s->argv[0];
}

static int do_step(struct build *b, const struct recipe_step *s)
{
	char key[LAYER_KEY_LEN + 1], dest[PATH_MAX];
	_cleanup_free_ char *text = argv_text(s);
	bool dest_dir = false;
	int r;

	switch (s->kind) {
	case RECIPE_FROM:
		return do_from(b, s);
	case RECIPE_RUN:
		if ((r = step_key(b, text, true, key)) < 0)
			return r;
		break;
	case RECIPE_COPY:
		if ((r = copy_dest(b, s, dest, sizeof(dest), &dest_dir)) < 0 ||
		    (r = copy_key(b, s, dest, dest_dir, key)) < 0)
			return r;
		break;
	default:
		/* Keyed by what the step stores, expanded (ENV X=$ARG changes with --build-arg);
		 * an ARG by the value it takes. */
		if ((r = step_key(b, s->kind == RECIPE_ARG ? arg_value(b, s) : text, false, key)) < 0)
			return r;
		memcpy(b->key, key, sizeof(key));
		return do_config(b, s);
	}
	b->cached = layer_exists(b, key) && !b->o->no_cache;
	if (!b->cached) {
		r = s->kind == RECIPE_RUN ? do_run(b, s, key) : do_copy(b, s, key, dest, dest_dir);
		if (r < 0)
			return r;
	}
	memcpy(b->key, key, sizeof(key));
	return push_layer(b, key);
}

/* The template: the layers flattened by hard links into its rootfs. */
static int fill_template(int rootfd, json_t *meta, void *userdata, struct cordon_err *err)
{
	struct build *b = userdata;
	for (size_t i = 0; i < b->n_lowers; i++) {
		_cleanup_close_ int fd = open(b->lowers[i], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			return cordon_err_set(err, -errno, "open layer '%s'", b->lowers[i]);
		int r = layer_apply(fd, rootfd, err);
		if (r < 0)
			return r;
	}
	char source[PATH_MAX + 8];
	snprintf(source, sizeof(source), "build:%s", b->o->source ? b->o->source : b->o->recipe);
	json_object_set_new(meta, "source", json_string(source));
	json_object_set_new(meta, "key", json_string(b->key));
	json_object_set_new(meta, "layers", json_incref(b->layers));
	json_object_set_new(meta, "env", json_incref(b->env));
	json_object_set_new(meta, "workdir", b->workdir ? json_string(b->workdir) : json_null());
	json_object_set_new(meta, "user", b->user ? json_string(b->user) : json_null());
	json_object_set_new(meta, "start", b->start ? json_incref(b->start) : json_null());
	json_object_set_new(meta, "ready", b->ready ? json_incref(b->ready) : json_null());
	return 0;
}

static int read_recipe(struct build *b)
{
	_cleanup_close_ int fd = open(b->o->recipe, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(b->err, -errno, "recipe '%s'", b->o->recipe);
	_cleanup_free_ char *text = malloc(RECIPE_MAX_BYTES + 1);
	if (!text)
		return -ENOMEM;
	size_t n = 0;
	for (ssize_t k; n <= RECIPE_MAX_BYTES; n += k)
		if ((k = TEMP_FAILURE_RETRY(read(fd, text + n, RECIPE_MAX_BYTES + 1 - n))) <= 0) {
			if (k < 0)
				return cordon_err_set(b->err, -errno, "read '%s'", b->o->recipe);
			break;
		}
	if (n > RECIPE_MAX_BYTES)
		return cordon_err_setf(b->err, -E2BIG, "recipe '%s': larger than %u bytes", b->o->recipe,
				       RECIPE_MAX_BYTES);
	return recipe_parse(text, n, b->o->build_args, &b->recipe, b->err);
}

static int open_context(struct build *b)
{
	char dir[PATH_MAX];
	if (b->o->context) {
		snprintf(dir, sizeof(dir), "%s", b->o->context);
	} else {
		snprintf(dir, sizeof(dir), "%s", b->o->recipe);
		char *slash = strrchr(dir, '/');
		if (slash)
			slash[slash == dir ? 1 : 0] = '\0';
		else
			strcpy(dir, ".");
	}
	b->ctx_fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	return b->ctx_fd < 0 ? cordon_err_set(b->err, -errno, "context '%s'", dir) : 0;
}

/* --context-tar: the archive (a tar, maybe gzipped: an API client's upload) unpacked into
 * the build's work directory by the hostile-safe layer applier, and that is the context. */
static int unpack_context(struct build *b)
{
	char dir[PATH_MAX];
	snprintf(dir, sizeof(dir), "%s/context", b->work);
	_cleanup_close_ int tar = open(b->o->context_tar, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (tar < 0)
		return cordon_err_set(b->err, -errno, "context archive '%s'", b->o->context_tar);
	if (mkdir(dir, 0700) < 0)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", dir);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(b->err, -errno, "open '%s'", dir);
	if (b->ctx_fd >= 0)
		close(b->ctx_fd);
	b->ctx_fd = fd;
	int r = oci_apply_layer(fd, tar, CONTEXT_MAX_BYTES, b->err);
	return r < 0 ? r : 0;
}

/* Our own mount namespace: the build's tmpfs and overlays are nobody else's business and
 * vanish with us. */
static int private_mounts(struct build *b)
{
	if (unshare(CLONE_NEWNS) < 0 || mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
		return cordon_err_set(b->err, -errno, "private mount namespace");
	return 0;
}

static bool up_to_date(struct build *b)
{
	_cleanup_(json_decrefp) json_t *meta = NULL;
	if (b->o->no_cache || store_read(b->o->name, &meta, NULL) < 0)
		return false;
	const char *k = json_string_value(json_object_get(meta, "key"));
	return k && strcmp(k, b->key) == 0;
}

static int build_steps(struct build *b)
{
	for (size_t i = 0; i < b->recipe->n_steps; i++) {
		const struct recipe_step *s = &b->recipe->steps[i];
		double t0 = now_s();
		b->step = i + 1;
		b->cached = false;
		b->step_bytes = 0;
		emit(b, json_pack("{s:s, s:I, s:I, s:I, s:s}", "event", "step", "step", (json_int_t)b->step, "of",
				  (json_int_t)b->recipe->n_steps, "line", (json_int_t)s->line, "instruction", s->text));
		int r = do_step(b, s);
		if (r < 0)
			return fail_step(b, s, r);
		emit(b, json_pack("{s:s, s:I, s:b, s:f, s:I}", "event", "step_done", "step", (json_int_t)b->step,
				  "cached", b->cached, "seconds", now_s() - t0, "bytes", (json_int_t)b->step_bytes));
	}
	return 0;
}

int build_template(const struct build_opts *o, json_t **ret_meta, struct cordon_err *err)
{
	struct build b = {.o = o, .sfd = -1, .lock_fd = -1, .ctx_fd = -1, .base_fd = -1, .egress = {.fd = -1},
			  .err = err};
	double t0 = now_s();
	int r;

	if (!store_name_valid(o->name))
		return cordon_err_setf(err, -EINVAL, "'%s': not a template name ([a-z0-9][a-z0-9._-]*, "
				       "not 'host')", o->name);
	if (geteuid() != 0)
		return cordon_err_setf(err, -EPERM, "building a template needs root (its steps run in "
				       "jails with a uid range of their own)");
	b.layers = json_array();
	b.env = json_array();
	b.args = json_object();
	if (!b.layers || !b.env || !b.args)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	if ((r = read_recipe(&b)) < 0 || (r = open_context(&b)) < 0)
		goto out;
	scan_sources(&b);
	cordon_sweep_stale(); /* what killed builds (and runs) left in the kernel: their cgroups */
	if ((r = store_dir(b.store, sizeof(b.store))) < 0 ||
	    (r = b.sfd = store_open_locked(false, &b.lock_fd, err)) < 0 || (r = private_mounts(&b)) < 0)
		goto out;
	snprintf(b.work, sizeof(b.work), "%s/" STORE_TMP_PREFIX "build-XXXXXX", b.store);
	if (!mkdtemp(b.work)) {
		b.work[0] = '\0';
		r = cordon_err_set(err, -errno, "mkdtemp in the store");
		goto out;
	}
	if ((o->context_tar && (r = unpack_context(&b)) < 0) || (r = build_steps(&b)) < 0)
		goto out;
	bool fresh = up_to_date(&b);
	if (!fresh && (r = store_import(o->name, true, fill_template, &b, ret_meta, err)) < 0)
		goto out;
	if (fresh && ret_meta)
		(void)store_read(o->name, ret_meta, NULL);
	emit(&b, json_pack("{s:s, s:s, s:s, s:f, s:b}", "event", "done", "name", o->name, "key", b.key,
			   "seconds", now_s() - t0, "up_to_date", fresh));
	r = 0;
out:
	if (b.work[0])
		remove_path(b.work);
	if (b.egress.fd >= 0) {
		close(b.egress.fd);
		(void)waitpid(b.egress.pid, NULL, 0);
	}
	for (size_t i = 0; i < b.n_lowers; i++)
		free(b.lowers[i]);
	free(b.workdir);
	free(b.user);
	json_decref(b.start);
	json_decref(b.ready);
	json_decref(b.layers);
	json_decref(b.env);
	json_decref(b.args);
	recipe_free(b.recipe);
	if (b.ctx_fd >= 0)
		close(b.ctx_fd);
	if (b.base_fd >= 0)
		close(b.base_fd);
	if (b.sfd >= 0)
		close(b.sfd);
	if (b.lock_fd >= 0) {
		close(b.lock_fd);
		store_sweep(); /* layers a --no-cache build replaced, if no one else is at work */
	}
	return r;
}

/* gc: layers named by no template's "layers". */

static int collect_used(json_t *used, struct cordon_err *err)
{
	_cleanup_(json_decrefp) json_t *list = NULL;
	int r = store_list(&list, err);
	if (r < 0)
		return r;
	size_t i, j;
	json_t *t, *k;
	json_array_foreach(list, i, t) {
		json_array_foreach(json_object_get(t, "layers"), j, k)
			if (json_is_string(k))
				json_object_set_new(used, json_string_value(k), json_true());
	}
	return 0;
}

int build_gc(unsigned *ret_layers, uint64_t *ret_bytes, struct cordon_err *err)
{
	_cleanup_close_ int lock = -1;
	_cleanup_close_ int sfd = store_open_locked(true, &lock, err);
	_cleanup_(json_decrefp) json_t *used = json_object();
	*ret_layers = 0;
	*ret_bytes = 0;
	if (sfd < 0)
		return sfd;
	int r = collect_used(used, err);
	if (r < 0)
		return r;
	_cleanup_close_ int lfd = openat(sfd, STORE_LAYERS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	_cleanup_closedir_ DIR *d = lfd >= 0 ? tree_opendir_dup(lfd) : NULL;
	struct dirent *de;
	while (d && (de = readdir(d))) {
		if (de->d_name[0] == '.' || json_object_get(used, de->d_name))
			continue;
		_cleanup_close_ int fd = openat(lfd, de->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		uint64_t size = 0;
		if (fd >= 0)
			(void)tree_size(fd, 0, &size);
		if ((r = tree_remove_at(lfd, de->d_name, 0)) < 0)
			return cordon_err_set(err, r, "remove layer %s", de->d_name);
		(*ret_layers)++;
		*ret_bytes += size;
	}
	return 0; /* what dead builds left went when the lock was taken */
}
