/* What api.c shares with the other parsers of the spec layer (secrets.c); not for callers. */
#pragma once

#include <stddef.h>

#include <jansson.h>

#include <cordon/err.h>

/* The body as a JSON object, checked as every body is (size, depth, duplicates). */
int api_body_load(const char *body, size_t len, json_t **ret, struct cordon_err *err);
/* "secrets" of a create (secrets.c): @v into the struct api_secrets at @dst. */
int api_secrets_from_json(json_t *v, void *dst, const char *path, struct cordon_err *err);
