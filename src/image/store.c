/* The template store (store.h): names, template.json, imports; versions are version.c's.
 * Concurrency: every import and removal holds a shared flock on <store>/.lock while its
 * temporary directory exists; whoever gets it exclusively knows no one is working and
 * removes what a killed process left behind (.tmp-*, .rm-*). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "basic/cleanup.h"
#include "basic/tree.h"
#include "image/store-int.h"
#include "image/store.h"

#define TMP_PREFIX ".tmp-"
#define RM_PREFIX  STORE_RM_PREFIX
#define LOCK_NAME  ".lock"
#define META_NAME  "template.json"
#define ROOTFS     "rootfs"

bool store_name_valid(const char *name)
{
	size_t n = name ? strlen(name) : 0;
	if (n == 0 || n > STORE_NAME_MAX || strcmp(name, STORE_RESERVED) == 0)
		return false;
	for (size_t i = 0; i < n; i++) {
		char c = name[i];
		bool ok = (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
			  (i > 0 && (c == '.' || c == '_' || c == '-'));
		if (!ok)
			return false;
	}
	return true;
}

static int bad_name(struct cordon_err *err, const char *name)
{
	char shown[STORE_NAME_MAX + 1];
	size_t i = 0;
	for (; name[i] && i < STORE_NAME_MAX; i++)
		shown[i] = (unsigned char)name[i] < 0x20 || name[i] == 0x7f ? '?' : name[i];
	shown[i] = '\0';
	if (strcmp(name, STORE_RESERVED) == 0)
		return cordon_err_setf(err, -EINVAL, "'%s' is reserved (the built-in template)", shown);
	return cordon_err_setf(err, -EINVAL, "'%s%s' is not a template name "
			       "(lowercase letters, digits, '.', '_', '-'; at most %u)",
			       shown, name[i] ? "..." : "", STORE_NAME_MAX);
}

int store_user(const char *user, enum cordon_user *ret)
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

int store_dir(char *buf, size_t size)
{
	const char *e = secure_getenv(STORE_ENV);
	const char *dir = e && *e == '/' ? e : STORE_DEFAULT_DIR;
	return (size_t)snprintf(buf, size, "%s", dir) < size ? 0 : -ENAMETOOLONG;
}

/* Where @name's files are, relative to the store: its version's directory, or the template's
 * own for one from before versions; -ENOENT for none, -EINVAL for a link not to its own
 * version (never followed). */
static int name_dir(int sfd, const char *name, char *rel, size_t size)
{
	char vid[STORE_VERSION_MAX];
	int r = store_read_pointer(sfd, name, vid);
	if (r == 0)
		snprintf(rel, size, STORE_VERSIONS "/%s", vid);
	else if (r == -EISDIR)
		snprintf(rel, size, "%s", name);
	else
		return r;
	return 0;
}

int store_path(const char *name, char *buf, size_t size)
{
	char dir[PATH_MAX], rel[sizeof(STORE_VERSIONS) + STORE_VERSION_MAX];
	struct stat st;
	if (!store_name_valid(name))
		return -EINVAL;
	_cleanup_close_ int sfd = store_open_dir(false, NULL);
	if (sfd < 0)
		return sfd == -ENOENT ? -ENOENT : sfd;
	int r = name_dir(sfd, name, rel, sizeof(rel));
	if (r < 0)
		return r == -EINVAL ? -ENOENT : r;
	if (store_dir(dir, sizeof(dir)) < 0 ||
	    (size_t)snprintf(buf, size, "%s/%s/" ROOTFS, dir, rel) >= size)
		return -ENAMETOOLONG;
	if (lstat(buf, &st) < 0)
		return -errno;
	return S_ISDIR(st.st_mode) ? 0 : -ENOENT;
}

/* The store's directory fd; with @create, made 0700 if missing (and its parent, 0755, for
 * the default location). A store others can write to is refused: they could plant a
 * template or swap one under a sandbox. */
int store_open_dir(bool create, struct cordon_err *err)
{
	char dir[PATH_MAX];
	struct stat st;
	if (store_dir(dir, sizeof(dir)) < 0)
		return cordon_err_setf(err, -ENAMETOOLONG, "$%s is too long", STORE_ENV);
	if (create && strcmp(dir, STORE_DEFAULT_DIR) == 0)
		(void)mkdir("/var/lib/cordon", 0755);
	if (create && mkdir(dir, 0700) < 0 && errno != EEXIST)
		return cordon_err_set(err, -errno, "store '%s'", dir);
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return cordon_err_set(err, -errno, "store '%s'", dir);
	if (fstat(fd, &st) < 0 || (st.st_mode & 0022) || st.st_uid != geteuid()) {
		close(fd);
		return cordon_err_setf(err, -EPERM, "store '%s' is not ours alone (owner %u, "
				       "mode %04o): fix it with chown and chmod 0700",
				       dir, (unsigned)st.st_uid, (unsigned)(st.st_mode & 07777));
	}
	return fd;
}

