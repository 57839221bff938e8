/* The volume service: persistent volumes through the API (svc_volume_*), and the volumes of
 * the sandboxes cordond makes (svc_volumes_claim). The images, their lock and the mounts are
 * src/runtime/volume.c's, shared with `cordon run`; what is here is who may mount what.
 *
 * cordond mounts a volume once (volume_open: the lock, one loop device, one superblock) while
 * any of its sandboxes uses it, and each sandbox gets its own idmapped mount of that
 * superblock: read-write for at most one sandbox at a time, read-only for any number. A
 * sandbox lets go of its volumes when it is reaped, after its mounts went with its mount
 * namespace; the last one closes cordond's mount, and the loop device (and the lock) goes. A
 * volume mounted by another process (`cordon run --volume`, a second cordond) is refused as
 * in use. Every attach and detach is an audit record of the sandbox (volume.attach and
 * volume.detach). Volumes are created on the loop thread: mke2fs of a sparse image takes tens
 * of milliseconds, under a deadline of 10 s. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "audit/audit.h"
#include "basic/log.h"
#include "daemon/daemon.h"
#include "daemon/service.h"
#include "runtime/volume.h"

/* A volume cordond has mounted, and how its sandboxes use it. */
struct vol_open {
	char name[VOLUME_NAME_MAX + 1];
	struct volume_handle h;
	unsigned n_rw, n_ro;
	struct vol_open *next;
};

static struct vol_open *opened;

/* What one sandbox holds. */
struct sbx_volumes {
	size_t n;
	struct {
		struct vol_open *vo;
		bool read_only;
	} m[API_MAX_VOLUMES];
};

static struct vol_open *vol_find(const char *name)
{
	for (struct vol_open *v = opened; v; v = v->next)
		if (strcmp(v->name, name) == 0)
			return v;
	return NULL;
}

/* The API's error for a volume.c failure. */
static int vol_fail(struct svc_err *e, const struct cordon_err *err)
{
	static const struct {
		int code;
		enum api_error e;
	} map[] = {
	    {-ENOENT, API_ERR_NOT_FOUND},	     {-EBUSY, API_ERR_VOLUME_IN_USE},
	    {-EEXIST, API_ERR_VOLUME_EXISTS},	     {-ENOSPC, API_ERR_INSUFFICIENT_STORAGE},
	    {-EINVAL, API_ERR_INVALID_FIELD},
	};
	for (size_t i = 0; i < ELEMENTSOF(map); i++)
		if (err->code == map[i].code)
			return svc_fail(e, map[i].e, "%s", err->msg);
	return svc_fail(e, api_error_from_errno(err->code), "%s", err->msg);
}

/* [{sandbox, path, read_only}] of the sandboxes that have @name mounted. */
static json_t *attachments(const char *name)
{
	json_t *a = json_array();
	for (struct sbx *s = D.sandboxes; s && a; s = s->next) {
		size_t i;
		json_t *m;
		json_array_foreach(s->volumes, i, m)
			if (strcmp(json_string_value(json_object_get(m, "name")), name) == 0)
				json_array_append_new(a, json_pack("{s:s, s:O, s:O}", "sandbox", s->id,
								   "path", json_object_get(m, "path"),
								   "read_only", json_object_get(m, "read_only")));
	}
	return a;
}

static json_t *volume_json(const struct volume_info *v)
{
	json_t *att = attachments(v->name);
	return json_pack("{s:s, s:I, s:I, s:I, s:b, s:o}", "name", v->name, "size_mb",
			 (json_int_t)(v->size_bytes >> 20), "used_mb",
			 (json_int_t)((v->used_bytes + (1 << 20) - 1) >> 20), "created_s",
			 (json_int_t)v->created_s, "in_use", v->in_use || vol_find(v->name),
			 "attachments", att ? att : json_array());
}

int svc_volume_create(const struct api_volume *req, json_t **ret, struct svc_err *e)
{
	struct cordon_err err = {};
	struct volume_info info;
	if (volume_create(req->name, req->size_mb, &err) < 0 || volume_stat(req->name, &info, &err) < 0)
		return vol_fail(e, &err);
	log_info("volume %s: created, %u MiB", req->name, req->size_mb);
	*ret = volume_json(&info);
	return 0;
}

json_t *svc_volume_list(void)
{
	struct volume_info *v = NULL;
	size_t n = 0;
	json_t *list = json_array();
	if (list && volume_list(&v, &n, NULL) == 0)
		for (size_t i = 0; i < n; i++)
			json_array_append_new(list, volume_json(&v[i]));
	free(v);
	return json_pack("{s:o}", "volumes", list ? list : json_array());
}

