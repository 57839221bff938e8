/* The bundle's config.json (OCI runtime spec 1.0), written by Cordon for runsc.
 *
 * PID 1 is cordon-init, bound in read-only, in the mode the jail runs it: agent mode as root
 * with CAPS_INIT_AGENT and the sandbox root's set (cordon-init hands root's set to what it
 * starts as root, nothing to "user"); one-shot as the spec's user with the sandbox root's set
 * for root and none for "user". These are the Sentry's capabilities, over the Sentry's own
 * kernel objects; the host sees none of them. Always no_new_privs, the jail's rlimits.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/resource.h>
#include <jansson.h>

#include "basic/cleanup.h"
#include "lib/initproto.h"
#include "runtime/gvisor/gvisor.h"
#include "runtime/initargs.h"

static const char *const cap_names[] = {
    "CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER", "CAP_FSETID",
    "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP", "CAP_LINUX_IMMUTABLE",
    "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST", "CAP_NET_ADMIN", "CAP_NET_RAW",
    "CAP_IPC_LOCK", "CAP_IPC_OWNER", "CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT",
    "CAP_SYS_PTRACE", "CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
    "CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD", "CAP_LEASE",
    "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
};

static json_t *caps_json(uint64_t set)
{
	json_t *a = json_array();
	for (size_t i = 0; a && i < ELEMENTSOF(cap_names); i++)
		if (set & CAP_BIT(i))
			json_array_append_new(a, json_string(cap_names[i]));
	return a;
}

static json_t *capabilities(const struct cordon_spec *spec)
{
	bool root = spec->user == CORDON_USER_ROOT;
	uint64_t set = !spec->argv ? CAPS_INIT_AGENT | CAPS_SANDBOX_ROOT : root ? CAPS_SANDBOX_ROOT : 0;
	return json_pack("{s:o, s:o, s:o, s:o, s:o}", "bounding", caps_json(set), "effective",
			 caps_json(set), "permitted", caps_json(set), "inheritable", json_array(),
			 "ambient", json_array());
}

static json_t *rlimit(const char *type, uint64_t v)
{
	return json_pack("{s:s, s:I, s:I}", "type", type, "hard", (json_int_t)v, "soft", (json_int_t)v);
}

/* The jail's (child.c); no RLIMIT_FSIZE: the disk is the ceiling. */
static json_t *rlimits(const struct cordon_spec *spec)
{
	return json_pack("[o, o, o, o, o, o]", rlimit("RLIMIT_NOFILE", 1024),
			 rlimit("RLIMIT_NPROC", spec->pids), rlimit("RLIMIT_CORE", 0),
			 rlimit("RLIMIT_MEMLOCK", 64 << 10), rlimit("RLIMIT_MSGQUEUE", 800 << 10),
			 rlimit("RLIMIT_SIGPENDING", 4096));
}

static json_t *strv(char *const *v)
{
	json_t *a = json_array();
	for (; a && v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

static json_t *process(const struct cordon_spec *spec, const struct gvisor_bundle *b,
		       struct cordon_err *err)
{
	struct init_args ia = {};
	if (init_args_make(&ia, spec, GVISOR_AGENT_SOCKET, err) < 0) {
		init_args_free(&ia);
		return NULL;
	}
	ia.argv[0] = GVISOR_INIT_PATH;
	unsigned id = spec->argv && spec->user == CORDON_USER_USER ? 1000 : 0;
	json_t *p = json_pack("{s:b, s:{s:i, s:i}, s:o, s:o, s:s, s:o, s:o, s:b}", "terminal", 0,
			      "user", "uid", id, "gid", id, "args", strv(ia.argv), "env", strv(ia.envp),
			      "cwd", "/", "capabilities", capabilities(spec), "rlimits", rlimits(spec),
			      "noNewPrivileges", 1);
	init_args_free(&ia);
	json_t *env = p ? json_object_get(p, "env") : NULL;
	if (env)
		json_array_append_new(env, json_string("CORDON_INIT_PRELOAD=" GVISOR_STAT_PATH));
	return p;
}

static json_t *mount(const char *dst, const char *type, const char *src, json_t *opts)
{
	return json_pack("{s:s, s:s, s:s, s:o}", "destination", dst, "type", type, "source", src,
			 "options", opts ? opts : json_array());
}

static json_t *mounts(const struct gvisor_bundle *b)
{
	/* No /sys, as in the jail. cordon-init and the agent's socket live in /dev, the Sentry's
	 * own tmpfs: nothing is added to the image's top level. */
	json_t *m = json_pack("[o, o, o, o]",
			      mount("/proc", "proc", "proc", NULL),
			      mount("/dev", "tmpfs", "tmpfs", json_pack("[s, s]", "nosuid", "mode=755")),
			      mount("/dev/pts", "devpts", "devpts", NULL),
			      mount("/dev/shm", "tmpfs", "shm", json_pack("[s, s, s]", "nosuid", "nodev",
									  "mode=1777")));
	json_array_append_new(m, mount(GVISOR_INIT_PATH, "bind", b->init,
				       json_pack("[s, s]", "bind", "ro")));
	json_array_append_new(m, mount(GVISOR_STAT_PATH, "bind", b->stat,
				       json_pack("[s, s]", "bind", "ro")));
	if (b->sock[0])
		json_array_append_new(m, mount(GVISOR_AGENT_DIR, "bind", b->sock,
					       json_pack("[s, s]", "rbind", "rw")));
	for (size_t i = 0; m && i < b->n; i++)
		json_array_append_new(m, mount(b->m[i].dst, "bind", b->m[i].src,
					       json_pack("[s, s, s, s]", "rbind", b->m[i].rw ? "rw" : "ro",
							 "nosuid", "nodev")));
	return m;
}

static json_t *linux_part(const struct gvisor_bundle *b)
{
	json_t *net = json_pack("{s:s}", "type", "network");
	if (net && b->netns[0])
		json_object_set_new(net, "path", json_string(b->netns));
	return json_pack("{s:[{s:s}, {s:s}, {s:s}, {s:s}, o]}", "namespaces", "type", "pid", "type",
			 "ipc", "type", "uts", "type", "mount", net);
}

int gvisor_oci_write(const char *path, const struct cordon_spec *spec,
		     const struct gvisor_bundle *b, struct cordon_err *err)
{
	json_t *proc = process(spec, b, err);
	if (!proc)
		return err && err->code ? err->code : cordon_err_setf(err, -ENOMEM, "out of memory");
	json_t *c = json_pack("{s:s, s:o, s:{s:s, s:b}, s:s, s:o, s:o}", "ociVersion", "1.0.2",
			      "process", proc, "root", "path", b->root, "readonly", 0, "hostname",
			      spec->hostname ? spec->hostname : "cordon", "mounts", mounts(b), "linux",
			      linux_part(b));
	if (!c)
		return cordon_err_setf(err, -ENOMEM, "gvisor: config.json: out of memory");
	int r = json_dump_file(c, path, JSON_COMPACT);
	json_decref(c);
	return r < 0 ? cordon_err_setf(err, -EIO, "gvisor: write '%s'", path) : 0;
}
