/* cordon-template: `cordon template import|ls|inspect|rm`, over the store (image/store.h) and
 * the OCI importer (image/oci.h). `cordon template` execs this binary, which alone of the CLI
 * links libarchive and libcrypto. Exit status: 0 ok, 1 failure, 2 usage. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#include <openssl/evp.h>

#include <cordon/cordon.h>

#include "basic/cleanup.h"
#include "basic/log.h"
#include "build/build.h"
#include "cli/opts.h"
#include "image/oci.h"
#include "image/store.h"

#define TEMPLATE_MAX_BYTES (16ULL << 30) /* file data one import may write */

struct import_ctx {
	const char *file; /* as given */
	char source[PATH_MAX + 16];
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

static void format_size(char buf[32], uint64_t n)
{
	static const char units[][4] = {"B", "KiB", "MiB", "GiB", "TiB"};
	double v = n;
	unsigned u = 0;
	for (; v >= 1024 && u + 1 < ELEMENTSOF(units); u++)
		v /= 1024;
	snprintf(buf, 32, u ? "%.1f %s" : "%.0f %s", v, units[u]);
}

/* "sha256:<hex>" of the archive file as given: what a person can check with sha256sum. */
static int file_digest(const char *path, char out[7 + 65], uint64_t *ret_size, struct cordon_err *err)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	unsigned char md[32], buf[64 * 1024];
	ssize_t n;
	if (fd < 0)
		return cordon_err_set(err, -errno, "open '%s'", path);
	EVP_MD_CTX *c = EVP_MD_CTX_new();
	if (!c || EVP_DigestInit_ex(c, EVP_sha256(), NULL) != 1) {
		EVP_MD_CTX_free(c);
		return cordon_err_setf(err, -ENOMEM, "sha256");
	}
	*ret_size = 0;
	while ((n = read(fd, buf, sizeof(buf))) > 0) {
		EVP_DigestUpdate(c, buf, n);
		*ret_size += n;
	}
	EVP_DigestFinal_ex(c, md, NULL);
	EVP_MD_CTX_free(c);
	if (n < 0)
		return cordon_err_set(err, -errno, "read '%s'", path);
	strcpy(out, "sha256:");
	for (int i = 0; i < 32; i++)
		snprintf(out + 7 + 2 * i, 3, "%02x", md[i]);
	return 0;
}

static json_t *json_strv(char **v)
{
	json_t *a = json_array();
	for (; v && *v; v++)
		json_array_append_new(a, json_string(*v));
	return a;
}

static json_t *json_str_or_null(const char *s)
{
	return s ? json_string(s) : json_null();
}

/* store_fill_fn: the archive's layers into @rootfd, its config into @meta. */
static int fill_from_oci(int rootfd, json_t *meta, void *userdata, struct cordon_err *err)
{
	struct import_ctx *c = userdata;
	struct oci_config cfg = {};
	char digest[7 + 65], size[32];
	uint64_t bytes;
	double t0 = now_s();

	int r = file_digest(c->file, digest, &bytes, err);
	if (r < 0)
		return r;
	format_size(size, bytes);
	fprintf(stderr, "import %s: %s, sha256 checked in %.1f s\n", c->file, size, now_s() - t0);
	t0 = now_s();
	r = oci_import(c->file, rootfd, TEMPLATE_MAX_BYTES, &cfg, err);
	if (r < 0)
		return r;
	fprintf(stderr, "import %s: layers applied in %.1f s\n", c->file, now_s() - t0);
	json_object_set_new(meta, "source", json_string(c->source));
	json_object_set_new(meta, "digest", json_string(digest));
	json_object_set_new(meta, "env", json_strv(cfg.env));
	json_object_set_new(meta, "workdir", json_str_or_null(cfg.working_dir));
	json_object_set_new(meta, "user", json_str_or_null(cfg.user));
	json_object_set_new(meta, "cmd", json_strv(cfg.cmd));
	oci_config_done(&cfg);
	return 0;
}