int svc_volume_get(const char *name, json_t **ret, struct svc_err *e)
{
	struct cordon_err err = {};
	struct volume_info info;
	if (volume_stat(name, &info, &err) < 0)
		return vol_fail(e, &err);
	*ret = volume_json(&info);
	return 0;
}

int svc_volume_delete(const char *name, struct svc_err *e)
{
	struct cordon_err err = {};
	if (vol_find(name))
		return svc_fail(e, API_ERR_VOLUME_IN_USE, "volume '%s' is mounted by a sandbox", name);
	if (volume_delete(name, &err) < 0)
		return vol_fail(e, &err);
	log_info("volume %s: deleted", name);
	return 0;
}

/* ---- the volumes of a sandbox ---- */

static void vol_unref(struct vol_open *vo, bool read_only)
{
	(read_only ? vo->n_ro-- : vo->n_rw--);
	if (vo->n_ro || vo->n_rw)
		return;
	for (struct vol_open **p = &opened; *p; p = &(*p)->next)
		if (*p == vo) {
			*p = vo->next;
			break;
		}
	volume_close(&vo->h);
	free(vo);
}

/* @name, mounted by us, for one more sandbox (@read_only or not). */
static struct vol_open *vol_ref(const char *name, bool read_only, struct svc_err *e)
{
	struct cordon_err err = {};
	struct vol_open *vo = vol_find(name);
	if (vo && !read_only && vo->n_rw) {
		svc_fail(e, API_ERR_VOLUME_IN_USE, "volume '%s' is mounted read-write by another "
			 "sandbox", name);
		return NULL;
	}
	if (!vo) {
		vo = calloc(1, sizeof(*vo));
		if (!vo) {
			svc_fail(e, API_ERR_INTERNAL, "out of memory");
			return NULL;
		}
		snprintf(vo->name, sizeof(vo->name), "%s", name);
		if (volume_open(name, &vo->h, &err) < 0) {
			free(vo);
			vol_fail(e, &err);
			return NULL;
		}
		vo->next = opened;
		opened = vo;
	}
	(read_only ? vo->n_ro++ : vo->n_rw++);
	return vo;
}

void sbx_volumes_free(struct sbx_volumes *v)
{
	for (size_t i = 0; v && i < v->n; i++)
		vol_unref(v->m[i].vo, v->m[i].read_only);
	free(v);
}

int svc_volumes_claim(const struct api_create *req, struct cordon_volume *spec_vols,
		      struct sbx_volumes **ret, json_t **ret_json, struct svc_err *e)
{
	struct sbx_volumes *v = calloc(1, sizeof(*v));
	json_t *list = json_array();
	if (!v || !list) {
		free(v);
		json_decref(list);
		return svc_fail(e, API_ERR_INTERNAL, "out of memory");
	}
	for (size_t i = 0; i < req->n_volumes; i++) {
		const struct api_volume_mount *m = &req->volumes[i];
		struct vol_open *vo = vol_ref(m->name, m->read_only, e);
		if (!vo) {
			sbx_volumes_free(v);
			json_decref(list);
			return -1;
		}
		v->m[v->n++] = (typeof(v->m[0])){vo, m->read_only};
		spec_vols[i] = (struct cordon_volume){vo->h.source, m->path, m->read_only};
		json_array_append_new(list, json_pack("{s:s, s:s, s:b}", "name", m->name, "path",
						      m->path, "read_only", m->read_only));
	}
	*ret = v;
	*ret_json = list;
	return 0;
}

int svc_volumes_audit_attach(struct sbx *s)
{
	size_t i;
	json_t *m;
	json_array_foreach(s->volumes, i, m) {
		int r = sbx_audit_rc(s, AUDIT_VOLUME_ATTACH, json_incref(m));
		if (r < 0)
			return r;
	}
	return 0;
}

static void on_ending(struct sbx *s)
{
	size_t i;
	json_t *m;
	json_array_foreach(s->volumes, i, m)
		sbx_audit(s, AUDIT_VOLUME_DETACH, json_incref(m));
}

static void on_final(struct sbx *s)
{
	sbx_volumes_free(s->vol_claim);
	s->vol_claim = NULL;
}

static const struct sbx_hooks volume_hooks = {.ending = on_ending, .final = on_final};

void volumes_start(void)
{
	volume_sweep();
	sbx_hooks_add(&volume_hooks);
}
