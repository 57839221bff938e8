#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <nftables/libnftables.h>

#include "net/nft.h"

static const char ruleset[] =
	"add table inet cordon\n"
	"add map inet cordon tcp_proxy { type ifname : inet_service; }\n"
	"add map inet cordon dns_proxy { type ifname : inet_service; }\n"
	"add chain inet cordon prerouting { type nat hook prerouting priority dstnat; policy accept; }\n"
	"add chain inet cordon input { type filter hook input priority filter; policy accept; }\n"
	"add chain inet cordon forward { type filter hook forward priority filter; policy accept; }\n"
	"flush chain inet cordon prerouting\n"
	"flush chain inet cordon input\n"
	"flush chain inet cordon forward\n"
	"add rule inet cordon prerouting iifname \"cdn*\" meta nfproto ipv4 udp dport 53 redirect to :iifname map @dns_proxy\n"
	"add rule inet cordon prerouting iifname \"cdn*\" meta nfproto ipv4 tcp dport 53 redirect to :iifname map @dns_proxy\n"
	"add rule inet cordon prerouting iifname \"cdn*\" meta nfproto ipv4 meta l4proto tcp redirect to :iifname map @tcp_proxy\n"
	/* Only what the redirect rewrote reaches the host; nothing from a sandbox is routed. */
	"add rule inet cordon input iifname \"cdn*\" ct status dnat accept\n"
	"add rule inet cordon input iifname \"cdn*\" drop\n"
	"add rule inet cordon forward iifname \"cdn*\" drop\n"
	"add rule inet cordon forward oifname \"cdn*\" drop\n";

/* A context costs about 6 ms to make and 0.07 ms to use: one per thread, kept. */
static __thread struct nft_ctx *ctx;

static int run(const char *cmd, struct cordon_err *err)
{
	if (!ctx) {
		ctx = nft_ctx_new(NFT_CTX_DEFAULT);
		if (!ctx)
			return cordon_err_setf(err, -ENOMEM, "nftables: no context");
		nft_ctx_buffer_output(ctx);
		nft_ctx_buffer_error(ctx);
	}
	int r = nft_run_cmd_from_buffer(ctx, cmd);
	if (r != 0) {
		const char *e = nft_ctx_get_error_buffer(ctx);
		cordon_err_setf(err, -EIO, "nftables: %.*s", e ? (int)strcspn(e, "\n") : 0, e ? e : "");
	}
	return r != 0 ? -EIO : 0;
}

int nft_setup(struct cordon_err *err)
{
	return run(ruleset, err);
}

static int valid_ifname(const char *s)
{
	return strlen(s) < 16 && strspn(s, "cdn0123456789") == strlen(s);
}

int nft_sandbox_add(const char *ifname, uint16_t tcp_port, uint16_t dns_port, struct cordon_err *err)
{
	char cmd[512];
	if (!valid_ifname(ifname))
		return cordon_err_setf(err, -EINVAL, "nftables: bad interface name");
	nft_sandbox_del(ifname);
	snprintf(cmd, sizeof(cmd),
		 "add element inet cordon tcp_proxy { \"%s\" : %u }\n"
		 "add element inet cordon dns_proxy { \"%s\" : %u }\n",
		 ifname, tcp_port, ifname, dns_port);
	return run(cmd, err);
}

void nft_sandbox_del(const char *ifname)
{
	char cmd[256];
	if (!valid_ifname(ifname))
		return;
	snprintf(cmd, sizeof(cmd), "delete element inet cordon tcp_proxy { \"%s\" }\n", ifname);
	run(cmd, NULL);
	snprintf(cmd, sizeof(cmd), "delete element inet cordon dns_proxy { \"%s\" }\n", ifname);
	run(cmd, NULL);
}
