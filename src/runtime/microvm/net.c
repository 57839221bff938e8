/* The host end of the guest's virtio-net: a tap that QEMU gets as an fd (`-netdev tap,fd=`,
 * userspace virtio-net, no vhost), opened here in the sandbox's own network namespace. For
 * an egress sandbox that namespace is the jail's: the slot's veth (runtime_host_link(): the
 * controller's redirect to cordon-egress and its DNS filter first), whose far end eth0 is a
 * port of the bridge br0 with the tap, so the guest owns the sandbox's address and every
 * byte leaves through the veth. Without a network the tap is alone in an empty namespace:
 * the device is always there (a memory snapshot restores into the same device list), its
 * packets go nowhere. The tap is not persistent: it goes with its last fd, and the
 * namespace with it and the fd we keep. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/if_tun.h>

#include "basic/cleanup.h"
#include "basic/fdwatch.h"
#include "lib/link.h"
#include "runtime/microvm/microvm.h"

static int tap_open(struct cordon_err *err)
{
	int fd = open("/dev/net/tun", O_RDWR | O_CLOEXEC);
	struct ifreq ifr = {.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR};
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "tap0");
	if (fd < 0 || ioctl(fd, TUNSETIFF, &ifr) < 0) {
		int r = cordon_err_set(err, -errno, "microvm: open a tap");
		fd_close(fd);
		return r;
	}
	return fd;
}

/* On this thread, in @ns (-1: a new empty namespace, kept in *@ns): the tap, bridged with
 * eth0 when @linked. Back in our own namespace after, whatever happened. */
static int tap_in(int *ns, bool linked, struct cordon_err *err)
{
	static const char *const ports[] = {"tap0", "eth0"};
	_cleanup_close_ int self = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (self < 0)
		return cordon_err_set(err, -errno, "microvm: our network namespace");
	if (*ns >= 0 ? setns(*ns, CLONE_NEWNET) < 0 : unshare(CLONE_NEWNET) < 0)
		return cordon_err_set(err, -errno, "microvm: enter the sandbox's network namespace");
	if (*ns < 0)
		*ns = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	int tap = *ns < 0 ? cordon_err_set(err, -errno, "microvm: its network namespace") : tap_open(err);
	int r = tap < 0 ? tap : link_bridge("br0", ports, linked ? 2 : 1, err);
	if (setns(self, CLONE_NEWNET) < 0)
		abort(); /* a host thread left in a sandbox's network: never go on */
	if (r < 0)
		fd_close(tap);
	return r < 0 ? r : tap;
}

/* The slot's veth with its far end in a new namespace, which *@ns then holds. */
static int linked_ns(struct runtime_host *h, const struct cordon_spec *spec, int *ns,
		     struct cordon_err *err)
{
	char c, path[64];
	int ready = -1;
	pid_t pid = runtime_host_netns_holder(&ready);
	if (pid < 0)
		return cordon_err_set(err, -errno, "microvm: fork the network namespace's holder");
	int r = read(ready, &c, 1) == 1 ? 0 : cordon_err_setf(err, -EIO, "microvm: unshare network");
	close(ready);
	snprintf(path, sizeof(path), "/proc/%d/ns/net", (int)pid);
	if (r == 0 && (*ns = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		r = cordon_err_set(err, -errno, "microvm: '%s'", path);
	if (r == 0)
		r = runtime_host_link(h, pid, spec->net_hook, spec->net_hook_data, err);
	kill(pid, SIGKILL);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
	return r;
}

int microvm_net_open(struct runtime_host *h, const struct cordon_spec *spec, int *ret_ns,
		     struct cordon_err *err)
{
	bool egress = spec->net == CORDON_NET_EGRESS;
	*ret_ns = -1;
	int r = egress ? linked_ns(h, spec, ret_ns, err) : 0;
	if (r == 0)
		r = tap_in(ret_ns, egress, err);
	if (r < 0)
		fd_close(TAKE_FD(*ret_ns));
	return r;
}

void microvm_identity_fresh(struct vm_control *c)
{
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	c->time_ns = (uint64_t)now.tv_sec * 1000000000u + (uint64_t)now.tv_nsec;
	_cleanup_close_ int fd = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
	c->magic = VM_CONTROL_MAGIC;
	if (fd < 0 || read(fd, c->seed, sizeof(c->seed)) != (ssize_t)sizeof(c->seed))
		c->magic = 0; /* never a guest without fresh entropy: its stage refuses it */
}

void microvm_identity(const struct runtime_host *h, const struct cordon_spec *spec,
		      struct vm_control *ret)
{
	unsigned slot = h->slot.slot;
	*ret = (struct vm_control){.magic = VM_CONTROL_MAGIC,
				   .net = spec->net == CORDON_NET_EGRESS,
				   .mac = {0x52, 0x54, 0x00, 0xcd, (uint8_t)(slot >> 8), (uint8_t)slot},
				   .prefix = 30,
				   .ip = h->link.sandbox.s_addr,
				   .gw = h->link.host.s_addr};
	snprintf(ret->hostname, sizeof(ret->hostname), "%s", spec->hostname ? spec->hostname : "cordon");
	microvm_identity_fresh(ret);
}
