/* cordon cp LOCAL ID:PATH | ID:PATH LOCAL: copy one file in or out of a sandbox ("-" is
 * stdin or stdout). */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "cli/cli.h"
#include "cli/client.h"

#define FILES_PATH_MAX (4096 * 3 + 256) /* every byte of a 4096-byte path %-encoded */

struct remote {
	char id[65];
	const char *path;
};

/* "ID:/abs/path" -> @ret; false for anything else (a local path). */
static bool parse_remote(const char *arg, struct remote *ret)
{
	const char *colon = strchr(arg, ':');
	if (!colon || colon[1] != '/' || !client_valid_id(arg, (size_t)(colon - arg)))
		return false;
	memcpy(ret->id, arg, (size_t)(colon - arg));
	ret->id[colon - arg] = 0;
	ret->path = colon + 1;
	return true;
}

static const char *base_name(const char *path)
{
	const char *s = strrchr(path, '/');
	return s ? s + 1 : path;
}

/* The API path for @rem; a remote path ending in '/' gets @local's name. */
static int files_path(char *buf, size_t size, const struct remote *rem, const char *local)
{
	size_t pl = strlen(rem->path);
	if (cli_sandbox_path(buf, size, rem->id, "/files?path=") < 0 ||
	    client_urlencode(buf, size, rem->path) < 0)
		return -EINVAL;
	if (rem->path[pl - 1] != '/')
		return 0;
	if (strcmp(local, "-") == 0 || !*base_name(local)) {
		log_error("cp: '%s:%s' is a directory: name the file", rem->id, rem->path);
		return -EINVAL;
	}
	return client_urlencode(buf, size, base_name(local));
}

/* Reads all of a pipe into memory: its length must be known before the request. */
static int slurp(int fd, char **ret, size_t *ret_len)
{
	size_t len = 0, cap = 0;
	_cleanup_free_ char *buf = NULL;

	for (;;) {
		if (cap - len < 65536) {
			if (cap >= CLIENT_MEM_UPLOAD_MAX)
				return -EFBIG;
			char *p = realloc(buf, cap = cap ? cap * 2 : 65536);
			if (!p)
				return -ENOMEM;
			buf = p;
		}
		ssize_t n = read(fd, buf + len, cap - len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		len += (size_t)n;
	}
	*ret = TAKE_PTR(buf);
	*ret_len = len;
	return 0;
}

static int upload_body(const char *local, int *fd, char **mem, struct client_body *ret)
{
	struct stat st;

	*ret = (struct client_body){.content_type = "application/octet-stream", .fd = -1};
	*fd = strcmp(local, "-") == 0 ? dup(STDIN_FILENO) : open(local, O_RDONLY | O_CLOEXEC);
	if (*fd < 0 || fstat(*fd, &st) < 0) {
		log_error("cp: %s: %m", local);
		return -errno;
	}
	if (S_ISDIR(st.st_mode)) {
		log_error("cp: %s is a directory (cp copies one file)", local);
		return -EISDIR;
	}
	if (S_ISREG(st.st_mode)) {
		ret->fd = *fd;
		ret->len = (size_t)st.st_size;
		return 0;
	}
	int r = slurp(*fd, mem, &ret->len);
	if (r < 0) {
		log_error("cp: reading %s: %s", local, strerror(-r));
		return r;
	}
	ret->data = *mem;
	return 0;
}

static int cp_upload(const struct cli_values *co, const char *local, const struct remote *rem)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_close_ int fd = -1;
	_cleanup_free_ char *mem = NULL;
	struct client_body body;
	struct client c;
	char path[FILES_PATH_MAX];

	if (files_path(path, sizeof(path), rem, local) < 0)
		return CORDON_EXIT_USAGE;
	if (upload_body(local, &fd, &mem, &body) < 0)
		return CLI_EXIT_API;
	if (client_init(&c, co->socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_request(&c, "PUT", path, &body, &res);
	if (r < 0)
		return client_fail(&c, r);
	return res.status >= 300 ? client_api_error(&res) : 0;
}

static int write_sink(const char *data, size_t len, void *userdata)
{
	return write_all(*(int *)userdata, data, len);
}

/* Opens where a download goes: stdout, LOCAL, or LOCAL/<name> when LOCAL is a directory. */
static int open_local(const char *local, const struct remote *rem)
{
	struct stat st;
	char buf[8192];

	if (strcmp(local, "-") == 0)
		return dup(STDOUT_FILENO);
	if (stat(local, &st) == 0 && S_ISDIR(st.st_mode)) {
		if (snprintf(buf, sizeof(buf), "%s/%s", local, base_name(rem->path)) >= (int)sizeof(buf))
			return -ENAMETOOLONG;
		local = buf;
	}
	int fd = open(local, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0666);
	if (fd < 0)
		log_error("cp: %s: %m", local);
	return fd < 0 ? -errno : fd;
}

static int cp_download(const struct cli_values *co, const struct remote *rem, const char *local)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	struct client c;
	char path[FILES_PATH_MAX];

	if (files_path(path, sizeof(path), rem, "") < 0)
		return CORDON_EXIT_USAGE;
	if (client_init(&c, co->socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_get_stream(&c, path, &res, &conn);
	if (r)
		return r;
	/* Opened only now, so that an error answer does not truncate an existing file. */
	_cleanup_close_ int fd = open_local(local, rem);
	if (fd < 0)
		return CLI_EXIT_API;
	r = client_drain(&c, conn, write_sink, &fd, true);
	if (r < 0 && c.stage == CLIENT_PROTOCOL && r != -EBADMSG) {
		log_error("cp: writing %s: %s", local, strerror(-r));
		return CLI_EXIT_API;
	}
	return r < 0 ? client_fail(&c, r) : 0;
}

int cmd_cp(int argc, char **argv)
{
	struct cli_values co;
	_cleanup_(cli_args_done) struct cli_args a = {};
	struct remote src, dst;
	cli_values_init(&co);
	int r = cli_parse(CLI_CP, argc, argv, CLI_NO_COMMAND, &co, &a);
	if (r == 1) {
		cli_print_usage(stdout, CLI_CP, "cp [-r] [OPTIONS] LOCAL ID:PATH | ID:PATH LOCAL\n\n"
						"'-' as LOCAL is stdin or stdout; PATH is absolute. With -r, the\n"
						"contents of a directory go into the other (made if missing).");
		return 0;
	}
	char *args[2];
	int n = 0;
	for (int i = 0; r == 0 && i < a.n_pos + a.n_rest && n <= 2; i++, n++)
		if (n < 2)
			args[n] = i < a.n_pos ? a.pos[i] : a.rest[i - a.n_pos];
	if (r < 0 || n != 2) {
		if (r >= 0)
			log_error("cp: expected a source and a destination");
		return CORDON_EXIT_USAGE;
	}
	bool rs = parse_remote(args[0], &src), rd = parse_remote(args[1], &dst);
	if (rs == rd) {
		log_error("cp: exactly one of the two must be ID:/PATH (a sandbox id and an absolute path)");
		return CORDON_EXIT_USAGE;
	}
	if (co.recursive)
		return rs ? cp_dir_download(co.socket, src.id, src.path, args[1])
			  : cp_dir_upload(co.socket, args[0], dst.id, dst.path);
	return rs ? cp_download(&co, &src, args[1]) : cp_upload(&co, args[0], &dst);
}
