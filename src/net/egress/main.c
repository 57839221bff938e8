/* cordon-egress: the only way out of a sandbox's network namespace.
 *
 *   cordon-egress CONTROL_FD
 *
 * nftables redirects every TCP connection and every DNS packet from a sandbox's host end to
 * this process (net/nft.c). Here the sandbox is recognised by its source address, its policy
 * is applied, and each decision is reported to the controller (cordond or cordon run),
 * which writes it to the audit log:
 *
 * - TCP: a CIDR rule (or, in `public` mode, any address that is not always blocked) relays
 *   to the original destination at once. Otherwise the first bytes must name the
 *   destination (TLS SNI, HTTP Host); the name is checked against the policy, resolved here,
 *   every always-blocked address is dropped from the answer (DNS rebinding), and the proxy
 *   dials the *name*, not the address the sandbox asked for. Then bytes are relayed both
 *   ways with large buffers and no per-byte work; or, for a name the sandbox has a secret
 *   for, through the TLS-terminating relay (relay-tls.c, with the CA of tls.c).
 * - DNS (UDP and TCP): a query for a name the policy allows is forwarded to the host's
 *   resolver, its answer checked; any other gets REFUSED. No other resolver is reachable.
 *
 * The controller speaks JSON lines on CONTROL_FD (ctl.c). The process ends when CONTROL_FD
 * closes. egress.h maps the other files.
 */
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <jansson.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/secmem.h"
#include "lib/seccomp.h"
#include "policy/seccomp_filter.h"
#include "net/egress/egress.h"
#include "net/nft.h"

/* The resolver, the listeners, the control channel and the nftables table; 1 with a message
 * on failure. */
static int setup_listen(struct egress *e, int cfd)
{
	e->base = event_base_new();
	e->dns = e->base ? evdns_base_new(e->base, 0) : NULL;
	if (!e->dns || host_blocklist(&e->blocks) < 0 || host_read_upstream(&e->upstream, &e->upstream_len) < 0 ||
	    evdns_base_nameserver_sockaddr_add(e->dns, (struct sockaddr *)&e->upstream, e->upstream_len, 0) < 0) {
		fprintf(stderr, "cordon-egress: no resolver (check /etc/resolv.conf)\n");
		return 1;
	}
	if (!host_listen_tcp(e, conn_accept, &e->tcp_port) || dns_setup(e) < 0) {
		fprintf(stderr, "cordon-egress: cannot listen: %m\n");
		return 1;
	}
	if (ctl_setup(e, cfd) < 0) {
		fprintf(stderr, "cordon-egress: control channel: %m\n");
		return 1;
	}
	/* The table (the controller adds each sandbox's elements to it once we are ready), and
	 * a libnftables context made now, while files may still be opened. */
	struct cordon_err err = {};
	if (nft_setup(&err) < 0) {
		fprintf(stderr, "cordon-egress: %s\n", err.msg);
		return 1;
	}
	return 0;
}

/* The listeners' ports to the controller, straight to the socket (a bufferevent would send
 * them only once the loop runs). Said before the host's trust bundle is loaded, which is
 * half of the start: a sandbox that connects meanwhile waits in the listener's
 * backlog until the loop runs, after seccomp; a failure after it ends the process, which the
 * controller sees as the proxy's death. */
static int announce(struct egress *e, int cfd)
{
	char ready[96];
	int n = snprintf(ready, sizeof(ready), "{\"op\":\"ready\",\"tcp_port\":%u,\"dns_port\":%u}\n",
			 e->tcp_port, e->dns_port);
	if (write_all(cfd, ready, (size_t)n) < 0) {
		fprintf(stderr, "cordon-egress: control channel: %m\n");
		return 1;
	}
	return 0;
}

/* The CA (before the ready line: the controller reads its certificate then), and the
 * contexts with the host's trust bundle (after it): files, before seccomp. */
static int setup_ca(struct egress *e)
{
	if (tls_setup(e) < 0) {
		fprintf(stderr, "cordon-egress: no CA: cannot intercept TLS\n");
		return 1;
	}
	return 0;
}

/* The bundle's load is 15-30 ms of one CPU, while cordond fills its pool (bench/RESULTS.md,
 * goal 6): it runs on a thread of its own at nice 10, so that the builds beside it go first.
 * A thread's nice is its own and ends with it, and raising it needs no privilege: the relay,
 * on the main thread, keeps its priority (lowering a nice again would need CAP_SYS_NICE,
 * which root in a container may not have). */
struct contexts_job {
	struct egress *e;
	int r;
};

static void *contexts_load(void *arg)
{
	struct contexts_job *j = arg;
	(void)setpriority(PRIO_PROCESS, (id_t)gettid(), 10);
	j->r = tls_contexts(j->e);
	return NULL;
}

static int setup_contexts(struct egress *e)
{
	struct contexts_job j = {e, -1};
	pthread_t t;
	if (pthread_create(&t, NULL, contexts_load, &j) == 0)
		pthread_join(t, NULL);
	else
		j.r = tls_contexts(e);
	if (j.r < 0) {
		fprintf(stderr, "cordon-egress: no TLS contexts: cannot intercept TLS\n");
		return 1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: cordon-egress CONTROL_FD (started by cordond or cordon run)\n");
		return 2;
	}
	int cfd = atoi(argv[1]);
	prctl(PR_SET_PDEATHSIG, SIGKILL);
	/* Secrets' values live here: no core dump, no ptrace by others of our uid. */
	prctl(PR_SET_DUMPABLE, 0);
	json_set_alloc_funcs(malloc, secmem_free_wiped); /* a control line carries values */
	json_object_seed(0); /* jansson reads /dev/urandom once: before seccomp forbids files */
	signal(SIGPIPE, SIG_IGN);
	_cleanup_free_ struct egress *e = calloc(1, sizeof(*e));
	if (!e)
		return 1;
	e->limits = (struct egress_limits){.max_conns = 256, .conns_per_sec = 200, .bytes_per_sec = 16u << 20};
	if (host_read_limits(&e->limits) < 0)
		return 2;
	int r = setup_listen(e, cfd);
	if (r || (r = setup_ca(e)) || (r = announce(e, cfd)) || (r = setup_contexts(e)))
		return r;
	/* From here on, only what relaying needs (policy/egress.policy). */
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0 || seccomp_apply(cordon_seccomp_egress.filter, cordon_seccomp_egress.len) < 0) {
		fprintf(stderr, "cordon-egress: seccomp: %m\n");
		return 1;
	}
	event_base_dispatch(e->base);
	return 0;
}
