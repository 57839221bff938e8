/* cordon volume create|ls|rm (clients of cordond's /v1/volumes), the NAME:PATH[:ro] argument
 * of `cordon create --volume` and `cordon run --volume`, and the volumes of a one-shot run,
 * which `cordon run` mounts itself with the runtime's volume code (runtime/volume.h): the
 * same image and the same lock as cordond, so a volume is never mounted by both. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "lib/rootfs.h"
#include "runtime/volume.h"

/* ---- NAME:PATH[:ro] ---- */

int cli_volume_parse(const char *arg, struct cli_volume *ret)
{
	const char *colon = strchr(arg, ':');
	struct cordon_err err = {};
	if (!colon || (size_t)(colon - arg) > VOLUME_NAME_MAX) {
		log_error("--volume '%s': expected NAME:PATH or NAME:PATH:ro", arg);
		return -EINVAL;
	}
	*ret = (struct cli_volume){.read_only = false};
	snprintf(ret->name, sizeof(ret->name), "%.*s", (int)(colon - arg), arg);
	const char *path = colon + 1, *ro = strrchr(path, ':');
	size_t plen = ro ? (size_t)(ro - path) : strlen(path);
	if (ro && strcmp(ro, ":ro") != 0 && strcmp(ro, ":rw") != 0) {
		log_error("--volume '%s': the mode must be ro or rw", arg);
		return -EINVAL;
	}
	ret->read_only = ro && strcmp(ro, ":ro") == 0;
	if (plen >= sizeof(ret->path)) {
		log_error("--volume '%s': the path is too long", arg);
		return -EINVAL;
	}
	snprintf(ret->path, sizeof(ret->path), "%.*s", (int)plen, path);
	if (!volume_name_ok(ret->name)) {
		log_error("--volume '%s': a name is [a-z0-9][a-z0-9._-]{0,62}", arg);
		return -EINVAL;
	}
	if (rootfs_check_sandbox_path(ret->path, &err) < 0 || strcmp(ret->path, "/") == 0) {
		log_error("--volume '%s': %s", arg, err.msg[0] ? err.msg : "not a mount point");
		return -EINVAL;
	}
	return 0;
}

int cli_volume_add_json(json_t *req, const char *arg)
{
	struct cli_volume v;
	int r = cli_volume_parse(arg, &v);
	if (r < 0)
		return r;
	json_t *list = json_object_get(req, "volumes");
	if (!list && (json_object_set_new(req, "volumes", list = json_array()) < 0 || !list))
		return -ENOMEM;
	return json_array_append_new(list, json_pack("{s:s, s:s, s:b}", "name", v.name, "path",
						     v.path, "read_only", v.read_only)) < 0 ? -ENOMEM : 0;
}

/* ---- cordon run --volume ---- */

int run_volumes_add(struct run_volumes *rv, const char *arg)
{
	if (rv->n >= CORDON_MAX_VOLUMES) {
		log_error("--volume: at most %d", CORDON_MAX_VOLUMES);
		return -E2BIG;
	}
	int r = cli_volume_parse(arg, &rv->v[rv->n]);
	if (r < 0)
		return r;
	for (size_t i = 0; i < rv->n; i++)
		if (strcmp(rv->v[i].name, rv->v[rv->n].name) == 0) {
			log_error("--volume '%s': that volume is named twice", arg);
			return -EINVAL;
		}
	rv->h[rv->n++] = (struct volume_handle)VOLUME_HANDLE_NONE;
	return 0;
}

int run_volumes_open(struct run_volumes *rv, struct cordon_spec *spec)
{
	struct cordon_err err = {};
	if (rv->n && geteuid() != 0) {
		log_error("--volume: only root can mount volumes");
		return CORDON_EXIT_USAGE;
	}
	for (size_t i = 0; i < rv->n; i++) {
		if (volume_open(rv->v[i].name, &rv->h[i], &err) < 0) {
			log_error("--volume: %s", err.msg);
			return err.code == -ENOENT || err.code == -EBUSY ? CORDON_EXIT_USAGE
									 : CORDON_EXIT_SETUP;
		}
		spec->volumes[spec->n_volumes++] = (struct cordon_volume){
		    rv->h[i].source, rv->v[i].path, rv->v[i].read_only};
	}
	return 0;
}

