/* The host's nftables rules for sandbox networks (libnftables, never the nft command).
 *
 * One static table, "inet cordon": every TCP connection and every DNS packet from a sandbox's
 * host end (cdn*) is redirected to the egress proxy of the instance that owns the sandbox,
 * looked up by interface in two maps; nothing else from a sandbox is accepted or forwarded,
 * IPv4 or IPv6. A sandbox without a map entry reaches nothing: fail closed. */
#pragma once

#include <stdint.h>

#include <cordon/err.h>

int nft_setup(struct cordon_err *err);
int nft_sandbox_add(const char *ifname, uint16_t tcp_port, uint16_t dns_port, struct cordon_err *err);
void nft_sandbox_del(const char *ifname);
