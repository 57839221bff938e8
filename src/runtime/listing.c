/* The registry as JSON (listing.h), probed on this host: every available() and mode() is the
 * runtime's own cached probe, under its own deadline. */
#include <cordon/cordon.h>

#include "runtime/listing.h"

static json_t *runtime_json(const struct cordon_runtime_info *info)
{
	json_t *caps = json_array();
	for (int b = 0; caps && b < _CORDON_RUNTIME_CAP_COUNT; b++)
		if (info->caps & (1u << b))
			json_array_append_new(caps, json_string(cordon_runtime_cap_name(1u << b)));
	json_t *o = json_pack("{s:s, s:b, s:s?, s:o*}", "name", info->name, "available",
			      info->available, "reason", info->available ? NULL : info->reason,
			      "capabilities", caps);
	if (o && info->mode[0])
		json_object_set_new(o, "mode", json_pack("{s:s, s:s?}", "name", info->mode, "reason",
							 info->mode_reason[0] ? info->mode_reason : NULL));
	return o;
}

json_t *runtime_list_json(const char *default_name)
{
	struct cordon_runtime_info info;
	const char *best = NULL;
	json_t *list = json_array();
	for (size_t i = 0; list && cordon_runtime_get(i, &info) == 0; i++)
		json_array_append_new(list, runtime_json(&info));
	cordon_runtime_resolve("auto", &best, NULL);
	return json_pack("{s:o*, s:s, s:s?}", "runtimes", list, "default", default_name, "auto",
			 best);
}
