#pragma once

#include <stdbool.h>

#include <jansson.h>

#include <cordon/cordon.h>

#include "runtime/volume.h"

/* One function per subcommand: (argc, argv) after the subcommand name; returns the exit
 * status. Each lives in cmd_<name>.c; main.c is the dispatch table. `run` works without a
 * daemon, `audit` and `template` exec helper binaries, the others are clients of cordond
 * (client.h). */
int cmd_run(int argc, char **argv);
int cmd_create(int argc, char **argv);
int cmd_ls(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_exec(int argc, char **argv);
int cmd_kill(int argc, char **argv);
int cmd_timeout(int argc, char **argv);
int cmd_approvals(int argc, char **argv);
int cmd_approve(int argc, char **argv);
int cmd_deny(int argc, char **argv);
int cmd_network(int argc, char **argv);
int cmd_template(int argc, char **argv);
int cmd_cp(int argc, char **argv);
int cmd_logs(int argc, char **argv);
int cmd_audit(int argc, char **argv);
/* cmd_snapshot.c: pause, resume, snapshot (and snapshot ls|rm), fork */
int cmd_pause(int argc, char **argv);
int cmd_resume(int argc, char **argv);
int cmd_snapshot(int argc, char **argv);
int cmd_fork(int argc, char **argv);
int cmd_volume(int argc, char **argv);
/* cmd_mcp.c: a Model Context Protocol server (mcp.h) */
int cmd_mcp(int argc, char **argv);
int cmd_runtimes(int argc, char **argv);
int cmd_code(int argc, char **argv);
int cmd_port_forward(int argc, char **argv);

/* cmd_archive.c: cordon cp -r, the contents of a directory into or out of one */
int cp_dir_upload(const char *socket, const char *local, const char *id, const char *path);
int cp_dir_download(const char *socket, const char *id, const char *path, const char *local);

/* cmd_volume.c: NAME:PATH[:ro], for create --volume and run --volume */
struct cli_volume {
	char name[VOLUME_NAME_MAX + 1];
	char path[4096];
	bool read_only;
};
int cli_volume_parse(const char *arg, struct cli_volume *ret); /* -EINVAL, said */
/* Appends {"name", "path", "read_only"} to @req's "volumes". */
int cli_volume_add_json(json_t *req, const char *arg);

/* The volumes of a one-shot run, mounted by cordon run itself (volume.h's lock). */
struct run_volumes {
	struct cli_volume v[CORDON_MAX_VOLUMES];
	struct volume_handle h[CORDON_MAX_VOLUMES];
	size_t n;
};
int run_volumes_add(struct run_volumes *rv, const char *arg);
/* Mounts them into @spec->volumes; 0 or the exit status, said. */
int run_volumes_open(struct run_volumes *rv, struct cordon_spec *spec);
void run_volumes_close(struct run_volumes *rv); /* after the sandbox is gone */
