/* Audit records that must not be lost: a destroy that could not be recorded when it
 * happened (a full disk), and what a dead daemon left in the audit directory.
 *
 * A destroy cannot be refused, so its record is written late: the sandbox goes at once, and
 * a timer tries the record again every second until it is written (after a repair of the
 * torn tail the failed write left, which audit_open() does). At start, every log that is
 * not sealed is looked at, whether or not its sandbox is in state.db: an empty one (a pooled
 * sandbox that never got a record) is removed; one that does not end in sandbox.destroy gets
 * its tail repaired and the record; then it is sealed (mode 0400, audit_seal()), so that the
 * next start passes it with one stat. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "basic/log.h"
#include "audit/audit.h"
#include "daemon/daemon.h"

#define LATE_MAX      100000 /* destroy records waiting for space; the restart sweep has the rest */
#define LATE_RETRY_MS 1000

struct late {
	struct late *next;
	char id[SBX_ID_LEN + 1];
	char reason[32];
	char at[40]; /* when the sandbox was destroyed */
};

static struct late *late_head;
static size_t n_late;
static struct event *late_ev;

static void log_name(const char *id, char name[SBX_ID_LEN + 8])
{
	snprintf(name, SBX_ID_LEN + 8, "%s.jsonl", id);
}

/* Opens @id's log for a last record: NULL with -ENOENT in @ret_r if it has none (nothing was
 * ever recorded, so nothing is to be), and removes it if it is empty. */
