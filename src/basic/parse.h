/* The parsers of the words users type for sizes and durations, and of environment names:
 * one vocabulary for the CLI, cordond's settings, the API and the template builder. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Sizes: "512" (a bare number is MiB), "512M", "1G", "2T", "64K", "4096b" (bytes); suffixes
 * are binary (K = 1024) and case-blind, KB and KiB alike. Durations: "300s", "5m", "1500ms",
 * "2" (seconds). -EINVAL for anything else, -ERANGE past UINT64_MAX bytes. */
int cordon_parse_size(const char *s, uint64_t *ret);
int cordon_parse_duration_ms(const char *s, uint64_t *ret);

/* An environment variable's name: [A-Za-z_][A-Za-z0-9_]*, @len bytes of @s. */
bool env_name_valid(const char *s, size_t len);
