/* FROM: the base of a build (build-int.h). */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <linux/openat2.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/clock.h"
#include "basic/fileio.h"
#include "basic/tree.h"
#include "build/build-int.h"
#include "image/layer.h"
#include "image/oci.h"
#include "image/recipe.h"
#include "image/store.h"

/* FROM */

static int from_scratch(struct build *b)
{
	char empty[PATH_MAX];
	snprintf(empty, sizeof(empty), "%s/empty", b->work);
	if (mkdir(empty, 0755) < 0 && errno != EEXIST)
		return cordon_err_set(b->err, -errno, "mkdir '%s'", empty);
	return bld_push_lower(b, empty);
}

/* The base template is pinned: the version its name points to now is held (so that no
 * removal or gc deletes it under the build), its directory opened once, template.json read
 * through it, and the layer named by its fd (/proc/self/fd/N) for every step and the
 * flatten, so that a template replaced meanwhile cannot change a build half-way. */
static int from_template(struct build *b, const char *name)
{
	char lower[64];
	struct cordon_err verr = {};
	store_version_close(&b->base, false); /* a second FROM */
	int r = store_version_open(name, &b->base, &verr);
	if (r == -ENOENT || r == -EINVAL)
		return cordon_err_setf(b->err, r, "'%s' is not a template (cordon template ls), nor "
				       "scratch, debian:SUITE[-slim] or oci-archive:PATH", name);
	if (r < 0)
		return cordon_err_setf(b->err, r, "FROM %s: %s", name, verr.msg);
	if (b->base_fd >= 0)
		close(b->base_fd);
	/* By path: the store's fd was opened before our mount namespace, and open_tree()
	 * clones only mounts of our own. */
	_cleanup_close_ int dir = open(b->base.path, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
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
	if (bld_hash_begin(&h, "template") < 0)
		return -ENOMEM;
	bld_hash_str(&h, name);
	bld_hash_str(&h, id);
	bld_hash_end(&h, b->key);
	snprintf(lower, sizeof(lower), "/proc/self/fd/%d", b->base_fd);
	return bld_push_lower(b, lower);
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
		? bld_open_beneath(b->ctx_fd, path, O_RDONLY | O_NOFOLLOW, RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS)
		: bld_open_beneath(AT_FDCWD, path, O_RDONLY, 0);
	if (fd < 0)
		return cordon_err_set(b->err, fd, "oci-archive '%s'%s", path,
				      b->o->confine ? " (in the build context)" : "");
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode))
		return cordon_err_setf(b->err, -EINVAL, "oci-archive '%s': not a regular file", path);
	if (bld_hash_begin(&h, "oci-archive") < 0)
		return -ENOMEM;
	int r = bld_hash_file(&h, fd, IMPORT_MAX);
	bld_hash_end(&h, b->key);
	if (r < 0)
		return cordon_err_set(b->err, r, "read '%s'", path);
	snprintf(fdpath, sizeof(fdpath), "/proc/self/fd/%d", fd);
	b->cached = bld_layer_exists(b, b->key) && !b->o->no_cache;
	if (!b->cached) {
		char tmp[PATH_MAX], key[LAYER_KEY_LEN + 1];
		_cleanup_close_ int diff = -1;
		struct oci_config cfg = {0};
		if ((r = bld_layer_tmp(b, tmp, sizeof(tmp), &diff)) < 0)
			return r;
		r = oci_import(fdpath, diff, IMPORT_MAX, &cfg, b->err);
		json_t *env = json_array();
		for (size_t i = 0; r >= 0 && cfg.env && cfg.env[i]; i++)
			json_array_append_new(env, json_string(cfg.env[i]));
		oci_config_done(&cfg);
		memcpy(key, b->key, sizeof(key));
		_cleanup_(json_decrefp) json_t *extra = json_pack("{s:o}", "env", env);
		if (r >= 0)
			r = bld_layer_commit(b, tmp, key, "FROM oci-archive", 0, extra);
		if (r < 0) {
			bld_remove_path(tmp);
			return r;
		}
	}
	_cleanup_(json_decrefp) json_t *meta = bld_layer_meta(b, b->key);
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(meta, "env"), i, e)
		if (json_is_string(e))
			json_array_append(b->env, e);
	json_array_append_new(b->layers, json_string(b->key));
	char p[PATH_MAX];
	bld_layer_path(b, b->key, p, sizeof(p));
	return bld_push_lower(b, p);
}

/* FROM debian:SUITE[-slim]: debootstrap's first stage on the host (it downloads Debian's
 * packages, checks their signatures against the host's keyring and unpacks them), its second
 * stage (dpkg, maintainer scripts) in a jail over that tree. */

/* debootstrap's first stage downloads a base system: minutes on a slow mirror, never an
 * hour. Past this the command is killed and the build fails. */
#define HOST_COMMAND_DEADLINE_MS (30 * 60 * 1000)

/* Forwards @fd's output to the build log until it ends; at @deadline_ms kills @pid and
 * reaps it (-ETIMEDOUT). */
