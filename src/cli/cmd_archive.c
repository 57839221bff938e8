/* cordon cp -r: directories in and out of a sandbox as tar streams (GET and PUT
 * /v1/sandboxes/{id}/files/archive). The host directory is packed here with basic/tartree.h;
 * what comes out of a sandbox is hostile and is unpacked only by image/oci.h's
 * oci_apply_tar() (in cordon-template, see unpack()), which follows no link and refuses names and links out of the target. The
 * archive waits in an unlinked temporary file meanwhile. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cordon/cordon.h>

#include "basic/child.h"
#include "basic/cleanup.h"
#include "basic/fileio.h"
#include "basic/helper.h"
#include "basic/log.h"
#include "basic/tartree.h"
#include "cli/cli.h"
#include "cli/client.h"

#define CP_PATH_MAX	 (4096 * 3 + 256)
/* At disk speed the largest download cordon-template unpacks (64 GiB) takes minutes. */
#define CP_UNPACK_DEADLINE_MS (30 * 60 * 1000)

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

/* The archive in @fd unpacked into @local (made if missing) by `cordon-template unpack-tar`,
 * which refuses what is unsafe (oci_apply_tar()) and says why. A helper, not a call: the
 * unpacker links libarchive and libcrypto, which every `cordon run` would load otherwise. */
static int unpack(int fd, const char *local)
{
	char path[PATH_MAX];
	if (lseek(fd, 0, SEEK_SET) < 0 || (mkdir(local, 0755) < 0 && errno != EEXIST)) {
		log_error("cp -r: %s: %m", local);
		return CLI_EXIT_API;
	}
	if (helper_path("cordon-template", "CORDON_TEMPLATE", path, sizeof(path)) < 0) {
		log_error("cp -r: cordon-template not found (%s)", path);
		return CLI_EXIT_API;
	}
	char *const argv[] = {"cordon-template", "unpack-tar", (char *)local, NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_adddup2(&fa, fd, STDIN_FILENO);
	pid_t pid;
	int r = posix_spawn(&pid, path, &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	if (r != 0) {
		log_error("cp -r: %s: %s", path, strerror(r));
		return CLI_EXIT_API;
	}
	int status;
	if ((r = child_wait_deadline(pid, CP_UNPACK_DEADLINE_MS, &status)) < 0)
		log_error("cp -r: unpacking took more than %d s", CP_UNPACK_DEADLINE_MS / 1000);
	return r == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : CLI_EXIT_API;
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
