#include <errno.h>
#include <net/if.h>
#include <net/route.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <libmnl/libmnl.h>
#include <linux/if_link.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>

#include "basic/cleanup.h"
#include "lib/link.h"

void link_addrs_for_slot(unsigned slot, struct link_addrs *ret)
{
	uint32_t net = LINK_POOL_BASE + slot * 4;
	ret->host.s_addr = htonl(net + 1);
	ret->sandbox.s_addr = htonl(net + 2);
	snprintf(ret->host_ifname, sizeof(ret->host_ifname), "cdn%u", slot);
}

/* Sends one request and waits for its ACK. */
static int nl_talk(struct mnl_socket *nl, struct nlmsghdr *nlh)
{
	char buf[8192];
	unsigned seq = nlh->nlmsg_seq = (unsigned)time(NULL) ^ (unsigned)getpid();
	nlh->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	if (mnl_socket_sendto(nl, nlh, nlh->nlmsg_len) < 0)
		return -errno;
	ssize_t n = mnl_socket_recvfrom(nl, buf, sizeof(buf));
	if (n < 0)
		return -errno;
	int r = mnl_cb_run(buf, n, seq, mnl_socket_get_portid(nl), NULL, NULL);
	return r < 0 ? -errno : 0;
}

static struct mnl_socket *nl_open(void)
{
	struct mnl_socket *nl = mnl_socket_open2(NETLINK_ROUTE, SOCK_CLOEXEC);
	if (nl && mnl_socket_bind(nl, 0, MNL_SOCKET_AUTOPID) < 0) {
		mnl_socket_close(nl);
		return NULL;
	}
	return nl;
}

/* RTM_NEWLINK that creates @name of @kind, its IFLA_LINKINFO nest left open in *@ret. */
static struct nlmsghdr *newlink_start(char *buf, const char *name, const char *kind,
				      struct nlattr **ret)
{
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RTM_NEWLINK;
	nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	ifm->ifi_family = AF_UNSPEC;
	mnl_attr_put_strz(nlh, IFLA_IFNAME, name);
	*ret = mnl_attr_nest_start(nlh, IFLA_LINKINFO);
	mnl_attr_put_strz(nlh, IFLA_INFO_KIND, kind);
	return nlh;
}

static int veth_new(struct mnl_socket *nl, pid_t pid, const char *name)
{
	char buf[1024];
	struct nlattr *linkinfo;
	struct nlmsghdr *nlh = newlink_start(buf, name, "veth", &linkinfo);
	struct nlattr *data = mnl_attr_nest_start(nlh, IFLA_INFO_DATA);
	struct nlattr *peer = mnl_attr_nest_start(nlh, VETH_INFO_PEER);
	struct ifinfomsg *pifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*pifm));
	memset(pifm, 0, sizeof(*pifm));
	mnl_attr_put_strz(nlh, IFLA_IFNAME, "eth0");
	mnl_attr_put_u32(nlh, IFLA_NET_NS_PID, (uint32_t)pid);
	mnl_attr_nest_end(nlh, peer);
	mnl_attr_nest_end(nlh, data);
	mnl_attr_nest_end(nlh, linkinfo);
	return nl_talk(nl, nlh);
}

static int host_end_up(struct mnl_socket *nl, unsigned ifindex, struct in_addr addr)
{
	char buf[512];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RTM_NEWADDR;
	nlh->nlmsg_flags = NLM_F_CREATE | NLM_F_REPLACE;
	struct ifaddrmsg *ifa = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifa));
	*ifa = (struct ifaddrmsg){.ifa_family = AF_INET, .ifa_prefixlen = 30, .ifa_index = ifindex};
	mnl_attr_put(nlh, IFA_LOCAL, sizeof(addr), &addr);
	mnl_attr_put(nlh, IFA_ADDRESS, sizeof(addr), &addr);
	int r = nl_talk(nl, nlh);
	if (r < 0)
		return r;
	nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RTM_NEWLINK;
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	*ifm = (struct ifinfomsg){.ifi_family = AF_UNSPEC, .ifi_index = (int)ifindex,
				  .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
	return nl_talk(nl, nlh);
}

int link_create(pid_t pid, const struct link_addrs *a, struct cordon_err *err)
{
	struct mnl_socket *nl = nl_open();
	if (!nl)
		return cordon_err_set(err, -errno, "network: netlink");
	link_delete(a->host_ifname); /* a leftover of a dead sandbox of this slot */
	int r = veth_new(nl, pid, a->host_ifname);
	if (r < 0) {
		mnl_socket_close(nl);
		return cordon_err_set(err, r, "network: create veth %s", a->host_ifname);
	}
	unsigned idx = if_nametoindex(a->host_ifname);
	r = idx ? host_end_up(nl, idx, a->host) : -ENODEV;
	mnl_socket_close(nl);
	if (r < 0) {
		link_delete(a->host_ifname);
		return cordon_err_set(err, r, "network: set up %s", a->host_ifname);
	}
	return 0;
}

