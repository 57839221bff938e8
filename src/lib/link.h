/* A networked sandbox's link to the host: a veth pair whose host end is "cdn<slot>" and whose
 * sandbox end is "eth0" inside the sandbox's network namespace, with the /30 of the slot:
 * 10.201.0.0 + 4 * slot, the host end .1, the sandbox end .2 (no allocation: the uid slot
 * decides). The host end's traffic goes nowhere but the egress proxy (nft.c). */
#pragma once

#include <netinet/in.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <cordon/err.h>

#define LINK_POOL_BASE   0x0ac90000u /* 10.201.0.0 */
#define LINK_POOL_PREFIX 19          /* 2048 slots of /30 */

struct link_addrs {
	struct in_addr host, sandbox;
	char host_ifname[16];
};

void link_addrs_for_slot(unsigned slot, struct link_addrs *ret);

/* Creates the veth pair with its peer in @pid's network namespace, and sets the host end up
 * with its address. The pair goes away with the sandbox's network namespace. */
int link_create(pid_t pid, const struct link_addrs *a, struct cordon_err *err);

/* Removes a host end left by a dead sandbox (sweep); -ENODEV if there is none. */
int link_delete(const char *ifname);

/* In the sandbox (its own namespace, CAP_NET_ADMIN): eth0 up with @a->sandbox/30 and a
 * default route through @a->host. ioctl only: async-signal-safe. */
int link_configure_inside(const struct link_addrs *a, struct cordon_err *err);

/* In the current network namespace: a bridge @bridge up, with @ports (existing interfaces)
 * its ports, up. The microVM's tap and eth0 (the veth's far end) so: the guest owns the
 * sandbox's address, the host's side of the link is the jail's. */
int link_bridge(const char *bridge, const char *const ports[], size_t n, struct cordon_err *err);
