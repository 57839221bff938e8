/* What the subcommands share that is not a request to cordond (that is client.h). */
#pragma once

#include <stddef.h>

#include <jansson.h>

/* "3m ago", "in 4m59s" for an RFC 3339 UTC time into @buf; @iso itself if unreadable. */
void cli_relative_time(const char *iso, char *buf, size_t size);

/* "k=v,k2=v2" of a metadata object (malloc'd; NULL when out of memory). */
char *cli_metadata_string(json_t *meta);

/* Execs the helper binary @name (found as basic/helper.h says, $@env overriding) with @argv,
 * argv[0] replaced; returns 1 after printing why when it cannot. */
int cli_exec_helper(const char *name, const char *env, char **argv);
