/* Recipes: the Dockerfile subset `cordon template build` accepts.
 *
 *     FROM scratch | debian:bookworm | debian:bookworm-slim | oci-archive:PATH | <template>
 *     RUN cmd | RUN ["exe", "arg"]          START ... / READY ...   (the same two forms)
 *     COPY [--chown=U[:G]] [--chmod=MODE] SRC... DEST     (ADD: the same, local files only)
 *     ENV K=V [K2=V2 ...] | ENV K V         ARG NAME[=DEFAULT]
 *     WORKDIR PATH                          USER NAME|UID[:GROUP|GID]
 *
 * recipe_parse() turns the text into steps with every variable reference (ARG and ENV,
 * `$X`, `${X}`, `${X:-word}`, `${X:+word}`) already expanded in the instructions that expand
 * them in Docker (FROM, COPY, ADD, ENV, WORKDIR, USER, ARG); RUN, START and READY keep their
 * text, the shell expands it from the environment. Comments (`#` first on a line),
 * blank lines and backslash continuations are handled; a parser directive line
 * (`# syntax=...`) is a comment. Errors name the line: "line 7: CMD is not supported
 * (supported: FROM, RUN, ...)".
 *
 *     struct recipe *r;
 *     struct cordon_err err = {};
 *     const char *args[] = {"VERSION=3", NULL};
 *     if (recipe_parse(text, len, args, &r, &err) < 0) { fprintf(stderr, "%s\n", err.msg); ... }
 *     for (size_t i = 0; i < r->n_steps; i++) ... r->steps[i].kind ...
 *     recipe_free(r);
 *
 * Pure: no I/O, no global state; fuzzed (fuzz/recipe).
 */
#pragma once

#include <stdbool.h>
#include <stddef.h>

#include <cordon/err.h>

#define RECIPE_MAX_BYTES  (1u << 20) /* of the recipe text */
#define RECIPE_MAX_STEPS  512u
#define RECIPE_MAX_ARGS   4096u      /* words of one instruction */
#define RECIPE_MAX_VARS   256u       /* ARG and ENV names in scope */

enum recipe_kind {
	RECIPE_FROM,
	RECIPE_RUN,
	RECIPE_COPY, /* ADD too: local files only, archives are copied as they are */
	RECIPE_ENV,
	RECIPE_ARG,
	RECIPE_WORKDIR,
	RECIPE_USER,
	RECIPE_START,
	RECIPE_READY,
};

struct recipe_step {
	enum recipe_kind kind;
	unsigned line;   /* 1-based line of the instruction's first line */
	char *text;      /* the instruction as written, continuations joined, before expansion:
			  * "RUN apt-get install -y python3" (for messages and the layer key) */
	/* FROM: argv[0] the image ("scratch", "debian:bookworm", "oci-archive:/x.tar", a
	 *       template name); "AS name" is refused.
	 * RUN, START, READY: the command as an argv; the shell form is
	 *       {"/bin/sh", "-c", "<text>"}, the exec form the JSON array as it is.
	 * COPY: argv = sources then the destination (>= 2 entries, expanded); chown/chmod below.
	 * ENV:  argv = "K=V" entries (expanded, quotes removed).
	 * ARG:  argv[0] = "NAME" or "NAME=default" (expanded).
	 * WORKDIR: argv[0] the directory, made absolute against the previous WORKDIR ("/" first)
	 *       and normalised (no "." or ".." components, no trailing slash).
	 * USER: argv[0] as written after expansion ("root", "1000", "user:user"). */
	char **argv;     /* NULL-terminated */
	size_t argc;
	char *chown;     /* COPY --chown value, or NULL */
	char *chmod;     /* COPY --chmod value (octal, checked <= 07777), or NULL */
	bool add;        /* COPY written as ADD */
};

struct recipe {
	struct recipe_step *steps;
	size_t n_steps;
	/* The build arguments that the recipe declared with ARG and that were given (or
	 * defaulted), "K=V", in declaration order: the environment of RUN steps besides ENV. */
	char **build_env;
	size_t n_build_env;
};

/* Parses @len bytes of @text (need not be NUL-terminated). @build_args (NULL-terminated
 * "K=V", may be NULL) override ARG defaults; an argument the recipe never declares is an
 * error, as in `docker build`. The first instruction other than ARG must be FROM, and there
 * is exactly one FROM. Returns 0, or -EINVAL (-E2BIG for the limits above) with @err naming
 * the line. */
int recipe_parse(const char *text, size_t len, const char *const *build_args,
		 struct recipe **ret, struct cordon_err *err);

struct recipe *recipe_free(struct recipe *r);

/* "FROM", "RUN", ... */
const char *recipe_kind_name(enum recipe_kind k);
