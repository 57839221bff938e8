/* The template builder (build.h): recipe steps into cached layers, layers into a template. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/mount.h>
#include <time.h>
#include <unistd.h>

#include <openssl/evp.h>

#include <cordon/cordon.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/tree.h"
#include "build/build-int.h"
#include "image/layer.h"
#include "image/oci.h"
#include "image/recipe.h"
#include "image/store.h"

/* cordon-egress exits when its control socket closes; one that does not is killed. */
#define EGRESS_EXIT_DEADLINE_MS 5000

double bld_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

void bld_emit(struct build *b, json_t *ev)
{
	if (ev && b->o->emit)
		b->o->emit(b->o->emit_data, ev);
	json_decref(ev);
}

/* Keys. */

int bld_hash_begin(struct hasher *h, const char *parent)
{
	h->c = EVP_MD_CTX_new();
	if (!h->c || EVP_DigestInit_ex(h->c, EVP_sha256(), NULL) != 1)
		return -ENOMEM;
	EVP_DigestUpdate(h->c, parent, strlen(parent) + 1);
	return 0;
}

/* Each field with its terminating NUL, so that ("ab","c") and ("a","bc") differ. */
void bld_hash_str(struct hasher *h, const char *s)
{
	EVP_DigestUpdate(h->c, s ? s : "", s ? strlen(s) + 1 : 1);
}

void bld_hash_bytes(struct hasher *h, const void *p, size_t n)
{
	EVP_DigestUpdate(h->c, p, n);
}

void bld_hash_end(struct hasher *h, char out[LAYER_KEY_LEN + 1])
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
	bld_hash_str(h, s);
}

/* The config a RUN sees is part of its key: the same command in another environment is
 * another layer. */
bool bld_arg_in_scope(struct build *b, const char *kv)
{
	char name[128];
	snprintf(name, sizeof(name), "%.*s", (int)strcspn(kv, "="), kv);
	return json_object_get(b->args, name) != NULL;
}

static void hash_config(struct hasher *h, struct build *b)
{
	hash_json(h, b->env);
	for (size_t i = 0; i < b->recipe->n_build_env; i++)
		if (bld_arg_in_scope(b, b->recipe->build_env[i]))
			bld_hash_str(h, b->recipe->build_env[i]);
	bld_hash_str(h, b->workdir);
	bld_hash_str(h, b->user);
}

/* Layers in the store. */

void bld_layer_path(struct build *b, const char *key, char *buf, size_t size)
{
	snprintf(buf, size, "%s/" STORE_LAYERS "/%s/diff", b->store, key);
}

