#pragma once

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
