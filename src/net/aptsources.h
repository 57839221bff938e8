/* The package mirrors of the host's apt sources: what a registry-only network lets through.
 * The template builder allows them on its own proxy for RUN steps; cordond offers them as the
 * built-in egress profile "build".
 *
 *     aptsources_scan(note, arg);              // each http(s) URI of every deb line
 *     aptsources_rule(uri, rule, sizeof(rule)) // "deb.debian.org:80"
 *
 * Read: /etc/apt/sources.list, sources.list.d/ *.list and *.sources (deb822 "URIs:"), or only
 * the file $CORDON_APT_SOURCES names (tests: another host's sources). */
#pragma once

#include <stddef.h>

/* Calls @fn for each URI of a "deb" line (one-line form: the first; deb822: every one). */
void aptsources_scan(void (*fn)(const char *uri, void *arg), void *arg);
/* "HOST:PORT" of an http:// or https:// @uri into @buf; -EINVAL for any other. */
int aptsources_rule(const char *uri, char *buf, size_t size);