static int fail(const struct cordon_err *err)
{
	log_error("template: %s", err->msg[0] ? err->msg : strerror(-err->code));
	return 1;
}

static void print_json(json_t *j)
{
	json_dumpf(j, stdout, JSON_INDENT(2));
	fputc('\n', stdout);
}

/* What a command returns for --help: no exit status is this. */
#define TPL_HELP 256

/* Parses @argv for @cmd into @v: exactly @n positional words (pointers into argv), no
 * command. -EINVAL (the usage line follows) for anything else; TPL_HELP for --help. */
static int parse(enum cli_cmd cmd, int argc, char **argv, struct cli_values *v, const char **pos,
		 int n)
{
	_cleanup_(cli_args_done) struct cli_args a = {};
	cli_values_init(v);
	int r = cli_parse(cmd, argc, argv, CLI_NO_COMMAND, v, &a);
	if (r != 0)
		return r < 0 ? -EINVAL : TPL_HELP;
	if (a.n_pos != n || a.n_rest)
		return -EINVAL;
	for (int i = 0; i < n; i++)
		pos[i] = a.pos[i];
	return 0;
}

static int do_import(int argc, char **argv)
{
	struct cli_values v;
	const char *pos[2];
	struct cordon_err err = {};
	struct import_ctx c;
	char real[PATH_MAX];

	int r = parse(CLI_TEMPLATE_IMPORT, argc, argv, &v, pos, 2);
	if (r)
		return r;
	if (!realpath(pos[1], real)) {
		log_error("template: '%s': %m", pos[1]);
		return 1;
	}
	c.file = pos[1];
	snprintf(c.source, sizeof(c.source), "oci-archive:%s", real);
	_cleanup_(json_decrefp) json_t *meta = NULL;
	if (store_import(pos[0], v.replace, fill_from_oci, &c, &meta, &err) < 0)
		return fail(&err);
	if (v.json)
		print_json(meta);
	else
		printf("%s\n", pos[0]);
	return 0;
}

static int do_ls(int argc, char **argv)
{
	struct cli_values v;
	struct cordon_err err = {};
	_cleanup_(json_decrefp) json_t *list = NULL;
	size_t i;
	json_t *m;

	int r = parse(CLI_TEMPLATE_LS, argc, argv, &v, NULL, 0);
	if (r)
		return r;
	if (store_list(&list, &err) < 0)
		return fail(&err);
	if (v.json) {
		print_json(list);
		return 0;
	}
	printf("%-24s %10s  %-20s  %s\n", "NAME", "SIZE", "CREATED", "SOURCE");
	json_array_foreach(list, i, m) {
		char size[32];
		format_size(size, json_integer_value(json_object_get(m, "size_bytes")));
		printf("%-24s %10s  %-20s  %s\n", json_string_value(json_object_get(m, "name")) ?: "?",
		       size, json_string_value(json_object_get(m, "created")) ?: "-",
		       json_string_value(json_object_get(m, "source")) ?: "-");
	}
	return 0;
}

static int do_inspect(int argc, char **argv)
{
	struct cli_values v;
	const char *name;
	struct cordon_err err = {};
	_cleanup_(json_decrefp) json_t *meta = NULL;

	int r = parse(CLI_TEMPLATE_INSPECT, argc, argv, &v, &name, 1);
	if (r)
		return r;
	if (store_read(name, &meta, &err) < 0)
		return fail(&err);
	print_json(meta);
	return 0;
}

static int do_rm(int argc, char **argv)
{
	struct cli_values v;
	const char *name;
	struct cordon_err err = {};

	int r = parse(CLI_TEMPLATE_RM, argc, argv, &v, &name, 1);
	if (r)
		return r;
	return store_remove(name, &err) < 0 ? fail(&err) : 0;
}

