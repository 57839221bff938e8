/* The runtimes this build knows, strongest first, and how a name becomes one of them:
 * a microVM (its own kernel) over gVisor (a user-space kernel) over the jail (the host's
 * kernel behind seccomp and Landlock). */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "basic/cleanup.h"
#include "runtime/runtime.h"

const struct runtime_ops *const runtime_registry[] = {&microvm_ops, &gvisor_ops, &jail_ops};
const size_t runtime_registry_len = ELEMENTSOF(runtime_registry);

/* "jail", "jail, gvisor" or "none": the runtimes of @list this host can run. */
static void list_available(const struct runtime_ops *const *list, size_t n, char *buf,
			   size_t size)
{
	size_t len = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n; i++)
		if (list[i]->available(NULL) == 0 && len < size)
			len += snprintf(buf + len, size - len, "%s%s", len ? ", " : "", list[i]->name);
	if (!len)
		snprintf(buf, size, "none");
}

static int refuse(const struct runtime_ops *const *list, size_t n, const char *name, int code,
		  const char *why, struct cordon_err *err)
{
	char avail[128];
	list_available(list, n, avail, sizeof(avail));
	return cordon_err_setf(err, code, "runtime '%s': %s; this host can run: %s", name, why, avail);
}

/* auto takes only a runtime that has both modes and a network, and that does not refuse
 * auto here (microvm under TCG: emulated, 10-100x slower, asked for by name): what a caller
 * of auto may ask for without naming a runtime. */
static const struct runtime_ops *strongest(const struct runtime_ops *const *list, size_t n)
{
	const uint32_t both = CORDON_RUNTIME_CAP_ONESHOT | CORDON_RUNTIME_CAP_AGENT |
			      CORDON_RUNTIME_CAP_EGRESS;
	const struct runtime_ops *best = NULL;
	for (size_t i = 0; i < n; i++)
		if ((!best || list[i]->strength > best->strength) && (list[i]->caps & both) == both &&
		    list[i]->available(NULL) == 0 && (!list[i]->auto_ok || list[i]->auto_ok()))
			best = list[i];
	return best;
}

int runtime_pick(const struct runtime_ops *const *list, size_t n, const char *name,
		 const struct runtime_ops **ret, struct cordon_err *err)
{
	if (!name || strcmp(name, "auto") == 0) {
		if (!(*ret = strongest(list, n)))
			return refuse(list, n, "auto", -EOPNOTSUPP, "no runtime can run here", err);
		return 0;
	}
	for (size_t i = 0; i < n; i++) {
		if (strcmp(list[i]->name, name) != 0)
			continue;
		struct cordon_err why = {};
		if (list[i]->available(&why) < 0)
			return refuse(list, n, name, -EOPNOTSUPP, why.msg[0] ? why.msg : "not available",
				      err);
		*ret = list[i];
		return 0;
	}
	return refuse(list, n, name, -ENOENT, "no such runtime", err);
}

int cordon_runtime_resolve(const char *name, const char **ret_name, struct cordon_err *err)
{
	const struct runtime_ops *ops;
	int r = runtime_pick(runtime_registry, runtime_registry_len, name, &ops, err);
	if (r < 0)
		return r;
	*ret_name = ops->name;
	return 0;
}

bool cordon_runtime_attaches_net(const char *name)
{
	for (size_t i = 0; name && i < runtime_registry_len; i++)
		if (strcmp(runtime_registry[i]->name, name) == 0)
			return runtime_registry[i]->attach_net != NULL;
	return false;
}

bool cordon_runtime_fixed_shape(const char *name)
{
	for (size_t i = 0; name && i < runtime_registry_len; i++)
		if (strcmp(runtime_registry[i]->name, name) == 0)
			return runtime_registry[i]->fixed_shape;
	return false;
}

int cordon_runtime_get(size_t i, struct cordon_runtime_info *ret)
{
	if (i >= runtime_registry_len)
		return -ENOENT;
	const struct runtime_ops *ops = runtime_registry[i];
	struct cordon_err why = {};
	*ret = (struct cordon_runtime_info){.name = ops->name, .caps = ops->caps};
	ret->available = ops->available(&why) == 0;
	if (!ret->available)
		snprintf(ret->reason, sizeof(ret->reason), "%.255s", why.msg[0] ? why.msg : "not available");
	else if (ops->mode)
		snprintf(ret->mode, sizeof(ret->mode), "%s",
			 ops->mode(ret->mode_reason, sizeof(ret->mode_reason)));
	return 0;
}

const char *cordon_runtime_cap_name(uint32_t cap)
{
	static const char *const names[_CORDON_RUNTIME_CAP_COUNT] = {
	    "oneshot", "agent", "egress", "limits", "stats", "overlay", "pause", "snapshot",
	};
	for (size_t i = 0; i < ELEMENTSOF(names); i++)
		if (cap == 1u << i)
			return names[i];
	return NULL;
}