/* Removes what killed imports, builds and removals left behind (the caller holds the lock
 * exclusively). */
static void sweep(int sfd)
{
	_cleanup_closedir_ DIR *d = tree_opendir_dup(sfd);
	struct dirent *de;
	while (d && (de = readdir(d)))
		if (strncmp(de->d_name, TMP_PREFIX, strlen(TMP_PREFIX)) == 0 ||
		    strncmp(de->d_name, RM_PREFIX, strlen(RM_PREFIX)) == 0)
			(void)tree_remove_at(sfd, de->d_name, TREE_MAX_DEPTH);
}

/* The store's lock, taken as @how: LOCK_SH, LOCK_EX, or LOCK_EX | LOCK_NB (-EWOULDBLOCK when
 * someone holds it). Whoever gets it exclusively, and a shared taker who could have had it
 * so, first removes what killed imports, builds and removals left behind. */
int store_lock(int sfd, int how, struct cordon_err *err)
{
	_cleanup_close_ int fd = openat(sfd, LOCK_NAME, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return cordon_err_set(err, -errno, "store lock");
	bool exclusive = flock(fd, how == LOCK_SH ? LOCK_EX | LOCK_NB : how) == 0;
	if (!exclusive && how != LOCK_SH)
		return cordon_err_set(err, -errno, "store lock");
	if (exclusive)
		sweep(sfd);
	if (how == LOCK_SH && flock(fd, LOCK_SH) < 0)
		return cordon_err_set(err, -errno, "store lock");
	return TAKE_FD(fd);
}

void store_sweep(void)
{
	_cleanup_close_ int sfd = store_open_dir(false, NULL);
	int lock = sfd < 0 ? -1 : store_lock(sfd, LOCK_EX | LOCK_NB, NULL);
	if (lock >= 0)
		close(lock); /* swept; let others in */
}

int store_open_locked(bool exclusive, int *ret_lock, struct cordon_err *err)
{
	_cleanup_close_ int sfd = store_open_dir(true, err);
	if (sfd < 0)
		return sfd;
	int lock = store_lock(sfd, exclusive ? LOCK_EX : LOCK_SH, err);
	if (lock < 0)
		return lock;
	*ret_lock = lock;
	return TAKE_FD(sfd);
}

static int write_meta(int dirfd, json_t *meta, struct cordon_err *err)
{
	_cleanup_close_ int fd = openat(dirfd, META_NAME, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
	if (fd < 0)
		return cordon_err_set(err, -errno, META_NAME);
	if (json_dumpfd(meta, fd, JSON_INDENT(2)) < 0 || write(fd, "\n", 1) != 1 || fsync(fd) < 0)
		return cordon_err_set(err, -(errno ?: EIO), "write " META_NAME);
	return 0;
}

static void now_rfc3339(char buf[32])
{
	time_t t = time(NULL);
	struct tm tm;
	gmtime_r(&t, &tm);
	strftime(buf, 32, "%Y-%m-%dT%H:%M:%SZ", &tm);
}

/* Fills the temporary directory @tmp: rootfs/ through @fill, then template.json. */
static int fill_tmp(int sfd, const char *tmp, const char *name, const char *vid, store_fill_fn fill,
		    void *userdata, json_t *meta, struct cordon_err *err)
{
	char created[32];
	uint64_t size = 0;
	_cleanup_close_ int tfd = openat(sfd, tmp, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (tfd < 0)
		return cordon_err_set(err, -errno, "temporary directory");
	if (mkdirat(tfd, ROOTFS, 0755) < 0)
		return cordon_err_set(err, -errno, "mkdir " ROOTFS);
	_cleanup_close_ int rfd = openat(tfd, ROOTFS, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (rfd < 0)
		return cordon_err_set(err, -errno, "open " ROOTFS);
	now_rfc3339(created);
	json_object_set_new(meta, "name", json_string(name));
	json_object_set_new(meta, "version", json_string(strrchr(vid, '@') + 1));
	json_object_set_new(meta, "created", json_string(created));
	int r = fill(rfd, meta, userdata, err);
	if (r < 0)
		return r;
	r = tree_size(rfd, &size);
	if (r < 0)
		return cordon_err_set(err, r, "size of the tree");
	json_object_set_new(meta, "size_bytes", json_integer((json_int_t)size));
	return write_meta(tfd, meta, err);
}

/* Publishes the filled @tmp as version @vid of @name; on success the meta moves from *@meta
 * to *@ret_meta (both NULL when the caller does not want it). */
static int publish(int sfd, const char *tmp, const char *name, const char *vid, bool replace,
		   json_t **meta, json_t **ret_meta, struct cordon_err *err)
{
	int r = store_publish(sfd, tmp, name, vid, replace, err);
	if (r < 0) {
		(void)tree_remove_at(sfd, tmp, TREE_MAX_DEPTH); /* if it never left */
		return r;
	}
	if (ret_meta)
		*ret_meta = TAKE_PTR(*meta);
	return 0;
}

int store_import(const char *name, bool replace, store_fill_fn fill, void *userdata,
		 json_t **ret_meta, struct cordon_err *err)
{
	char dir[PATH_MAX], path[PATH_MAX], vid[STORE_VERSION_MAX];

	if (!store_name_valid(name))
		return bad_name(err, name);
	_cleanup_close_ int sfd = store_open_dir(true, err);
	if (sfd < 0)
		return sfd;
	_cleanup_close_ int lock = store_lock(sfd, LOCK_SH, err);
	if (lock < 0)
		return lock;
	if (store_dir(dir, sizeof(dir)) < 0 ||
	    (size_t)snprintf(path, sizeof(path), "%s/" TMP_PREFIX "XXXXXX", dir) >= sizeof(path))
		return cordon_err_setf(err, -ENAMETOOLONG, "store path too long");
	int r = store_new_version_id(name, vid);
	if (r < 0)
		return cordon_err_set(err, r, "version id");
	if (!mkdtemp(path))
		return cordon_err_set(err, -errno, "mkdtemp '%s'", path);
	const char *tmp = strrchr(path, '/') + 1;

	_cleanup_(json_decrefp) json_t *meta = json_object();
	r = meta ? fill_tmp(sfd, tmp, name, vid, fill, userdata, meta, err)
		 : cordon_err_setf(err, -ENOMEM, "out of memory");
	if (r >= 0)
		return publish(sfd, tmp, name, vid, replace, ret_meta ? &meta : NULL, ret_meta, err);
	(void)tree_remove_at(sfd, tmp, TREE_MAX_DEPTH); /* our failed import */
	return r;
}

int store_remove(const char *name, struct cordon_err *err)
{
	if (!store_name_valid(name))
		return bad_name(err, name);
	_cleanup_close_ int sfd = store_open_dir(false, err);
	if (sfd < 0)
		return sfd == -ENOENT ? cordon_err_setf(err, -ENOENT, "no template '%s'", name) : sfd;
	_cleanup_close_ int lock = store_lock(sfd, LOCK_SH, err);
	if (lock < 0)
		return lock;
	return store_unname(sfd, name, err);
}

/* template.json at @rel under @dirfd (through the name's link, if @rel starts with one), of
 * template @name for messages. */
static json_t *read_meta_at(int dirfd, const char *rel, const char *name, struct cordon_err *err)
{
	struct stat st;
	json_error_t je;

	_cleanup_close_ int fd = openat(dirfd, rel, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		if (errno == ENOENT)
			cordon_err_setf(err, -ENOENT, "no template '%s'", name);
		else
			cordon_err_set(err, -errno, "template '%s'", name);
		return NULL;
	}
	if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > STORE_MAX_META) {
		cordon_err_setf(err, -EINVAL, "template '%s': " META_NAME " is not a small file", name);
		return NULL;
	}
	json_t *j = json_loadfd(fd, JSON_REJECT_DUPLICATES, &je);
	if (!j || !json_is_object(j)) {
		json_decref(j);
		cordon_err_setf(err, -EINVAL, "template '%s': " META_NAME ": %s", name,
				j ? "not an object" : je.text);
		return NULL;
	}
	return j;
}

/* template.json of @name, through its link; "version" from the link for a template made
 * before versions. */
static json_t *read_meta(int sfd, const char *name, struct cordon_err *err)
{
	char rel[sizeof(STORE_VERSIONS) + STORE_VERSION_MAX + sizeof("/" META_NAME)];
	char id[STORE_VERSION_ID_LEN + 1] = "";
	int r = name_dir(sfd, name, rel, sizeof(rel));
	if (r == -ENOENT)
		cordon_err_setf(err, -ENOENT, "no template '%s'", name);
	else if (r == -EINVAL)
		cordon_err_setf(err, -EINVAL, "template '%s' is not a link to one of its versions", name);
	else if (r < 0)
		cordon_err_set(err, r, "template '%s'", name);
	if (r < 0)
		return NULL;
	if (strchr(rel, '@'))
		snprintf(id, sizeof(id), "%s", strrchr(rel, '@') + 1);
	strcat(rel, "/" META_NAME);
	json_t *j = read_meta_at(sfd, rel, name, err);
	/* Converted from before versions: the link names the version template.json does not. */
	if (j && id[0] && !json_object_get(j, "version"))
		json_object_set_new(j, "version", json_string(id));
	return j;
}

int store_version_meta(const struct store_version *v, json_t **ret, struct cordon_err *err)
{
	_cleanup_close_ int dfd = open(v->path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (dfd < 0)
		return cordon_err_set(err, -errno, "template version %s", v->id);
	*ret = read_meta_at(dfd, META_NAME, v->id, err);
	return *ret ? 0 : (err && err->code ? err->code : -EINVAL);
}

int store_config_read(const struct store_version *v, struct store_config *ret,
		      struct cordon_err *err)
{
	*ret = (struct store_config){0};
	int r = store_version_meta(v, &ret->meta, err);
	if (r < 0)
		return r;
	size_t i;
	json_t *e;
	json_array_foreach(json_object_get(ret->meta, "env"), i, e)
		if (json_is_string(e) && strchr(json_string_value(e), '=') && ret->n_env < STORE_MAX_ENV)
			ret->env[ret->n_env++] = json_string_value(e);
	const char *wd = json_string_value(json_object_get(ret->meta, "workdir"));
	ret->workdir = wd && wd[0] == '/' ? wd : NULL;
	const char *user = json_string_value(json_object_get(ret->meta, "user"));
	if (user) {
		ret->user_set = true;
		if (store_user(user, &ret->user) < 0)
			ret->user = CORDON_USER_USER; /* an image's user the jail does not have */
	}
	json_t *start = json_object_get(ret->meta, "start"), *ready = json_object_get(ret->meta, "ready");
	ret->start = json_array_size(start) ? start : NULL;
	ret->ready = json_array_size(ready) ? ready : NULL;
	return 0;
}

void store_config_done(struct store_config *c)
{
	json_decref(c->meta);
	*c = (struct store_config){0};
}

int store_read(const char *name, json_t **ret, struct cordon_err *err)
{
	if (!store_name_valid(name))
		return bad_name(err, name);
	_cleanup_close_ int sfd = store_open_dir(false, err);
	if (sfd < 0)
		return sfd == -ENOENT ? cordon_err_setf(err, -ENOENT, "no template '%s'", name) : sfd;
	*ret = read_meta(sfd, name, err);
	return *ret ? 0 : (err && err->code ? err->code : -EINVAL);
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

int store_list(json_t **ret, struct cordon_err *err)
{
	_cleanup_(json_decrefp) json_t *list = json_array();
	if (!list)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	_cleanup_close_ int sfd = store_open_dir(false, err);
	if (sfd == -ENOENT) {
		*ret = TAKE_PTR(list);
		return 0;
	}
	if (sfd < 0)
		return sfd;
	int dfd = fcntl(sfd, F_DUPFD_CLOEXEC, 3);
	_cleanup_closedir_ DIR *d = dfd >= 0 ? fdopendir(dfd) : NULL;
	if (!d) {
		if (dfd >= 0)
			close(dfd);
		return cordon_err_set(err, -errno, "read the store");
	}
	/* Names first, sorted; then each template.json. */
	_cleanup_(json_decrefp) json_t *names = json_array();
	struct dirent *de;
	while ((de = readdir(d)))
		if (store_name_valid(de->d_name))
			json_array_append_new(names, json_string(de->d_name));
	size_t n = json_array_size(names), i;
	_cleanup_free_ const char **v = calloc(n + 1, sizeof(char *));
	if (!v)
		return cordon_err_setf(err, -ENOMEM, "out of memory");
	for (i = 0; i < n; i++)
		v[i] = json_string_value(json_array_get(names, i));
	qsort(v, n, sizeof(char *), cmp_str);
	for (i = 0; i < n; i++) {
		json_t *m = read_meta(sfd, v[i], NULL);
		if (m)
			json_array_append_new(list, m);
	}
	*ret = TAKE_PTR(list);
	return 0;
}
