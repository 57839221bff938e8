/* What the host gives the proxy, read once at start, before seccomp: the limits, the
 * host's own addresses, the upstream resolver, and the listening sockets. */
#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <stdio.h>
#include <stdlib.h>

#include "basic/cleanup.h"
#include "net/egress/egress.h"

#define ACCEPT_PAUSE_MS 100

int host_read_limits(struct egress_limits *ret)
{
	const char *v = getenv("CORDON_EGRESS_LIMITS");
	unsigned a, b, c;
	char end;
	if (!v || !*v)
		return 0;
	if (sscanf(v, "%u,%u,%u%c", &a, &b, &c, &end) != 3 || !a || !b || c < 1024) {
		fprintf(stderr, "cordon-egress: CORDON_EGRESS_LIMITS '%s': expected CONNS,PER_SEC,BYTES_PER_SEC\n", v);
		return -EINVAL;
	}
	*ret = (struct egress_limits){.max_conns = a, .conns_per_sec = b, .bytes_per_sec = c};
	return 0;
}

static void blocklist_add_sockaddr(struct egress_blocklist *bl, const struct sockaddr *sa)
{
	if (sa->sa_family == AF_INET)
		egress_blocklist_add(bl, AF_INET, (uint8_t *)&((struct sockaddr_in *)sa)->sin_addr, 32);
	else if (sa->sa_family == AF_INET6)
		egress_blocklist_add(bl, AF_INET6, (uint8_t *)&((struct sockaddr_in6 *)sa)->sin6_addr, 128);
}

/* Every address of the host itself is always blocked, not only loopback: a name that
 * resolves to one must not reach the host's own services. */
int host_blocklist(struct egress_blocklist *ret)
{
	struct ifaddrs *ifa0;
	egress_blocklist_init(ret);
	if (getifaddrs(&ifa0) < 0)
		return -errno;
	for (struct ifaddrs *ifa = ifa0; ifa; ifa = ifa->ifa_next)
		if (ifa->ifa_addr)
			blocklist_add_sockaddr(ret, ifa->ifa_addr);
	freeifaddrs(ifa0);
	return 0;
}

/* A "nameserver" line's address, port 53, into @ret; false when it is not one. */
static bool parse_nameserver(const char *line, struct sockaddr_storage *ret, socklen_t *ret_len)
{
	char addr[128];
	struct sockaddr_in *sin = (struct sockaddr_in *)ret;
	struct sockaddr_in6 *sin6 = (struct sockaddr_in6 *)ret;
	if (sscanf(line, "nameserver %127s", addr) != 1)
		return false;
	if (inet_pton(AF_INET, addr, &sin->sin_addr) == 1) {
		sin->sin_family = AF_INET;
		sin->sin_port = htons(53);
		*ret_len = sizeof(*sin);
		return true;
	}
	if (inet_pton(AF_INET6, addr, &sin6->sin6_addr) == 1) {
		sin6->sin6_family = AF_INET6;
		sin6->sin6_port = htons(53);
		*ret_len = sizeof(*sin6);
		return true;
	}
	return false;
}

/* The first nameserver of resolv.conf. */
int host_read_upstream(struct sockaddr_storage *ret, socklen_t *ret_len)
{
	/* $CORDON_RESOLV_CONF lets tests (and unusual hosts) name the upstream resolver. */
	const char *path = secure_getenv("CORDON_RESOLV_CONF");
	_cleanup_fclose_ FILE *f = fopen(path && *path == '/' ? path : "/etc/resolv.conf", "re");
	char line[256];
	while (f && fgets(line, sizeof(line), f))
		if (parse_nameserver(line, ret, ret_len))
			return 0;
	return -ENOENT;
}

static void on_accept_resume(evutil_socket_t fd, short what, void *arg)
{
	evconnlistener_enable(arg);
}

/* accept() that fails for want of descriptors or memory (EMFILE, ENFILE, ENOBUFS) leaves
 * the connection queued and the listener readable: libevent would call it again at once,
 * for as long as the shortage lasts, at full CPU. Pause it instead; what is queued waits in
 * the backlog. */
static void on_accept_error(struct evconnlistener *l, void *arg)
{
	struct egress *e = arg;
	struct timeval tv = {0, ACCEPT_PAUSE_MS * 1000};
	evconnlistener_disable(l);
	if (event_base_once(e->base, -1, EV_TIMEOUT, on_accept_resume, l, &tv) < 0)
		evconnlistener_enable(l);
}

/* A listener on an ephemeral port of every address; nftables redirects to it. */
struct evconnlistener *host_listen_tcp(struct egress *e, evconnlistener_cb cb, uint16_t *ret_port)
{
	struct sockaddr_in sa = {.sin_family = AF_INET};
	struct evconnlistener *l = evconnlistener_new_bind(
		e->base, cb, e, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
		1024, (struct sockaddr *)&sa, sizeof(sa));
	if (!l)
		return NULL;
	evconnlistener_set_error_cb(l, on_accept_error);
	socklen_t len = sizeof(sa);
	getsockname(evconnlistener_get_fd(l), (struct sockaddr *)&sa, &len);
	*ret_port = ntohs(sa.sin_port);
	return l;
}