/* Build progress: --json passes the builder's events on as lines; otherwise each step is
 * a header and a closing line on stderr, with the step's output in between, or, on a
 * terminal, one line that shows a package count and bar (apt's "Get:N", debootstrap's
 * "I: Retrieving") and the latest output line, the whole output kept for a failure. */
struct progress {
	bool json, tty;
	unsigned total, got;    /* packages: announced, fetched */
	char last[160];         /* latest output line */
	char *log;              /* the step's output (tty), for a failure */
	size_t log_len;
	char line[1024];        /* a partial line being collected */
	size_t line_len;
	const char *instruction;
	unsigned step, of;
};

static void progress_line(struct progress *p)
{
	char bar[24] = "";
	if (p->total) {
		unsigned fill = p->got >= p->total ? 20 : p->got * 20 / p->total;
		memset(bar, '#', fill);
		memset(bar + fill, '.', 20 - fill);
		bar[20] = '\0';
		fprintf(stderr, "\r\033[K[%u/%u] [%s] %u/%u packages  %.60s", p->step, p->of, bar, p->got,
			p->total, p->last);
	} else if (p->got) {
		fprintf(stderr, "\r\033[K[%u/%u] %u packages  %.60s", p->step, p->of, p->got, p->last);
	} else {
		fprintf(stderr, "\r\033[K[%u/%u] %.70s", p->step, p->of, p->last);
	}
}

/* What a line of apt or debootstrap says about packages. */
static void progress_parse(struct progress *p, const char *l)
{
	unsigned a, b;
	if (strncmp(l, "Get:", 4) == 0 || strncmp(l, "I: Retrieving ", 14) == 0)
		p->got++;
	else if (sscanf(l, "%u upgraded, %u newly installed", &a, &b) == 2)
		p->total = a + b, p->got = 0;
	snprintf(p->last, sizeof(p->last), "%.159s", l);
}

static void progress_log(struct progress *p, const char *data, size_t n)
{
	if (!p->tty) {
		fwrite(data, 1, n, stderr);
		return;
	}
	char *nl = realloc(p->log, p->log_len + n + 1);
	if (nl) {
		memcpy(nl + p->log_len, data, n);
		p->log = nl;
		p->log_len += n;
		nl[p->log_len] = '\0';
	}
	for (size_t i = 0; i < n; i++) {
		char ch = data[i];
		if (ch == '\n' || ch == '\r' || p->line_len + 1 >= sizeof(p->line)) {
			p->line[p->line_len] = '\0';
			if (p->line_len)
				progress_parse(p, p->line);
			p->line_len = 0;
			continue;
		}
		p->line[p->line_len++] = (ch >= 32 && ch < 127) ? ch : '?';
	}
	progress_line(p);
}

static void progress_event(void *data, json_t *ev)
{
	struct progress *p = data;
	const char *kind = json_string_value(json_object_get(ev, "event"));
	if (p->json) {
		json_dumpf(ev, stdout, JSON_COMPACT);
		fputc('\n', stdout);
		fflush(stdout);
		return;
	}
	if (strcmp(kind, "step") == 0) {
		p->step = json_integer_value(json_object_get(ev, "step"));
		p->of = json_integer_value(json_object_get(ev, "of"));
		p->total = p->got = 0;
		p->last[0] = '\0';
		p->log_len = 0;
		fprintf(stderr, "[%u/%u] %s\n", p->step, p->of, json_string_value(json_object_get(ev, "instruction")));
	} else if (strcmp(kind, "log") == 0) {
		json_t *d = json_object_get(ev, "data");
		progress_log(p, json_string_value(d), json_string_length(d));
	} else if (strcmp(kind, "step_done") == 0) {
		char size[32];
		format_size(size, json_integer_value(json_object_get(ev, "bytes")));
		if (p->tty)
			fprintf(stderr, "\r\033[K");
		if (json_is_true(json_object_get(ev, "cached")))
			fprintf(stderr, "  -> cached\n");
		else
			fprintf(stderr, "  -> done in %.1f s (%s)\n",
				json_real_value(json_object_get(ev, "seconds")), size);
	} else if (strcmp(kind, "done") == 0) {
		fprintf(stderr, "built %s in %.1f s%s\n", json_string_value(json_object_get(ev, "name")),
			json_real_value(json_object_get(ev, "seconds")),
			json_is_true(json_object_get(ev, "up_to_date")) ? " (up to date)" : "");
	}
}

