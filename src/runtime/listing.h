/* The registry as JSON, the one shape that cordond's GET /v1/runtimes answers and that
 * `cordon runtimes` prints when it probes this host itself:
 *
 *     {"runtimes": [{"name", "available", "reason"?, "capabilities": [...],
 *                    "mode"?: {"name", "reason"?}}, ...],   // strongest first
 *      "default": NAME,   // what a create that names no runtime gets
 *      "auto": NAME}      // what runtime "auto" picks here (absent: none can run) */
#pragma once

#include <jansson.h>

/* NULL when out of memory. @default_name: the caller's default runtime. */
json_t *runtime_list_json(const char *default_name);
