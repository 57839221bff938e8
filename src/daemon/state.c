/* state.db: the sandboxes a daemon runs, so that the next one knows what a crashed one left.
 * One row per live sandbox; written on create and on deadline changes, deleted on destroy.
 * WAL, synchronous=NORMAL: a lost last write after a power cut at worst forgets a row whose
 * sandbox died with the machine anyway. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sqlite3.h>

#include "basic/log.h"
#include "daemon/daemon.h"

static sqlite3_stmt *put_stmt, *del_stmt;

/* ---- one cordond per state directory ----
 *
 * A second daemon on the same directory would take the first one's sandboxes for a crashed
 * daemon's leftovers: delete their rows and write their destroy records while they run. So
 * the directory is locked before anything in it is read: flock() on <state-dir>/cordond.lock,
 * held for the life of the process (the kernel drops it when we die, SIGKILL included), with
 * the holder's pid in the file for the message of the one refused. */

static int lock_fd = -1;

static pid_t lock_holder(int fd)
{
	char buf[32] = "";
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	buf[n > 0 ? n : 0] = '\0';
	long pid = strtol(buf, NULL, 10);
	return pid > 0 ? (pid_t)pid : 0;
}

/* A dead holder's lock can outlive it for a moment: a sandbox child between clone() and its
 * close_range() shares the lock's open file. Wait for those, not for a live daemon. */
static int take_lock(int fd)
{
	for (int i = 0;; i++) {
		if (flock(fd, LOCK_EX | LOCK_NB) == 0)
			return 0;
		if (errno != EWOULDBLOCK)
			return -errno;
		pid_t holder = lock_holder(fd);
		bool dead = holder > 0 && kill(holder, 0) < 0 && errno == ESRCH;
		if (!dead || i == 60)
			return -EWOULDBLOCK;
		usleep(50 * 1000);
	}
}

int state_lock(void)
{
	char path[4096], pid[32];
	if (mkdir(D.cfg.state_dir, 0700) < 0 && errno != EEXIST) {
		log_error("mkdir %s: %m", D.cfg.state_dir);
		return -errno;
	}
	snprintf(path, sizeof(path), "%s/cordond.lock", D.cfg.state_dir);
	_cleanup_close_ int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0) {
		log_error("lock %s: %m", path);
		return -errno;
	}
	int r = take_lock(fd);
	if (r < 0) {
		pid_t holder = r == -EWOULDBLOCK ? lock_holder(fd) : 0;
		if (r != -EWOULDBLOCK)
			log_error("lock %s: %s", path, strerror(-r));
		else if (holder)
			log_error("state directory %s is in use by cordond pid %d (%s); not starting",
				  D.cfg.state_dir, (int)holder, path);
		else
			log_error("state directory %s is in use by another cordond (%s); not starting",
				  D.cfg.state_dir, path);
		return r == -EWOULDBLOCK ? -EBUSY : r;
	}
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(fd, 0) < 0 || pwrite(fd, pid, (size_t)n, 0) != n)
		log_warning("lock %s: cannot record our pid: %m", path);
	lock_fd = TAKE_FD(fd);
	return 0;
}

static int exec_sql(const char *sql)
{
	char *msg = NULL;
	if (sqlite3_exec(D.db, sql, NULL, NULL, &msg) != SQLITE_OK) {
		log_error("state.db: %s", msg ? msg : "error");
		sqlite3_free(msg);
		return -EIO;
	}
	return 0;
}

/* ---- checkpoints, off the loop ----
 *
 * SQLite's automatic checkpoint runs in the connection that commits, which is the event loop:
 * once the WAL held 1,000 pages (a few hundred lifecycles) one commit copied it into state.db
 * and fsync()ed that, a stall of milliseconds on every request behind it (bench/RESULTS.md:
 * a destroy of 4 ms in 300). The WAL hook queues a PASSIVE checkpoint on the teardown thread
 * instead, on a connection of that thread's own, one at a time; a passive checkpoint never
 * blocks the loop's commits. Should those fail (the thread's queue full, the second
 * connection refused), the commit that finds the WAL at CHECKPOINT_LOOP_PAGES checkpoints it
 * on the loop, as SQLite would have: the WAL never grows without bound. */
#define CHECKPOINT_PAGES      1000
#define CHECKPOINT_LOOP_PAGES (8 * CHECKPOINT_PAGES)