static int relay_output(struct build *b, int fd, pid_t pid, uint64_t deadline_ms)
{
	char buf[8192];
	for (;;) {
		uint64_t now = now_ms();
		int left = now < deadline_ms ? (int)(deadline_ms - now) : 0;
		int p = poll(&(struct pollfd){.fd = fd, .events = POLLIN}, 1, left);
		if (p < 0 && errno == EINTR)
			continue;
		if (p == 0) {
			bld_flush_log(b);
			kill(pid, SIGKILL);
			(void)child_wait_deadline(pid, 1000, NULL);
			return -ETIMEDOUT;
		}
		ssize_t n = p < 0 ? -1 : read(fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		bld_emit_log(b, buf, n);
	}
	bld_flush_log(b);
	return 0;
}

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
	int r = relay_output(b, pipefd[0], pid, now_ms() + HOST_COMMAND_DEADLINE_MS);
	close(pipefd[0]);
	int status;
	if (r == 0)
		r = child_wait_deadline(pid, 1000, &status);
	if (r == -ETIMEDOUT)
		return cordon_err_setf(b->err, r, "%s did not finish in %d minutes: killed", argv[0],
				       HOST_COMMAND_DEADLINE_MS / 60000);
	if (r < 0)
		return cordon_err_set(b->err, r, "wait for %s", argv[0]);
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		return cordon_err_setf(b->err, -ECANCELED, "%s failed (status %d)", argv[0],
				       WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
	return 0;
}

static int write_in_root(int dirfd, const char *path, const char *content)
{
	_cleanup_close_ int fd = bld_open_beneath(dirfd, path, O_WRONLY | O_CREAT | O_TRUNC, RESOLVE_IN_ROOT);
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
	int r = bld_push_lower(b, root);
	if (r < 0)
		return r;
	r = bld_mount_scratch(b, up, sizeof(up));
	int64_t base = r < 0 ? r : bld_run_in_jail(b, &jr);
	free(b->lowers[--b->n_lowers]);
	r = base < 0 ? (int)base : bld_layer_tmp(b, changes, sizeof(changes), &cfd);
	snprintf(updiff, sizeof(updiff), "%s/up/diff", b->work);
	if (r >= 0 && (ufd = open(updiff, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = cordon_err_set(b->err, -errno, "open '%s'", updiff);
	if (r >= 0)
		r = layer_capture(ufd, cfd, (uid_t)base, &bytes, b->err);
	bld_umount_scratch(b);
	if (r >= 0)
		r = layer_apply(cfd, diff, b->err);
	if (changes[0])
		bld_remove_path(changes);
	return r;
}

static int debootstrap_layer(struct build *b, const char *suite, bool slim, const char *key)
{
	char tmp[2400], root[PATH_MAX], sources[1024], what[128];
	char variant[] = "--variant=minbase", comps[] = "--components=main", foreign[] = "--foreign";
	_cleanup_close_ int diff = -1, dev = -1;
	int r = bld_layer_tmp(b, tmp, sizeof(tmp), &diff);
	if (r < 0)
		return r;
	snprintf(root, sizeof(root), "%s/diff", tmp);
	char *first[] = {"debootstrap", foreign, variant, comps, (char *)suite, root, b->mirror, NULL};
	if ((r = run_host_command(b, first)) < 0)
		goto fail;
	/* The host's mknod'ed nodes go: every sandbox gets its own /dev. In a container
	 * debootstrap makes /proc a symlink to the host's; it is a mount point here. */
	if ((dev = openat(diff, "dev", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC)) >= 0)
		(void)tree_empty(dev, TREE_MAX_DEPTH);
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
	if ((r = bld_layer_commit(b, tmp, key, what, 0, NULL)) >= 0)
		return r;
fail:
	bld_remove_path(tmp);
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
	if (bld_hash_begin(&h, "debootstrap") < 0)
		return -ENOMEM;
	bld_hash_str(&h, suite);
	bld_hash_str(&h, slim ? "slim" : "minbase");
	bld_hash_str(&h, b->mirror);
	bld_hash_str(&h, b->security);
	bld_hash_end(&h, b->key);
	char key[LAYER_KEY_LEN + 1];
	memcpy(key, b->key, sizeof(key));
	if (!bld_layer_exists(b, key) || b->o->no_cache) {
		int r = debootstrap_layer(b, suite, slim, key); /* --no-cache: replaces the cached one */
		if (r < 0)
			return r;
	} else {
		b->cached = true;
	}
	return bld_push_layer(b, key);
}

int bld_from_step(struct build *b, const struct recipe_step *s)
{
	const char *img = s->argv[0];
	if (strcmp(img, "scratch") == 0) {
		struct hasher h;
		if (bld_hash_begin(&h, "scratch") < 0)
			return -ENOMEM;
		bld_hash_end(&h, b->key);
		return from_scratch(b);
	}
	if (strncmp(img, "debian:", 7) == 0)
		return from_debian(b, img + 7);
	if (strncmp(img, "oci-archive:", 12) == 0)
		return from_oci(b, img + 12);
	return from_template(b, img);
}