/* The options into the builder's: SIZE, DURATION and N CPUs as everywhere (opts.h). */
static int build_options(int argc, char **argv, struct build_opts *o, const char **args,
			 bool *json)
{
	struct cli_values v;
	int r = parse(CLI_TEMPLATE_BUILD, argc, argv, &v, &o->name, 1);
	if (r)
		return r;
	if (!v.file || v.build_arg.n > 64) {
		log_error("template build: %s", v.file ? "at most 64 --build-arg" : "-f FILE is missing");
		return -EINVAL;
	}
	*o = (struct build_opts){.name = o->name, .recipe = v.file, .context = v.context,
				 .context_tar = v.context_tar, .source = v.source,
				 .no_cache = v.no_cache, .confine = v.confine};
	if (v.memory_bytes != CLI_UNSET)
		o->memory_bytes = v.memory_bytes;
	if (v.disk_bytes != CLI_UNSET)
		o->disk_bytes = v.disk_bytes;
	if (v.cpus_milli != CLI_UNSET)
		o->cpus_milli = (uint32_t)v.cpus_milli;
	if (v.timeout_ms != CLI_UNSET)
		o->step_timeout_ms = v.timeout_ms;
	memcpy(args, v.build_arg.v, v.build_arg.n * sizeof(*args));
	*json = v.json;
	return 0;
}

static int do_build(int argc, char **argv)
{
	struct build_opts o = {.recipe = NULL};
	struct progress p = {.tty = isatty(2)};
	const char *args[65] = {NULL};
	struct cordon_err err = {};

	int r = build_options(argc, argv, &o, args, &p.json);
	if (r)
		return r;
	o.build_args = args;
	char real[PATH_MAX], source[PATH_MAX + 8];
	if (!o.source && realpath(o.recipe, real)) { /* template.json names the recipe absolutely */
		snprintf(source, sizeof(source), "%s", real);
		o.source = source;
	}
	o.emit = progress_event;
	o.emit_data = &p;
	r = build_template(&o, NULL, &err);
	if (r < 0) {
		if (p.tty)
			fprintf(stderr, "\r\033[K%s", p.log ? p.log : "");
		free(p.log);
		if (p.json) {
			json_t *ev = json_pack("{s:s, s:s}", "event", "error", "message", err.msg);
			json_dumpf(ev, stdout, JSON_COMPACT);
			fputc('\n', stdout);
			json_decref(ev);
		}
		return fail(&err);
	}
	free(p.log);
	if (!p.json)
		printf("%s\n", o.name);
	return 0;
}

/* Versions first (an old version no longer names layers, so its layers go in the same run),
 * then layers. */
static int do_gc(int argc, char **argv)
{
	struct cli_values v;
	struct cordon_err err = {};
	struct store_gc g;
	unsigned layers;
	uint64_t bytes;
	char size[32], vsize[32];

	int r = parse(CLI_TEMPLATE_GC, argc, argv, &v, NULL, 0);
	if (r)
		return r;
	if (store_gc_versions(&g, &err) < 0 || build_gc(&layers, &bytes, &err) < 0)
		return fail(&err);
	format_size(size, bytes);
	format_size(vsize, g.bytes);
	printf("removed %u layers (%s)\n", layers, size);
	printf("removed %u old versions (%s), kept %u in use\n", g.removed, vsize, g.in_use);
	return 0;
}