static char db_path[4096];
static sqlite3 *ckpt_db; /* the teardown thread's */
static bool ckpt_pending;

static void checkpoint(void *arg)
{
	/* a connection learns the database is in WAL mode when it first reads it: before, a
	 * checkpoint does nothing */
	if (!ckpt_db && (sqlite3_open_v2(db_path, &ckpt_db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX,
					 NULL) != SQLITE_OK ||
			 sqlite3_exec(ckpt_db, "PRAGMA journal_mode=WAL;", NULL, NULL, NULL) != SQLITE_OK)) {
		sqlite3_close(ckpt_db);
		ckpt_db = NULL;
		return;
	}
	(void)sqlite3_wal_checkpoint_v2(ckpt_db, NULL, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
}

static void checkpoint_done(void *arg)
{
	ckpt_pending = false;
}

static int on_wal_commit(void *arg, sqlite3 *db, const char *name, int pages)
{
	if (pages >= CHECKPOINT_LOOP_PAGES)
		(void)sqlite3_wal_checkpoint_v2(db, name, SQLITE_CHECKPOINT_PASSIVE, NULL, NULL);
	else if (pages >= CHECKPOINT_PAGES && !ckpt_pending &&
		 teardown_call(checkpoint, NULL, checkpoint_done, NULL) == 0)
		ckpt_pending = true;
	return SQLITE_OK;
}

int state_open(void)
{
	snprintf(db_path, sizeof(db_path), "%s/state.db", D.cfg.state_dir);
	if (sqlite3_open_v2(db_path, &D.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		log_error("state.db %s: %s", db_path, D.db ? sqlite3_errmsg(D.db) : "cannot open");
		return -EIO;
	}
	int r = exec_sql("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
			 "CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, owner TEXT,"
			 " created_ms INTEGER, deadline_ms INTEGER, metadata TEXT);");
	if (r < 0)
		return r;
	sqlite3_wal_hook(D.db, on_wal_commit, NULL); /* in place of the automatic checkpoint */
	if (sqlite3_prepare_v2(D.db, "INSERT OR REPLACE INTO sandboxes VALUES (?,?,?,?,?)", -1, &put_stmt, NULL) != SQLITE_OK ||
	    sqlite3_prepare_v2(D.db, "DELETE FROM sandboxes WHERE id = ?", -1, &del_stmt, NULL) != SQLITE_OK) {
		log_error("state.db: %s", sqlite3_errmsg(D.db));
		return -EIO;
	}
	return 0;
}

int state_put(const struct sbx *s)
{
	_cleanup_free_ char *meta = json_dumps(s->metadata, JSON_COMPACT);
	sqlite3_reset(put_stmt);
	sqlite3_bind_text(put_stmt, 1, s->id, -1, SQLITE_STATIC);
	sqlite3_bind_text(put_stmt, 2, s->owner ? s->owner->name : "local", -1, SQLITE_STATIC);
	sqlite3_bind_int64(put_stmt, 3, (sqlite3_int64)s->created_ms);
	sqlite3_bind_int64(put_stmt, 4, (sqlite3_int64)s->deadline_ms);
	sqlite3_bind_text(put_stmt, 5, meta ? meta : "{}", -1, SQLITE_STATIC);
	return sqlite3_step(put_stmt) == SQLITE_DONE ? 0 : -EIO;
}

int state_delete(const char *id)
{
	if (!del_stmt)
		return 0;
	sqlite3_reset(del_stmt);
	sqlite3_bind_text(del_stmt, 1, id, -1, SQLITE_STATIC);
	return sqlite3_step(del_stmt) == SQLITE_DONE ? 0 : -EIO;
}

int state_recover(void (*cb)(const char *id, void *data), void *data)
{
	sqlite3_stmt *st;
	if (sqlite3_prepare_v2(D.db, "SELECT id FROM sandboxes", -1, &st, NULL) != SQLITE_OK)
		return -EIO;
	while (sqlite3_step(st) == SQLITE_ROW)
		cb((const char *)sqlite3_column_text(st, 0), data);
	sqlite3_finalize(st);
	return exec_sql("DELETE FROM sandboxes;");
}

void state_close(void)
{
	sqlite3_finalize(put_stmt);
	sqlite3_finalize(del_stmt);
	put_stmt = del_stmt = NULL;
	if (D.db)
		sqlite3_close(D.db);
	D.db = NULL;
}
