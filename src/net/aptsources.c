/* The host's apt sources (aptsources.h). */
#include <errno.h>
#include <glob.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "basic/cleanup.h"
#include "net/aptsources.h"

int aptsources_rule(const char *uri, char *buf, size_t size)
{
	char host[200];
	const char *p = strstr(uri, "://");
	if (!p || strncmp(uri, "http", 4) != 0)
		return -EINVAL;
	int port = strncmp(uri, "https", 5) == 0 ? 443 : 80;
	p += 3;
	size_t n = strcspn(p, "/:");
	if (n == 0 || n >= sizeof(host))
		return -EINVAL;
	memcpy(host, p, n);
	host[n] = '\0';
	if (p[n] == ':')
		port = atoi(p + n + 1);
	snprintf(buf, size, "%s:%d", host, port);
	return 0;
}

/* One-line ("deb [opts] URI suite ...") and deb822 ("URIs: a b") sources alike. */
static void scan_file(const char *path, void (*fn)(const char *uri, void *arg), void *arg)
{
	_cleanup_fclose_ FILE *f = fopen(path, "re");
	char line[1024];
	while (f && fgets(line, sizeof(line), f)) {
		char *save = NULL, *w = strtok_r(line, " \t\r\n", &save);
		if (!w || w[0] == '#')
			continue;
		bool deb822 = strcasecmp(w, "URIs:") == 0;
		if (!deb822 && strcmp(w, "deb") != 0)
			continue;
		while ((w = strtok_r(NULL, " \t\r\n", &save))) {
			if (w[0] == '[') {
				while (w && !strchr(w, ']'))
					w = strtok_r(NULL, " \t\r\n", &save);
				continue;
			}
			fn(w, arg);
			if (!deb822)
				break;
		}
	}
}

static void scan_glob(const char *pattern, void (*fn)(const char *uri, void *arg), void *arg)
{
	glob_t g = {0};
	if (glob(pattern, 0, NULL, &g) == 0)
		for (size_t i = 0; i < g.gl_pathc; i++)
			scan_file(g.gl_pathv[i], fn, arg);
	globfree(&g);
}

void aptsources_scan(void (*fn)(const char *uri, void *arg), void *arg)
{
	const char *env = getenv("CORDON_APT_SOURCES");
	if (env) {
		scan_file(env, fn, arg);
		return;
	}
	scan_file("/etc/apt/sources.list", fn, arg);
	scan_glob("/etc/apt/sources.list.d/*.list", fn, arg);
	scan_glob("/etc/apt/sources.list.d/*.sources", fn, arg);
}