int link_delete(const char *ifname)
{
	unsigned idx = if_nametoindex(ifname);
	if (!idx)
		return -ENODEV;
	struct mnl_socket *nl = nl_open();
	if (!nl)
		return -errno;
	char buf[256];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RTM_DELLINK;
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	*ifm = (struct ifinfomsg){.ifi_family = AF_UNSPEC, .ifi_index = (int)idx};
	int r = nl_talk(nl, nlh);
	mnl_socket_close(nl);
	return r;
}

static void set_sin(struct sockaddr *sa, struct in_addr a)
{
	struct sockaddr_in *sin = (struct sockaddr_in *)sa;
	memset(sin, 0, sizeof(*sin));
	sin->sin_family = AF_INET;
	sin->sin_addr = a;
}

int link_configure_inside(const struct link_addrs *a, struct cordon_err *err)
{
	_cleanup_close_ int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr = {0};
	if (fd < 0)
		return cordon_err_set(err, -errno, "network: socket");
	snprintf(ifr.ifr_name, sizeof(ifr.ifr_name), "eth0");
	set_sin(&ifr.ifr_addr, a->sandbox);
	if (ioctl(fd, SIOCSIFADDR, &ifr) < 0)
		return cordon_err_set(err, -errno, "network: eth0 address");
	set_sin(&ifr.ifr_netmask, (struct in_addr){htonl(0xfffffffc)});
	if (ioctl(fd, SIOCSIFNETMASK, &ifr) < 0)
		return cordon_err_set(err, -errno, "network: eth0 netmask");
	if (ioctl(fd, SIOCGIFFLAGS, &ifr) < 0)
		return cordon_err_set(err, -errno, "network: eth0 flags");
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(fd, SIOCSIFFLAGS, &ifr) < 0)
		return cordon_err_set(err, -errno, "network: eth0 up");
	struct rtentry rt = {0};
	set_sin(&rt.rt_dst, (struct in_addr){0});
	set_sin(&rt.rt_genmask, (struct in_addr){0});
	set_sin(&rt.rt_gateway, a->host);
	rt.rt_flags = RTF_UP | RTF_GATEWAY;
	rt.rt_dev = (char *)"eth0";
	if (ioctl(fd, SIOCADDRT, &rt) < 0)
		return cordon_err_set(err, -errno, "network: default route");
	return 0;
}

/* RTM_NEWLINK for the existing @ifindex: its master (0: none) and up. */
static int link_up_in(struct mnl_socket *nl, unsigned ifindex, unsigned master)
{
	char buf[256];
	struct nlmsghdr *nlh = mnl_nlmsg_put_header(buf);
	nlh->nlmsg_type = RTM_NEWLINK;
	struct ifinfomsg *ifm = mnl_nlmsg_put_extra_header(nlh, sizeof(*ifm));
	*ifm = (struct ifinfomsg){.ifi_family = AF_UNSPEC, .ifi_index = (int)ifindex,
				  .ifi_flags = IFF_UP, .ifi_change = IFF_UP};
	if (master)
		mnl_attr_put_u32(nlh, IFLA_MASTER, master);
	return nl_talk(nl, nlh);
}

static int bridge_new(struct mnl_socket *nl, const char *name)
{
	char buf[256];
	struct nlattr *linkinfo;
	struct nlmsghdr *nlh = newlink_start(buf, name, "bridge", &linkinfo);
	mnl_attr_nest_end(nlh, linkinfo);
	return nl_talk(nl, nlh);
}

int link_bridge(const char *bridge, const char *const ports[], size_t n, struct cordon_err *err)
{
	struct mnl_socket *nl = nl_open();
	if (!nl)
		return cordon_err_set(err, -errno, "network: netlink");
	int r = bridge_new(nl, bridge);
	unsigned br = r == 0 ? if_nametoindex(bridge) : 0;
	if (r == 0 && !br)
		r = -ENODEV;
	if (r == 0)
		r = link_up_in(nl, br, 0);
	for (size_t i = 0; r == 0 && i < n; i++) {
		unsigned idx = if_nametoindex(ports[i]);
		r = idx ? link_up_in(nl, idx, br) : -ENODEV;
	}
	mnl_socket_close(nl);
	return r < 0 ? cordon_err_set(err, r, "network: bridge %s", bridge) : 0;
}
