/* The controller's side of cordon-egress: start it, and give it each sandbox's policy. */
#pragma once

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

struct egressctl {
	pid_t pid;
	int fd; /* JSON lines both ways (egress/ctl.c) */
	uint16_t tcp_port, dns_port;
};

/* Starts cordon-egress (beside our binary, or $CORDON_EGRESS) and waits for its ports. */
int egressctl_spawn(struct egressctl *ret, struct cordon_err *err);

/* One request line: {"op":"set","ip":..,"sandbox":..,"mode":..,"allow":[..],"ifname":..}.
 * With @ifname the proxy also points that interface at itself in nftables (and removes the
 * entries when it ends); NULL: the controller does (cordond). Malloc'd. */
char *egressctl_set_line(const char *ip, const char *sandbox_id, const char *mode,
			 const char *const *allow, size_t n, const char *ifname);
char *egressctl_del_line(const char *ip);

/* Blocking: sends @line and waits (5 s at most) for its reply, skipping events. */
int egressctl_request(struct egressctl *e, const char *line, struct cordon_err *err);