/* `unpack-tar DIR`, for `cordon cp -r` (cmd_archive.c): the archive on stdin unpacked into
 * DIR by oci_apply_tar(), which refuses what is unsafe. Here and not in cordon, so that the
 * binary every `cordon run` loads links neither libarchive nor libcrypto. Not in the usage:
 * no person types it. */
#define UNPACK_MAX_BYTES (64ULL << 30) /* file data one download may unpack */

static int do_unpack_tar(int argc, char **argv)
{
	struct cordon_err err = {};
	if (argc != 2)
		return -EINVAL;
	_cleanup_close_ int root = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (root < 0) {
		log_error("cp -r: %s: %m", argv[1]);
		return 1;
	}
	if (oci_apply_tar(root, STDIN_FILENO, UNPACK_MAX_BYTES, &err) < 0) {
		log_error("cp -r: the sandbox's archive was refused: %s", err.msg);
		return 1;
	}
	return 0;
}

static const struct {
	const char *name;
	int (*run)(int argc, char **argv);
	const char *usage; /* NULL: internal, not shown */
} commands[] = {
	{"build", do_build, "build NAME -f FILE [--context DIR | --context-tar FILE.tar] [--build-arg K=V]...\n"
			    "                       [--no-cache] [--json]"
			    " [--memory SIZE] [--disk SIZE] [--cpus N] [--timeout DURATION]"},
	{"gc", do_gc, "gc"},
	{"import", do_import, "import NAME FILE.tar [--replace] [--json]"},
	{"ls", do_ls, "ls [--json]"},
	{"inspect", do_inspect, "inspect NAME"},
	{"rm", do_rm, "rm NAME"},
	{"unpack-tar", do_unpack_tar, NULL},
};

static int usage(FILE *f)
{
	fprintf(f, "usage:\n");
	for (size_t i = 0; i < ELEMENTSOF(commands); i++)
		if (commands[i].usage)
			fprintf(f, "  cordon template %s\n", commands[i].usage);
	fprintf(f, "\nbuild: FILE is a recipe (a Dockerfile subset: FROM, RUN, COPY, ADD, ENV, ARG, WORKDIR,\n"
		   "USER, START, READY; see README.md); every step is a cached layer; RUN runs in a jail\n"
		   "whose network reaches only the host's apt sources. Needs root.\n"
		   "FILE.tar is an OCI image layout archive or a `docker save` archive (optionally\n"
		   "gzipped). Templates live in $%s or %s.\n"
		   "A name points to an immutable version: a rebuild, import --replace or rm while a\n"
		   "sandbox runs changes only the name; the sandbox keeps its version until it ends,\n"
		   "then the version goes (gc removes versions that nothing names or uses).\n"
		   "exit status: 0 ok, 1 failure, 2 usage.\n", STORE_ENV, STORE_DEFAULT_DIR);
	return f == stderr ? CORDON_EXIT_USAGE : 0;
}

int main(int argc, char **argv)
{
	/* Removing a deep tree holds one fd per level (STORE_MAX_DEPTH). */
	struct rlimit rl;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < STORE_MAX_DEPTH + 64) {
		rl.rlim_cur = rl.rlim_max < STORE_MAX_DEPTH + 64 ? rl.rlim_max : STORE_MAX_DEPTH + 64;
		(void)setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (argc < 2)
		return usage(stderr);
	if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)
		return usage(stdout);
	for (size_t i = 0; i < ELEMENTSOF(commands); i++) {
		if (strcmp(argv[1], commands[i].name) != 0)
			continue;
		if (argc >= 3 && strcmp(argv[2], "--help") == 0)
			return usage(stdout);
		int r = commands[i].run(argc - 1, argv + 1);
		if (r == TPL_HELP)
			return usage(stdout);
		if (r == -EINVAL) {
			fprintf(stderr, "usage: cordon template %s\n", commands[i].usage ?: commands[i].name);
			return CORDON_EXIT_USAGE;
		}
		return r;
	}
	log_error("template: unknown command '%s'", argv[1]);
	return usage(stderr);
}
