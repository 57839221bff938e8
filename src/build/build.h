/* `cordon template build`: a recipe (image/recipe.h) made into a template, one cached layer
 * per step.
 *
 * Each step's layer is keyed by sha256(parent key, the step as expanded, the environment it
 * runs with, and for COPY the bytes, names and modes it copies); a layer that exists is
 * reused. FROM gives the base: scratch, another template's tree, an OCI archive, or a
 * Debian suite (debootstrap: the first stage on the host downloads and unpacks Debian's
 * signed packages, the second stage runs in a jail). RUN runs in a jail whose root is an
 * overlay of the layers so far (idmapped, so root-owned files are its root's) over an
 * upper directory on a tmpfs of the build's disk size, with a network that reaches only the
 * host's apt sources. COPY writes through an overlay of the same layers. What a step wrote
 * is captured into the store with canonical owners; at the end the layers are flattened by
 * hard links into the template's rootfs (store.h), with ENV, WORKDIR, USER, START and READY
 * in its template.json.
 *
 * Progress is reported as JSON events through @emit (each borrowed for the call):
 *   {"event":"step","step":N,"of":M,"line":L,"instruction":"RUN ..."}
 *   {"event":"log","step":N,"data":"..."}                 output of the step, as it comes
 *   {"event":"step_done","step":N,"cached":bool,"seconds":S,"bytes":B}
 *   {"event":"done","name":..,"key":..,"seconds":S,"up_to_date":bool}
 * Errors are returned (with @err naming the step and line), not emitted.
 */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include <cordon/err.h>

typedef void (*build_emit_fn)(void *data, json_t *event);

struct build_opts {
	const char *name;        /* the template to make (replaced when it exists) */
	const char *recipe;      /* path of the recipe file */
	const char *context;     /* directory COPY reads from; NULL: the recipe's directory */
	const char *source;      /* template.json "source"; NULL: "build:<recipe>" */
	const char *context_tar; /* a tar (maybe gzipped) unpacked to be the context instead */
	const char *const *build_args; /* "K=V", NULL-terminated, or NULL */
	bool no_cache;           /* run every step again */
	bool confine;            /* host paths (FROM oci-archive:) only beneath the context (API) */
	uint64_t memory_bytes;   /* per step; 0: 4 GiB */
	uint64_t disk_bytes;     /* what one step may write; 0: 8 GiB */
	uint32_t cpus_milli;     /* 0: 2 CPUs */
	uint32_t pids;           /* 0: 4096 */
	uint64_t step_timeout_ms; /* 0: 1 hour */
	build_emit_fn emit;
	void *emit_data;
};

/* Builds; on success *@ret_meta (may be NULL) is the template's template.json. */
int build_template(const struct build_opts *o, json_t **ret_meta, struct cordon_err *err);

/* Removes the layers no template uses (and what dead builds left). Exclusive: waits for
 * builds and imports to finish. Counts what it removed into *@ret_layers, *@ret_bytes. */
int build_gc(unsigned *ret_layers, uint64_t *ret_bytes, struct cordon_err *err);
