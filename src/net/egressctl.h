/* The controller's side of cordon-egress: start it, and give it each sandbox's policy. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <jansson.h>

#include <cordon/err.h>

/* Where the Cordon egress CA lives when the controller does not say (cordon run): made there
 * by cordon-egress at first use, key 0600 in a 0700 directory. $CORDON_EGRESS_CA_DIR
 * overrides it. */
#define EGRESSCTL_CA_DIR "/var/lib/cordon/egress-ca"

struct egressctl {
	pid_t pid;
	int fd; /* JSON lines both ways (egress/ctl.c) */
	uint16_t tcp_port, dns_port;
};

/* Starts cordon-egress (beside our binary, or $CORDON_EGRESS) and waits for its ports. */
int egressctl_spawn(struct egressctl *ret, struct cordon_err *err);
/* The same, with TLS interception: the proxy loads (or makes) the CA in @ca_dir, given in
 * its environment (CORDON_EGRESS_CA_DIR), never in its argv. NULL: no interception. */
int egressctl_spawn_ca(struct egressctl *ret, const char *ca_dir, struct cordon_err *err);

/* One request line: {"op":"set","ip":..,"sandbox":..,"mode":..,"allow":[..],"ifname":..}.
 * With @ifname the proxy also points that interface at itself in nftables (and removes the
 * entries when it ends); NULL: the controller does (cordond). Malloc'd. */
char *egressctl_set_line(const char *ip, const char *sandbox_id, const char *mode,
			 const char *const *allow, size_t n, const char *ifname);
/* With the sandbox's secrets, [{"name","placeholder","value","hosts","in"}] (NULL: keep
 * them); the line holds their values: wipe it (explicit_bzero) before freeing it. */
char *egressctl_set_line_secrets(const char *ip, const char *sandbox_id, const char *mode,
				 const char *const *allow, size_t n, const char *ifname, json_t *secrets);
/* With @extra's keys in the line too (NULL: none): "approve" ([{"approve","methods","paths",
 * "timeout_s"}]; absent keeps them), "limits" ({"connections","connections_per_s",
 * "bytes_per_s"}; absent: the proxy's). */
char *egressctl_set_line_extra(const char *ip, const char *sandbox_id, const char *mode,
			       const char *const *allow, size_t n, const char *ifname, json_t *secrets,
			       json_t *extra);
char *egressctl_del_line(const char *ip);

/* The events the proxy sent and nobody read yet, each to @fn, until none comes for
 * @quiet_ms (cordon run, at the end). Returns how many. */
int egressctl_drain_events(struct egressctl *e, int quiet_ms, void (*fn)(json_t *ev, void *data), void *data);

/* Blocking: sends @line and waits (5 s at most) for its reply, skipping events. */
int egressctl_request(struct egressctl *e, const char *line, struct cordon_err *err);
