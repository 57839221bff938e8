/* state.db: the sandboxes a daemon runs, so that the next one knows what a crashed one left.
 * One row per live sandbox; written on create and on deadline changes, deleted on destroy.
 * WAL, synchronous=NORMAL: a lost last write after a power cut at worst forgets a row whose
 * sandbox died with the machine anyway. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <sqlite3.h>

#include "basic/log.h"
#include "daemon/daemon.h"

static sqlite3_stmt *put_stmt, *del_stmt;

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

int state_open(void)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/state.db", D.cfg.state_dir);
	if (sqlite3_open_v2(path, &D.db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, NULL) != SQLITE_OK) {
		log_error("state.db %s: %s", path, D.db ? sqlite3_errmsg(D.db) : "cannot open");
		return -EIO;
	}
	int r = exec_sql("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
			 "CREATE TABLE IF NOT EXISTS sandboxes (id TEXT PRIMARY KEY, owner TEXT,"
			 " created_ms INTEGER, deadline_ms INTEGER, metadata TEXT);");
	if (r < 0)
		return r;
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