bool bld_layer_exists(struct build *b, const char *key)
{
	char p[PATH_MAX];
	struct stat st;
	bld_layer_path(b, key, p, sizeof(p));
	return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int bld_push_lower(struct build *b, const char *path)
{
	if (b->n_lowers >= MAX_LAYERS)
		return cordon_err_setf(b->err, -E2BIG, "more than %u layers", MAX_LAYERS);
	if (!(b->lowers[b->n_lowers] = strdup(path)))
		return cordon_err_setf(b->err, -ENOMEM, "out of memory");
	b->n_lowers++;
	return 0;
}

int bld_push_layer(struct build *b, const char *key)
{
	char p[PATH_MAX];
	bld_layer_path(b, key, p, sizeof(p));
	json_array_append_new(b->layers, json_string(key));
	return bld_push_lower(b, p);
}

void bld_remove_path(const char *path)
{
	(void)tree_remove_at(AT_FDCWD, path, TREE_MAX_DEPTH);
}

/* A new layer's directory: <store>/.tmp-XXXXXX with diff/ inside. */
int bld_layer_tmp(struct build *b, char *tmp, size_t size, int *ret_diff)
{
	snprintf(tmp, size, "%s/" STORE_TMP_PREFIX "XXXXXX", b->store);
	if (!mkdtemp(tmp))
		return cordon_err_set(b->err, -errno, "mkdtemp in the store");
	char diff[PATH_MAX];
	snprintf(diff, sizeof(diff), "%s/diff", tmp);
	if (mkdir(diff, 0755) < 0 || (*ret_diff = open(diff, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		int r = cordon_err_set(b->err, -errno, "mkdir '%s'", diff);
		bld_remove_path(tmp);
		return r;
	}
	return 0;
}

/* Moves a finished layer into place. Another build may have made the same key meanwhile:
 * same key, same content, so theirs is kept and ours dropped; with --no-cache ours replaces
 * theirs, which is moved aside (".rm-*") for the store's sweep, never deleted under a build
 * that may be reading it. @extra (may be NULL) is added to its layer.json. */
int bld_layer_commit(struct build *b, const char *tmp, const char *key, const char *what,
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
		bld_remove_path(tmp);
		return 0;
	}
	char aside[PATH_MAX];
	snprintf(aside, sizeof(aside), "%s/.rm-%s", b->store, strrchr(tmp, '/') + 1 + strlen(STORE_TMP_PREFIX));
	if (syscall(SYS_renameat2, AT_FDCWD, tmp, AT_FDCWD, dst, RENAME_EXCHANGE) < 0 || rename(tmp, aside) < 0)
		return cordon_err_set(b->err, -errno, "replace layer '%s'", key);
	return 0;
}

json_t *bld_layer_meta(struct build *b, const char *key)
{
	char p[PATH_MAX];
	snprintf(p, sizeof(p), "%s/" STORE_LAYERS "/%s/layer.json", b->store, key);
	return json_load_file(p, 0, NULL);
}

/* The build's scratch tmpfs: what one step may write, in RAM, bounded. */
int bld_mount_scratch(struct build *b, char *up, size_t size)
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

void bld_umount_scratch(struct build *b)
{
	char up[PATH_MAX];
	snprintf(up, sizeof(up), "%s/up", b->work);
	(void)umount2(up, MNT_DETACH);
}

/* What a step left in the scratch upper directory becomes the layer @key. */
int bld_capture_commit(struct build *b, const char *key, const char *what, uid_t base)
{
	char tmp[PATH_MAX], diff[PATH_MAX];
	_cleanup_close_ int dfd = -1;
	uint64_t bytes = 0;
	int r = bld_layer_tmp(b, tmp, sizeof(tmp), &dfd);
	if (r < 0)
		return r;
	snprintf(diff, sizeof(diff), "%s/up/diff", b->work);
	_cleanup_close_ int sfd = open(diff, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (sfd < 0)
		r = cordon_err_set(b->err, -errno, "open '%s'", diff);
	else
		r = layer_capture(sfd, dfd, base, &bytes, b->err);
	if (r >= 0)
		r = bld_layer_commit(b, tmp, key, what, bytes, NULL);
	if (r < 0)
		bld_remove_path(tmp);
	b->step_bytes = bytes;
	return r;
}

/* Steps. */

static int step_key(struct build *b, const char *text, bool with_config, char out[LAYER_KEY_LEN + 1])
{
	struct hasher h;
	if (bld_hash_begin(&h, b->key) < 0)
		return cordon_err_setf(b->err, -ENOMEM, "out of memory");
	bld_hash_str(&h, text);
	if (with_config)
		hash_config(&h, b);
	bld_hash_end(&h, out);
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
		if (store_user(s->argv[0], &u) < 0)
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
		return bld_from_step(b, s);
	case RECIPE_RUN:
		if ((r = step_key(b, text, true, key)) < 0)
			return r;
		break;
	case RECIPE_COPY:
		if ((r = bld_copy_dest(b, s, dest, sizeof(dest), &dest_dir)) < 0 ||
		    (r = bld_copy_key(b, s, dest, dest_dir, key)) < 0)
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
	b->cached = bld_layer_exists(b, key) && !b->o->no_cache;
	if (!b->cached) {
		r = s->kind == RECIPE_RUN ? bld_run_step(b, s, key) : bld_copy_step(b, s, key, dest, dest_dir);
		if (r < 0)
			return r;
	}
	memcpy(b->key, key, sizeof(key));
	return bld_push_layer(b, key);
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
		double t0 = bld_now();
		b->step = i + 1;
		b->cached = false;
		b->step_bytes = 0;
		bld_emit(b, json_pack("{s:s, s:I, s:I, s:I, s:s}", "event", "step", "step", (json_int_t)b->step, "of",
				  (json_int_t)b->recipe->n_steps, "line", (json_int_t)s->line, "instruction", s->text));
		int r = do_step(b, s);
		if (r < 0)
			return fail_step(b, s, r);
		bld_emit(b, json_pack("{s:s, s:I, s:b, s:f, s:I}", "event", "step_done", "step", (json_int_t)b->step,
				  "cached", b->cached, "seconds", bld_now() - t0, "bytes", (json_int_t)b->step_bytes));
	}
	return 0;
}

int build_template(const struct build_opts *o, json_t **ret_meta, struct cordon_err *err)
{
	struct build b = {.o = o, .sfd = -1, .lock_fd = -1, .ctx_fd = -1, .base_fd = -1, .base = STORE_VERSION_INIT,
			  .egress = {.fd = -1},
			  .err = err};
	double t0 = bld_now();
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
	bld_scan_sources(&b);
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
	bld_emit(&b, json_pack("{s:s, s:s, s:s, s:f, s:b}", "event", "done", "name", o->name, "key", b.key,
			   "seconds", bld_now() - t0, "up_to_date", fresh));
	r = 0;
out:
	if (b.work[0])
		bld_remove_path(b.work);
	if (b.egress.fd >= 0) {
		close(b.egress.fd); /* the proxy ends when its control socket does */
		(void)child_wait_deadline(b.egress.pid, EGRESS_EXIT_DEADLINE_MS, NULL);
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
	store_version_close(&b.base, false);
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
			(void)tree_size(fd, &size);
		if ((r = tree_remove_at(lfd, de->d_name, TREE_MAX_DEPTH)) < 0)
			return cordon_err_set(err, r, "remove layer %s", de->d_name);
		(*ret_layers)++;
		*ret_bytes += size;
	}
	return 0; /* what dead builds left went when the lock was taken */
}
