/* cordon cp -r: directories in and out of a sandbox as tar streams (GET and PUT
 * /v1/sandboxes/{id}/files/archive). The host directory is packed here with basic/tartree.h;
 * what comes out of a sandbox is hostile and is unpacked only by image/oci.h's
 * oci_apply_tar(), which follows no link and refuses names and links out of the target. The
 * archive waits in an unlinked temporary file meanwhile. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/log.h"
#include "basic/tartree.h"
#include "cli/cli.h"
#include "cli/client.h"
#include "image/oci.h"

#define CP_PATH_MAX	 (4096 * 3 + 256)
#define CP_MAX_UNPACKED (64ULL << 30) /* file data a download may unpack */

/* An unlinked file in $TMPDIR (or /tmp) to hold an archive. */
static int tmp_file(void)
{
	const char *dir = getenv("TMPDIR");
	int fd = open(dir && dir[0] == '/' ? dir : "/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
	if (fd < 0)
		log_error("cp: a temporary file: %m");
	return fd < 0 ? -errno : fd;
}

static int archive_path(char *buf, size_t size, const char *id, const char *path)
{
	if (cli_sandbox_path(buf, size, id, "/files/archive?path=") < 0 ||
	    client_urlencode(buf, size, path) < 0)
		return -EINVAL;
	return 0;
}

int cp_dir_upload(const char *socket, const char *local, const char *id, const char *path)
{
	_cleanup_(client_response_done) struct client_response res = {};
	char api[CP_PATH_MAX];
	struct client c;
	struct stat st;
	if (archive_path(api, sizeof(api), id, path) < 0)
		return CORDON_EXIT_USAGE;
	if (stat(local, &st) < 0 || !S_ISDIR(st.st_mode)) {
		log_error("cp -r: %s: not a directory", local);
		return CORDON_EXIT_USAGE;
	}
	_cleanup_close_ int fd = tmp_file();
	if (fd < 0)
		return CLI_EXIT_API;
	int r = tartree_pack(local, fd);
	if (r < 0) {
		log_error("cp -r: packing %s: %s", local, strerror(-r));
		return CLI_EXIT_API;
	}
	off_t len = lseek(fd, 0, SEEK_CUR);
	if (len < 0 || lseek(fd, 0, SEEK_SET) < 0)
		return CLI_EXIT_API;
	struct client_body body = {.content_type = "application/x-tar", .fd = fd, .len = (size_t)len};
	if (client_init(&c, socket) < 0)
		return CORDON_EXIT_USAGE;
	if ((r = client_request(&c, "PUT", api, &body, &res)) < 0)
		return client_fail(&c, r);
	return res.status >= 300 ? client_api_error(&res) : 0;
}

static int write_sink(const char *data, size_t len, void *userdata)
{
	return write_all(*(int *)userdata, data, len);
}

/* The archive in @fd unpacked into @local (made if missing), refusing what is unsafe. */
static int unpack(int fd, const char *local)
{
	struct cordon_err err = {};
	if (lseek(fd, 0, SEEK_SET) < 0 || (mkdir(local, 0755) < 0 && errno != EEXIST)) {
		log_error("cp -r: %s: %m", local);
		return CLI_EXIT_API;
	}
	_cleanup_close_ int root = open(local, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		log_error("cp -r: %s: %m", local);
		return CLI_EXIT_API;
	}
	if (oci_apply_tar(root, fd, CP_MAX_UNPACKED, &err) < 0) {
		log_error("cp -r: the sandbox's archive was refused: %s", err.msg);
		return CLI_EXIT_API;
	}
	return 0;
}

int cp_dir_download(const char *socket, const char *id, const char *path, const char *local)
{
	_cleanup_(client_response_done) struct client_response res = {};
	_cleanup_(client_conn_freep) struct client_conn *conn = NULL;
	char api[CP_PATH_MAX];
	struct client c;
	if (archive_path(api, sizeof(api), id, path) < 0)
		return CORDON_EXIT_USAGE;
	if (client_init(&c, socket) < 0)
		return CORDON_EXIT_USAGE;
	int r = client_get_stream(&c, api, &res, &conn);
	if (r)
		return r;
	_cleanup_close_ int fd = tmp_file();
	if (fd < 0)
		return CLI_EXIT_API;
	r = client_drain(&c, conn, write_sink, &fd, true);
	if (r < 0)
		return client_fail(&c, r);
	return unpack(fd, local);
}
