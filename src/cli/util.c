/* What the subcommands share that is not a request to cordond (client.c): a person's reading
 * of times and labels, and the helper binaries. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>

#include "basic/helper.h"
#include "basic/log.h"
#include "cli/util.h"

/* "3m ago", "in 4m59s": a person's reading of an RFC 3339 UTC time. */
void cli_relative_time(const char *iso, char *buf, size_t size)
{
	struct tm tm = {};
	const char *end = iso ? strptime(iso, "%Y-%m-%dT%H:%M:%S", &tm) : NULL;
	if (!end) {
		snprintf(buf, size, "%s", iso ? iso : "-");
		return;
	}
	long long d = (long long)timegm(&tm) - (long long)time(NULL);
	long long a = d < 0 ? -d : d;
	char v[32];
	if (a < 60)
		snprintf(v, sizeof(v), "%llds", a);
	else if (a < 3600)
		snprintf(v, sizeof(v), "%lldm%02llds", a / 60, a % 60);
	else if (a < 86400)
		snprintf(v, sizeof(v), "%lldh%02lldm", a / 3600, a / 60 % 60);
	else
		snprintf(v, sizeof(v), "%lldd%02lldh", a / 86400, a / 3600 % 24);
	snprintf(buf, size, d < 0 ? "%s ago" : "in %s", v);
}

char *cli_metadata_string(json_t *meta)
{
	char *s = NULL;
	size_t n = 0;
	FILE *f = open_memstream(&s, &n);
	const char *k, *sep = "";
	json_t *v;

	if (!f)
		return NULL;
	json_object_foreach(meta, k, v) {
		fprintf(f, "%s%s=%s", sep, k, json_string_value(v) ?: "");
		sep = ",";
	}
	fclose(f);
	return s;
}

int cli_exec_helper(const char *name, const char *env, char **argv)
{
	char path[PATH_MAX];
	if (helper_path(name, env, path, sizeof(path)) < 0) {
		log_error("%s not found (%s)", name, path);
		return 1;
	}
	argv[0] = (char *)name;
	execv(path, argv);
	log_error("exec %s: %m", path);
	return 1;
}