void run_volumes_close(struct run_volumes *rv)
{
	for (size_t i = 0; i < rv->n; i++)
		volume_close(&rv->h[i]);
}

/* ---- cordon volume create|ls|rm ---- */

static int vol_path(char *buf, size_t size, const char *name)
{
	if (!volume_name_ok(name)) {
		log_error("volume: '%s' is not a volume name ([a-z0-9][a-z0-9._-]{0,62})", name);
		return -EINVAL;
	}
	snprintf(buf, size, "/v1/volumes/%s", name);
	return 0;
}

static void print_volume(json_t *v)
{
	json_t *att = json_object_get(v, "attachments");
	printf("%-24s %10lld MB %10lld MB  %s\n", json_string_value(json_object_get(v, "name")),
	       (long long)json_integer_value(json_object_get(v, "size_mb")),
	       (long long)json_integer_value(json_object_get(v, "used_mb")),
	       json_array_size(att) ? "attached" : json_is_true(json_object_get(v, "in_use")) ? "in use" : "-");
}

static int vol_create(const struct cli_values *v, const char *name)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(json_decrefp) json_t *req = json_pack("{s:s, s:I}", "name", name, "size_mb",
							 (json_int_t)(v->size_bytes == CLI_UNSET ? 1024 : v->size_bytes >> 20));
	int r = req ? cli_call(v->socket, "POST", "/v1/volumes", req, &res) : 1;
	if (r == 0 && v->json)
		cli_print_json(res.json);
	else if (r == 0)
		printf("%s\n", name);
	return r;
}

static int vol_ls(const struct cli_values *o)
{
	_cleanup_(client_response_done) struct client_response res = {};
	int r = cli_call(o->socket, "GET", "/v1/volumes", NULL, &res);
	if (r || o->json) {
		if (r == 0)
			cli_print_json(res.json);
		return r;
	}
	size_t i;
	json_t *v;
	printf("%-24s %13s %13s  %s\n", "NAME", "SIZE", "USED", "STATE");
	json_array_foreach(json_object_get(res.json, "volumes"), i, v)
		print_volume(v);
	return 0;
}

static int vol_rm(const struct cli_values *v, const char *name)
{
	char path[128];
	_cleanup_(client_response_done) struct client_response res = {};
	if (vol_path(path, sizeof(path), name) < 0)
		return CORDON_EXIT_USAGE;
	return cli_call(v->socket, "DELETE", path, NULL, &res);
}

static int vol_usage(FILE *f)
{
	cli_print_usage(f, CLI_VOLUME, "volume create NAME [--size SIZE] | ls | rm NAME...");
	fprintf(f, "\nA volume outlives sandboxes: mount it with cordon create --volume NAME:/data[:ro]\n"
		   "or cordon run --volume NAME:/data[:ro]. One sandbox at a time may write to it.\n");
	return f == stderr ? CORDON_EXIT_USAGE : 0;
}

int cmd_volume(int argc, char **argv)
{
	struct cli_values c;
	_cleanup_(cli_args_done) struct cli_args a = {};
	cli_values_init(&c);
	int r = cli_parse(CLI_VOLUME, argc, argv, CLI_NO_COMMAND, &c, &a);
	if (r == 1)
		return vol_usage(stdout);
	if (r == 0 && c.size_bytes != CLI_UNSET && (c.size_bytes == 0 || c.size_bytes % (1 << 20))) {
		log_error("--size: expected whole MiB, such as 512 (MiB), 256M or 2G");
		return CORDON_EXIT_USAGE;
	}
	if (r < 0 || a.n_pos < 1 || a.n_rest)
		return r < 0 ? CORDON_EXIT_USAGE : vol_usage(stderr);
	const char *verb = a.pos[0];
	if (strcmp(verb, "create") == 0 && a.n_pos == 2)
		return vol_create(&c, a.pos[1]);
	if (strcmp(verb, "ls") == 0 && a.n_pos == 1)
		return vol_ls(&c);
	if (strcmp(verb, "rm") == 0 && a.n_pos >= 2) {
		for (int i = 1; i < a.n_pos; i++)
			if ((r = vol_rm(&c, a.pos[i])) != 0)
				return r;
		return 0;
	}
	log_error("volume: expected create NAME, ls or rm NAME");
	return vol_usage(stderr);
}
