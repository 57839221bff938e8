#pragma once

/* One function per subcommand: (argc, argv) after the subcommand name; returns the exit
 * status. */
int cmd_run(int argc, char **argv);