static struct audit_log *open_last(const char *id, int *ret_r)
{
	char name[SBX_ID_LEN + 8];
	struct cordon_err err = {};
	struct stat st;
	log_name(id, name);
	if (fstatat(D.audit_dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || st.st_size == 0) {
		*ret_r = -ENOENT;
		unlinkat(D.audit_dirfd, name, 0);
		return NULL;
	}
	struct audit_log *log = audit_open(D.audit_dirfd, name, &err);
	if (!log)
		*ret_r = err.code ? err.code : -EIO;
	return log;
}

/* Writes @id's sandbox.destroy now and seals the log; 1 when there is nothing to write. */
static int write_destroy(const char *id, json_t *fields)
{
	int r = 0;
	struct audit_log *log = open_last(id, &r);
	if (!log)
		return r == -ENOENT ? 1 : r;
	r = audit_append(log, id, AUDIT_SANDBOX_DESTROY, fields);
	if (r == 0)
		r = audit_seal(log);
	audit_free(log);
	return r;
}

static int late_write(const struct late *l)
{
	_cleanup_(json_decrefp) json_t *f = json_pack("{s:s, s:b, s:s}", "reason", l->reason,
						      "recorded_late", 1, "destroyed_at", l->at);
	return f ? write_destroy(l->id, f) : -ENOMEM;
}

static bool transient(int r)
{
	static const int codes[] = {ENOSPC, EDQUOT, EIO, EFBIG, ENOMEM, EMFILE, ENFILE, EAGAIN};
	for (size_t i = 0; i < ELEMENTSOF(codes); i++)
		if (r == -codes[i])
			return true;
	return false;
}

void audit_late_flush(void)
{
	for (struct late **p = &late_head; *p;) {
		struct late *l = *p;
		int r = late_write(l);
		/* Space (and memory, fds) come back by themselves: while they do not, one try a
		 * round is enough. A log that is not ours to write any more (sealed, corrupt,
		 * held) is left to the restart sweep and to a person. */
		if (r < 0 && transient(r))
			return;
		if (r < 0)
			log_error("sandbox %s: its destroy record cannot be written: %s", l->id,
				  strerror(-r));
		else if (r == 0)
			log_info("sandbox %s: its destroy record is written now", l->id);
		*p = l->next;
		n_late--;
		free(l);
	}
}

static void on_late(evutil_socket_t fd, short what, void *arg)
{
	audit_late_flush();
	if (late_head) {
		struct timeval tv = {LATE_RETRY_MS / 1000, LATE_RETRY_MS % 1000 * 1000};
		evtimer_add(late_ev, &tv);
	}
}

void audit_late(const char *id, const char *reason)
{
	struct late *l = n_late < LATE_MAX ? calloc(1, sizeof(*l)) : NULL;
	if (!l) {
		log_error("sandbox %s: its destroy record waits for the next start", id);
		return;
	}
	snprintf(l->id, sizeof(l->id), "%s", id);
	snprintf(l->reason, sizeof(l->reason), "%s", reason);
	iso_time(now_ms(), l->at);
	l->next = late_head;
	late_head = l;
	n_late++;
	log_error("sandbox %s: destroyed; its audit record cannot be written now, it will be when "
		  "there is space", id);
	if (!late_ev && !(late_ev = evtimer_new(D.base, on_late, NULL)))
		return;
	if (!evtimer_pending(late_ev, NULL)) {
		struct timeval tv = {LATE_RETRY_MS / 1000, LATE_RETRY_MS % 1000 * 1000};
		evtimer_add(late_ev, &tv);
	}
}

size_t audit_late_pending(void)
{
	return n_late;
}

/* ---- at start ---- */

static bool in_list(const char *id, char *const *ids, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (strcmp(ids[i], id) == 0)
			return true;
	return false;
}

/* One log of the audit directory, named @name (an id and ".jsonl"). */
static void recover_log(const char *name, char *const *left, size_t n_left)
{
	char id[SBX_ID_LEN + 1];
	struct audit_tail t;
	size_t len = strlen(name);
	if (len <= 6 || len - 6 > SBX_ID_LEN || strcmp(name + len - 6, ".jsonl") != 0)
		return;
	snprintf(id, sizeof(id), "%.*s", (int)(len - 6), name);
	if (!valid_id(id) || strcmp(id, "cordond") == 0)
		return;
	struct stat st;
	if (fstatat(D.audit_dirfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(st.st_mode) ||
	    !(st.st_mode & S_IWUSR))
		return; /* sealed: closed by the daemon that wrote it, one stat to know */
	int r = audit_tail(D.audit_dirfd, name, &t);
	if (r < 0) {
		log_error("audit log %s: cannot read its end: %s", name, strerror(-r));
		return;
	}
	bool left_here = in_list(id, left, n_left);
	if (t.empty) {
		unlinkat(D.audit_dirfd, name, 0); /* a pooled sandbox: nothing was recorded */
		return;
	}
	json_t *f = NULL;
	if (strcmp(t.event, AUDIT_SANDBOX_DESTROY) != 0)
		f = left_here ? json_pack("{s:s}", "reason", "daemon_restart")
			      : json_pack("{s:s, s:b}", "reason", "unrecorded", "recorded_late", 1);
	struct cordon_err err = {};
	struct audit_log *log = audit_open(D.audit_dirfd, name, &err); /* repairs a torn tail */
	r = log ? 0 : err.code;
	if (log && f)
		r = audit_append(log, id, AUDIT_SANDBOX_DESTROY, f);
	if (r == 0)
		r = audit_seal(log);
	json_decref(f);
	audit_free(log);
	if (r < 0)
		log_error("audit log %s: cannot close it: %s; the next start tries again", name,
			  err.msg[0] ? err.msg : strerror(-r));
	else if (!left_here && (f || t.torn))
		log_info("audit log %s: %s", name, f ? "its destroy record is written now"
						       : "its torn tail is repaired");
}

int audit_recover(char *const *left, size_t n_left)
{
	int fd = fcntl(D.audit_dirfd, F_DUPFD_CLOEXEC, 3);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d) {
		int r = -errno;
		if (fd >= 0)
			close(fd);
		return r;
	}
	struct dirent *de;
	while ((de = readdir(d)))
		if (de->d_type == DT_REG || de->d_type == DT_UNKNOWN)
			recover_log(de->d_name, left, n_left);
	closedir(d);
	return 0;
}
