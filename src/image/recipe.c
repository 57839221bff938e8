/* The recipe parser: text -> instructions (lines, comments, continuations) -> words (quotes,
 * escapes and variable expansion, as Docker's shell lexer does them) -> typed steps.
 *
 * Everything here reads attacker-shaped text, so every growth has a bound: the text
 * (RECIPE_MAX_BYTES), the steps, the words of one instruction, the variables in scope, the
 * nesting of ${X:-${Y:-...}} (recursion), and the bytes that variable references add (without
 * that last one, `ENV A=$A$A` repeated doubles the memory at each step). */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "basic/buf.h"
#include "basic/cleanup.h"
#include "basic/parse.h"
#include "image/recipe.h"

#define MAX_NESTING 32u /* of ${X:-word} inside word */

/* A length clipped for "%.*s" in messages. */
#define CLIP(n) ((int)((n) > 64 ? 64 : (n)))

struct strv {
	char **v; /* NULL-terminated once anything was pushed */
	size_t n, cap;
};

struct var {
	char *name;
	char *value; /* NULL: declared by ARG, no value */
	bool env;
};

struct parser {
	struct recipe *r;
	const char *const *build_args;
	struct cordon_err *err;
	bool err_set;
	unsigned line; /* first line of the instruction being parsed */
	bool seen_from;
	const char *workdir; /* the last WORKDIR step's argv[0], or "/" */
	size_t steps_cap;
	size_t expanded; /* bytes added by variable references, all steps */
	unsigned depth;	 /* of ${X:-word} being lexed */
	struct var vars[RECIPE_MAX_VARS];
	size_t n_vars;
};

struct instr {
	const char *name;
	enum recipe_kind kind;
	bool add;
	int (*parse)(struct parser *p, struct recipe_step *st, const char *args);
};

/* Where lexing a word stops: at unquoted whitespace, at the end only, or at the '}' that
 * closes ${X:-word}. */
enum lex_stop { STOP_WORD, STOP_END, STOP_BRACE };

static void strv_done(struct strv *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i]);
	free(l->v);
}

/* Takes @s, also on failure (NULL @s is an allocation that failed). */
static int strv_push(struct strv *l, char *s)
{
	if (!s)
		return -ENOMEM;
	if (l->n >= RECIPE_MAX_ARGS) {
		free(s);
		return -E2BIG;
	}
	if (l->n + 2 > l->cap) {
		size_t cap = l->cap ? l->cap * 2 : 8;
		char **v = realloc(l->v, cap * sizeof(*v));
		if (!v) {
			free(s);
			return -ENOMEM;
		}
		l->v = v;
		l->cap = cap;
	}
	l->v[l->n++] = s;
	l->v[l->n] = NULL;
	return 0;
}

static void strv_move(struct strv *l, char ***ret_v, size_t *ret_n)
{
	*ret_v = TAKE_PTR(l->v);
	*ret_n = l->n;
	l->n = l->cap = 0;
}

static bool is_space(char c)
{
	return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f';
}

static bool is_name_start(char c)
{
	return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
}

static bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }

static const char *skip_space(const char *s)
{
	while (is_space(*s))
		s++;
	return s;
}

/* Sets the error as "line N: ..." (once: the first, most precise message wins). */
_printf_(3, 4) static int perr(struct parser *p, int code, const char *fmt, ...)
{
	char msg[sizeof(p->err->msg)];
	va_list ap;

	if (p->err_set)
		return code;
	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);
	p->err_set = true;
	if (p->line)
		return cordon_err_setf(p->err, code, "line %u: %s", p->line, msg);
	return cordon_err_setf(p->err, code, "%s", msg);
}

/* ---- variables ---- */

static struct var *var_find(struct parser *p, const char *name, size_t n, bool env)
{
	for (size_t i = 0; i < p->n_vars; i++)
		if (p->vars[i].env == env && strlen(p->vars[i].name) == n &&
		    memcmp(p->vars[i].name, name, n) == 0)
			return &p->vars[i];
	return NULL;
}

/* ENV wins over ARG of the same name, as in Docker. NULL: unknown or unset. */
static const char *var_value(struct parser *p, const char *name, size_t n)
{
	struct var *v = var_find(p, name, n, true);
	if (!v || !v->value)
		v = var_find(p, name, n, false);
	return v ? v->value : NULL;
}

/* Takes @value (may be NULL: an ARG without a value keeps what it had). */
static int var_set(struct parser *p, const char *name, size_t n, char *value, bool env)
{
	_cleanup_free_ char *val = value;
	struct var *v = var_find(p, name, n, env);

	if (!v) {
		if (p->n_vars >= RECIPE_MAX_VARS)
			return perr(p, -E2BIG, "more than %u variables", RECIPE_MAX_VARS);
		char *copy = strndup(name, n);
		if (!copy)
			return -ENOMEM;
		v = &p->vars[p->n_vars++];
		*v = (struct var){.name = copy, .env = env};
	}
	if (val) {
		free(v->value);
		v->value = TAKE_PTR(val);
	}
	return 0;
}

static void vars_done(struct parser *p)
{
	for (size_t i = 0; i < p->n_vars; i++) {
		free(p->vars[i].name);
		free(p->vars[i].value);
	}
	p->n_vars = 0;
}

/* ---- lexing: quotes, escapes, $VAR ---- */

static int lex_until(struct parser *p, const char **s, enum lex_stop stop, struct buf *out);

static int add_value(struct parser *p, struct buf *out, const char *v)
{
	size_t n = v ? strlen(v) : 0;
	if (n > RECIPE_MAX_BYTES - p->expanded)
		return perr(p, -E2BIG, "variables expand to more than %u bytes", RECIPE_MAX_BYTES);
	p->expanded += n;
	return buf_add(out, v ? v : "", n);
}

/* ${NAME:-word} and ${NAME:+word}; *s is after the ':'. */
static int lex_modifier(struct parser *p, const char **s, const char *name, size_t n,
			struct buf *out)
{
	_cleanup_(buf_done) struct buf word = {};
	char op = **s;
	int r;

	if (op == '\0')
		return perr(p, -EINVAL, "unterminated ${");
	if (op != '-' && op != '+')
		return perr(p, -EINVAL,
			    "bad substitution ${%.*s:%c...} (only :- and :+ are supported)",
			    CLIP(n), name, op);
	if (p->depth >= MAX_NESTING)
		return perr(p, -EINVAL, "${...} nested more than %u deep", MAX_NESTING);
	(*s)++;
	p->depth++;
	r = lex_until(p, s, STOP_BRACE, &word);
	p->depth--;
	if (r < 0)
		return r;
	const char *v = var_value(p, name, n);
	bool set = v && *v;
	if (op == '-')
		return set ? add_value(p, out, v) : buf_add(out, word.p ? word.p : "", word.len);
	return set ? buf_add(out, word.p ? word.p : "", word.len) : 0;
}

/* ${...}; *s is after the '{'. */
static int lex_brace(struct parser *p, const char **s, struct buf *out)
{
	const char *name = *s;
	size_t n = 0;

	while (is_name_char(name[n]))
		n++;
	*s += n;
	if (**s == '\0')
		return perr(p, -EINVAL, "unterminated ${");
	if (n == 0)
		return perr(p, -EINVAL, "bad substitution: ${ needs a variable name");
	if (**s == '}') {
		(*s)++;
		return add_value(p, out, var_value(p, name, n));
	}
	if (**s != ':')
		return perr(p, -EINVAL,
			    "bad substitution ${%.*s%c...} (only :- and :+ are supported)", CLIP(n),
			    name, **s);
	(*s)++;
	return lex_modifier(p, s, name, n, out);
}

/* $NAME or ${...}; *s is at the '$'. A '$' not followed by a name is literal. */
static int lex_dollar(struct parser *p, const char **s, struct buf *out)
{
	const char *name = ++(*s);
	size_t n = 0;

	if (**s == '{') {
		(*s)++;
		return lex_brace(p, s, out);
	}
	if (!is_name_start(**s))
		return buf_addc(out, '$');
	while (is_name_char(name[n]))
		n++;
	*s += n;
	return add_value(p, out, var_value(p, name, n));
}

/* The inside of "..." (with @json, a whole JSON string, no closing quote): \" \\ \$ are
 * escapes, any other backslash is kept, $ expands. */
static int lex_dquoted(struct parser *p, const char **s, bool json, struct buf *out)
{
	for (;;) {
		char c = **s;
		int r;

		if (c == '\0')
			return json ? 0 : perr(p, -EINVAL, "unterminated double quote");
		if (c == '"' && !json) {
			(*s)++;
			return 0;
		}
		if (c == '$') {
			r = lex_dollar(p, s, out);
		} else if (c == '\\' && ((*s)[1] == '"' || (*s)[1] == '\\' || (*s)[1] == '$')) {
			r = buf_addc(out, (*s)[1]);
			*s += 2;
		} else {
			r = buf_addc(out, c);
			(*s)++;
		}
		if (r < 0)
			return r;
	}
}

static int lex_squoted(struct parser *p, const char **s, struct buf *out)
{
	const char *end = strchr(*s, '\'');

	if (!end)
		return perr(p, -EINVAL, "unterminated single quote");
	int r = buf_add(out, *s, end - *s);
	*s = end + 1;
	return r;
}

static int lex_char(struct parser *p, const char **s, struct buf *out)
{
	char c = *(*s)++;

	switch (c) {
	case '\'':
		return lex_squoted(p, s, out);
	case '"':
		return lex_dquoted(p, s, false, out);
	case '$':
		(*s)--;
		return lex_dollar(p, s, out);
	case '\\':
		/* Outside quotes a backslash escapes any character; a last one is dropped. */
		if (**s == '\0')
			return 0;
		return buf_addc(out, *(*s)++);
	default:
		return buf_addc(out, c);
	}
}

/* Appends to @out the text from *s up to @stop, quotes removed and variables expanded; *s is
 * left at the stop (after it for STOP_BRACE). */
static int lex_until(struct parser *p, const char **s, enum lex_stop stop, struct buf *out)
{
	for (;;) {
		char c = **s;

		if (c == '\0')
			return stop == STOP_BRACE ? perr(p, -EINVAL, "unterminated ${") : 0;
		if (stop == STOP_WORD && is_space(c))
			return 0;
		if (stop == STOP_BRACE && c == '}') {
			(*s)++;
			return 0;
		}
		int r = lex_char(p, s, out);
		if (r < 0)
			return r;
	}
}

/* One word (expanded) as a new string in *ret; *s is left after it. */
static int lex_word(struct parser *p, const char **s, enum lex_stop stop, char **ret)
{
	_cleanup_(buf_done) struct buf b = {};
	int r = lex_until(p, s, stop, &b);

	if (r < 0)
		return r;
	*ret = buf_take(&b);
	return *ret ? 0 : -ENOMEM;
}

static int split_words(struct parser *p, const char *s, struct strv *l)
{
	for (s = skip_space(s); *s; s = skip_space(s)) {
		char *w;
		int r = lex_word(p, &s, STOP_WORD, &w);
		if (r < 0)
			return r;
		r = strv_push(l, w);
		if (r < 0)
			return r;
	}
	return 0;
}

/* 1: @s is a JSON array of strings, pushed to @l (expanded as in double quotes with @expand);
 * 0: it is not (the shell form then, as in Docker). */
static int json_words(struct parser *p, const char *s, bool expand, struct strv *l)
{
	_cleanup_(json_decrefp) json_t *a = NULL;
	json_error_t jerr = {};
	size_t i;

	if (*s != '[')
		return 0;
	/* jansson leaves the error empty (code included) when some of its allocations fail. */
	a = json_loads(s, 0, &jerr);
	if (!a)
		return !jerr.text[0] || json_error_code(&jerr) == json_error_out_of_memory ? -ENOMEM
											   : 0;
	if (!json_is_array(a))
		return 0;
	for (i = 0; i < json_array_size(a); i++)
		if (!json_is_string(json_array_get(a, i)))
			return 0;
	for (i = 0; i < json_array_size(a); i++) {
		const char *str = json_string_value(json_array_get(a, i));
		_cleanup_(buf_done) struct buf b = {};
		int r = expand ? lex_dquoted(p, &str, true, &b) : buf_add(&b, str, strlen(str));
		if (r < 0)
			return r;
		r = strv_push(l, buf_take(&b));
		if (r < 0)
			return r;
	}
	return 1;
}

/* ---- instructions ---- */

static int parse_from(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	int r = split_words(p, args, &l);

	if (r < 0)
		return r;
	if (l.n > 1)
		return perr(p, -EINVAL,
			    "FROM takes one image: multi-stage builds are not supported");
	if (l.n == 0 || !l.v[0][0])
		return perr(p, -EINVAL, "FROM names no image");
	strv_move(&l, &st->argv, &st->argc);
	return 0;
}

/* RUN, START, READY: not expanded (the shell does that, from the environment). */
static int parse_command(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	int r = json_words(p, args, false, &l);

	if (r < 0)
		return r;
	if (r == 0) {
		if ((r = strv_push(&l, strdup("/bin/sh"))) < 0 ||
		    (r = strv_push(&l, strdup("-c"))) < 0 || (r = strv_push(&l, strdup(args))) < 0)
			return r;
	} else if (l.n == 0) {
		return perr(p, -EINVAL, "%s []: an empty command", recipe_kind_name(st->kind));
	}
	strv_move(&l, &st->argv, &st->argc);
	return 0;
}

static int check_chmod(struct parser *p, const char *mode)
{
	unsigned long v = 0;
	const char *c = mode;

	for (; *c >= '0' && *c <= '7' && v <= 07777; c++)
		v = v * 8 + (unsigned long)(*c - '0');
	if (!*mode || *c || v > 07777)
		return perr(p, -EINVAL, "--chmod=%.64s: not an octal mode up to 7777", mode);
	return 0;
}

/* Takes @value. */
static int copy_flag(struct parser *p, struct recipe_step *st, char *value)
{
	static const struct {
		const char *prefix;
		size_t offset;
	} flags[] = {
	    {"--chown=", offsetof(struct recipe_step, chown)},
	    {"--chmod=", offsetof(struct recipe_step, chmod)},
	};
	_cleanup_free_ char *word = value;
	const char *kw = st->add ? "ADD" : "COPY";

	for (size_t i = 0; i < ELEMENTSOF(flags); i++) {
		size_t n = strlen(flags[i].prefix);
		if (strncmp(word, flags[i].prefix, n - 1) != 0 ||
		    (word[n - 1] && word[n - 1] != '='))
			continue;
		if (!word[n - 1] || !word[n])
			return perr(p, -EINVAL, "%s %.*s needs a value (%sVALUE)", kw, (int)n - 1,
				    word, flags[i].prefix);
		char **slot = (char **)((char *)st + flags[i].offset);
		if (*slot)
			return perr(p, -EINVAL, "%s %.*s given twice", kw, (int)n - 1, word);
		if (i == 1 && check_chmod(p, word + n) < 0)
			return -EINVAL;
		*slot = strdup(word + n);
		return *slot ? 0 : -ENOMEM;
	}
	size_t n = strcspn(word, "=");
	return perr(p, -EINVAL, "%s %.*s is not supported (supported: --chown=, --chmod=)", kw,
		    CLIP(n), word);
}

static int copy_check(struct parser *p, struct recipe_step *st, const struct strv *l)
{
	const char *kw = st->add ? "ADD" : "COPY";

	if (l->n < 2)
		return perr(p, -EINVAL, "%s needs at least one source and a destination", kw);
	for (size_t i = 0; i < l->n; i++) {
		if (!l->v[i][0])
			return perr(p, -EINVAL, "%s: an empty path", kw);
		if (st->add && i + 1 < l->n && strstr(l->v[i], "://"))
			return perr(p, -EINVAL, "ADD %.64s: remote URLs are not supported",
				    l->v[i]);
	}
	return 0;
}

static int parse_copy(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	const char *s = skip_space(args);
	int r;

	while (s[0] == '-' && s[1] == '-') {
		char *w;
		if ((r = lex_word(p, &s, STOP_WORD, &w)) < 0 || (r = copy_flag(p, st, w)) < 0)
			return r;
		s = skip_space(s);
	}
	r = json_words(p, s, true, &l);
	if (r == 0)
		r = split_words(p, s, &l);
	if (r < 0 || (r = copy_check(p, st, &l)) < 0)
		return r;
	strv_move(&l, &st->argv, &st->argc);
	return 0;
}

/* The name before '=' (or the end of the word) at *s; *s is left at the '=' or after the
 * word. */
static int lex_name(struct parser *p, const char **s, const char *kw, size_t *ret_n)
{
	const char *w = *s;
	size_t n = 0;

	while (w[n] && w[n] != '=' && !is_space(w[n]))
		n++;
	*s += n;
	if (!env_name_valid(w, n))
		return perr(p, -EINVAL, "%s: '%.*s' is not a valid variable name", kw, CLIP(n), w);
	*ret_n = n;
	return 0;
}

/* "NAME=" then the value, into @l as "NAME=VALUE". *s is at the name. */
static int lex_assignment(struct parser *p, const char **s, const char *kw, enum lex_stop stop,
			  struct strv *l)
{
	_cleanup_(buf_done) struct buf b = {};
	const char *name = *s;
	size_t n;
	int r = lex_name(p, s, kw, &n);

	if (r < 0)
		return r;
	if ((r = buf_add(&b, name, n)) < 0 || (r = buf_addc(&b, '=')) < 0)
		return r;
	if (**s == '=')
		(*s)++;
	else
		*s = skip_space(*s);
	if ((r = lex_until(p, s, stop, &b)) < 0)
		return r;
	return strv_push(l, buf_take(&b));
}

/* ENV K=V [K2=V2 ...], or the old ENV K rest-of-line. All values are expanded in the scope
 * before the instruction (`ENV A=1 B=$A` sees the old A), as in Docker. */
static int parse_env(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	const char *s = args;
	size_t n = strcspn(s, "= \t\r\v\f");
	int r;

	if (s[n] != '=') {
		if (!*skip_space(s + n))
			return perr(p, -EINVAL, "ENV %.*s needs a value (ENV K=V or ENV K V)",
				    CLIP(n), s);
		r = lex_assignment(p, &s, "ENV", STOP_END, &l);
	} else {
		for (r = 0; r >= 0 && *s; s = skip_space(s)) {
			n = strcspn(s, "= \t\r\v\f");
			if (s[n] != '=')
				return perr(p, -EINVAL,
					    "ENV: no '=' in '%.*s' (ENV K=V [K2=V2 ...])", CLIP(n),
					    s);
			r = lex_assignment(p, &s, "ENV", STOP_WORD, &l);
		}
	}
	if (r < 0)
		return r;
	for (size_t i = 0; i < l.n; i++) {
		const char *eq = strchr(l.v[i], '=');
		char *value = strdup(eq + 1);
		if (!value)
			return -ENOMEM;
		if ((r = var_set(p, l.v[i], eq - l.v[i], value, true)) < 0)
			return r;
	}
	strv_move(&l, &st->argv, &st->argc);
	return 0;
}

/* The value of build argument @name, or NULL. The last one given wins. */
static const char *build_arg(struct parser *p, const char *name, size_t n)
{
	const char *v = NULL;

	for (const char *const *a = p->build_args; a && *a; a++)
		if (strncmp(*a, name, n) == 0 && (*a)[n] == '=')
			v = *a + n + 1;
	return v;
}

/* ARG NAME[=DEFAULT]: a given build argument beats the default; no default and none given
 * leaves it declared and unset (or as an earlier ARG of the name set it). */
static int parse_arg(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	_cleanup_free_ char *value = NULL;
	const char *s = args;
	size_t n;
	int r = lex_name(p, &s, "ARG", &n);

	if (r < 0)
		return r;
	if (*s == '=') {
		s = args;
		r = lex_assignment(p, &s, "ARG", STOP_WORD, &l);
	} else {
		r = strv_push(&l, strndup(args, n));
	}
	if (r < 0)
		return r;
	if (*skip_space(s))
		return perr(p, -EINVAL, "ARG takes one NAME[=DEFAULT]");
	const char *given = build_arg(p, args, n), *eq = strchr(l.v[0], '=');
	if (given || eq) {
		value = strdup(given ? given : eq + 1);
		if (!value)
			return -ENOMEM;
	}
	if ((r = var_set(p, args, n, TAKE_PTR(value), false)) < 0)
		return r;
	strv_move(&l, &st->argv, &st->argc);
	return 0;
}

/* Makes @path (absolute) canonical in place: no empty, "." or ".." components, no trailing
 * slash; ".." at the root stays at the root. */
static void normalize_path(char *path)
{
	char *in = path, *out = path;

	while (*in) {
		while (*in == '/')
			in++;
		size_t n = strcspn(in, "/");
		if (n == 0 || (n == 1 && in[0] == '.')) {
			in += n;
			continue;
		}
		if (n == 2 && in[0] == '.' && in[1] == '.') {
			while (out > path && *--out != '/')
				;
			in += n;
			continue;
		}
		*out++ = '/';
		memmove(out, in, n);
		out += n;
		in += n;
	}
	if (out == path)
		*out++ = '/';
	*out = '\0';
}

static int parse_workdir(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	_cleanup_(buf_done) struct buf b = {};
	_cleanup_free_ char *dir = NULL;
	const char *s = args;
	int r;

	if ((r = lex_word(p, &s, STOP_END, &dir)) < 0)
		return r;
	if (!dir[0])
		return perr(p, -EINVAL, "WORKDIR names no directory");
	if (dir[0] != '/' && (r = buf_add(&b, p->workdir, strlen(p->workdir))) < 0)
		return r;
	if ((r = buf_addc(&b, '/')) < 0 || (r = buf_add(&b, dir, strlen(dir))) < 0)
		return r;
	normalize_path(b.p);
	if ((r = strv_push(&l, buf_take(&b))) < 0)
		return r;
	strv_move(&l, &st->argv, &st->argc);
	p->workdir = st->argv[0];
	return 0;
}

static int parse_user(struct parser *p, struct recipe_step *st, const char *args)
{
	_cleanup_(strv_done) struct strv l = {};
	int r = split_words(p, args, &l);

	if (r < 0)
		return r;
	if (l.n != 1 || !l.v[0][0])
		return perr(p, -EINVAL, "USER takes one word: NAME|UID[:GROUP|GID]");
	strv_move(&l, &st->argv, &st->argc);
	return 0;
}

static const struct instr instrs[] = {
    {"FROM", RECIPE_FROM, false, parse_from},
    {"RUN", RECIPE_RUN, false, parse_command},
    {"COPY", RECIPE_COPY, false, parse_copy},
    {"ADD", RECIPE_COPY, true, parse_copy},
    {"ENV", RECIPE_ENV, false, parse_env},
    {"ARG", RECIPE_ARG, false, parse_arg},
    {"WORKDIR", RECIPE_WORKDIR, false, parse_workdir},
    {"USER", RECIPE_USER, false, parse_user},
    {"START", RECIPE_START, false, parse_command},
    {"READY", RECIPE_READY, false, parse_command},
};

static const char *const kind_names[] = {
    [RECIPE_FROM] = "FROM", [RECIPE_RUN] = "RUN",     [RECIPE_COPY] = "COPY",
    [RECIPE_ENV] = "ENV",   [RECIPE_ARG] = "ARG",     [RECIPE_WORKDIR] = "WORKDIR",
    [RECIPE_USER] = "USER", [RECIPE_START] = "START", [RECIPE_READY] = "READY",
};

const char *recipe_kind_name(enum recipe_kind k)
{
	return (unsigned)k < ELEMENTSOF(kind_names) ? kind_names[k] : NULL;
}

static int unsupported(struct parser *p, const char *kw, size_t n)
{
	char list[128] = "";

	for (size_t i = 0; i < ELEMENTSOF(instrs); i++)
		snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%s", i ? ", " : "",
			 instrs[i].name);
	return perr(p, -EINVAL, "%.*s is not supported (supported: %s)", CLIP(n), kw, list);
}

static const struct instr *instr_find(const char *kw, size_t n)
{
	for (size_t i = 0; i < ELEMENTSOF(instrs); i++)
		if (strlen(instrs[i].name) == n && strncasecmp(instrs[i].name, kw, n) == 0)
			return &instrs[i];
	return NULL;
}

/* A new zeroed step at the end of the recipe, or NULL (out of memory). */
static struct recipe_step *step_new(struct parser *p)
{
	struct recipe *r = p->r;

	if (r->n_steps == p->steps_cap) {
		size_t cap = p->steps_cap ? p->steps_cap * 2 : 8;
		struct recipe_step *s = realloc(r->steps, cap * sizeof(*s));
		if (!s)
			return NULL;
		r->steps = s;
		p->steps_cap = cap;
	}
	r->steps[r->n_steps] = (struct recipe_step){};
	return &r->steps[r->n_steps++];
}

static int check_order(struct parser *p, const struct instr *in)
{
	if (in->kind == RECIPE_FROM && p->seen_from)
		return perr(p, -EINVAL, "a second FROM: multi-stage builds are not supported");
	if (in->kind != RECIPE_FROM && in->kind != RECIPE_ARG && !p->seen_from)
		return perr(p, -EINVAL, "%s before FROM (only ARG may come before FROM)", in->name);
	return 0;
}

/* One instruction, continuations joined and trimmed. */
static int parse_instruction(struct parser *p, const char *text)
{
	size_t n = strcspn(text, " \t\r\v\f");
	const struct instr *in = instr_find(text, n);
	const char *args = skip_space(text + n);
	struct recipe_step *st;
	int r;

	if (!in)
		return unsupported(p, text, n);
	if ((r = check_order(p, in)) < 0)
		return r;
	if (!*args)
		return perr(p, -EINVAL, "%s needs an argument", in->name);
	if (p->r->n_steps >= RECIPE_MAX_STEPS)
		return perr(p, -E2BIG, "more than %u instructions", RECIPE_MAX_STEPS);
	if (!(st = step_new(p)))
		return -ENOMEM;
	st->kind = in->kind;
	st->line = p->line;
	st->add = in->add;
	st->text = strdup(text);
	if (!st->text)
		return -ENOMEM;
	if ((r = in->parse(p, st, args)) < 0)
		return r;
	p->seen_from |= in->kind == RECIPE_FROM;
	return 0;
}

/* ---- lines ---- */

struct reader {
	const char *text, *end;
	unsigned line; /* of the last line read */
};

/* The next line without its "\n" (and "\r"), trimmed: [*ret_b, *ret_e). false at the end. */
static bool next_line(struct reader *rd, const char **ret_b, const char **ret_e)
{
	if (rd->text >= rd->end)
		return false;
	const char *b = rd->text, *nl = memchr(b, '\n', rd->end - b), *e = nl ? nl : rd->end;
	rd->text = nl ? nl + 1 : rd->end;
	rd->line++;
	while (b < e && is_space(*b))
		b++;
	while (e > b && is_space(e[-1]))
		e--;
	*ret_b = b;
	*ret_e = e;
	return true;
}

/* The next instruction into @out (empty at the end), its first line in *ret_line. Comment and
 * blank lines are skipped, inside continuations too; a continuation's "\\\n" and the
 * whitespace around it become one space. */
static int next_instruction(struct reader *rd, struct buf *out, unsigned *ret_line)
{
	const char *b, *e;

	out->len = 0;
	while (next_line(rd, &b, &e)) {
		if (b == e || *b == '#')
			continue;
		bool more = e[-1] == '\\';
		if (more)
			for (e--; e > b && is_space(e[-1]);)
				e--;
		if (out->len == 0)
			*ret_line = rd->line;
		int r = (out->len && b < e) ? buf_addc(out, ' ') : 0;
		if (r < 0 || (r = buf_add(out, b, e - b)) < 0)
			return r;
		if (!more && out->len)
			return 0;
	}
	return 0;
}

/* ---- the recipe ---- */

static void parser_done(struct parser *p)
{
	vars_done(p);
	recipe_free(p->r);
}

static int check_build_args(struct parser *p, bool declared)
{
	for (const char *const *a = p->build_args; a && *a; a++) {
		size_t n = strcspn(*a, "=");
		if (!declared && (*a)[n] != '=')
			return perr(p, -EINVAL, "build argument '%.64s' is not NAME=VALUE", *a);
		if (declared && !var_find(p, *a, n, false))
			return perr(p, -EINVAL, "build argument '%.*s' is not declared by an ARG",
				    CLIP(n), *a);
	}
	return 0;
}

static int make_build_env(struct parser *p)
{
	_cleanup_(strv_done) struct strv l = {};

	for (size_t i = 0; i < p->n_vars; i++) {
		char *kv;
		if (p->vars[i].env || !p->vars[i].value)
			continue;
		if (asprintf(&kv, "%s=%s", p->vars[i].name, p->vars[i].value) < 0)
			return -ENOMEM;
		int r = strv_push(&l, kv);
		if (r < 0)
			return r;
	}
	/* NULL-terminated even when empty, like every argv. */
	if (!l.v && !(l.v = calloc(1, sizeof(*l.v))))
		return -ENOMEM;
	strv_move(&l, &p->r->build_env, &p->r->n_build_env);
	return 0;
}

static int parse_text(struct parser *p, const char *text, size_t len)
{
	_cleanup_(buf_done) struct buf ins = {};
	struct reader rd = {.text = text, .end = text + len};
	int r;

	for (;;) {
		if ((r = next_instruction(&rd, &ins, &p->line)) < 0)
			return r;
		if (ins.len == 0)
			break;
		if ((r = parse_instruction(p, ins.p)) < 0)
			return r;
	}
	p->line = 0;
	if (!p->seen_from)
		return perr(p, -EINVAL, "no FROM instruction");
	return 0;
}

static int check_text(struct parser *p, const char *text, size_t len)
{
	if (len > RECIPE_MAX_BYTES)
		return perr(p, -E2BIG, "the recipe is larger than %u bytes", RECIPE_MAX_BYTES);
	const char *nul = memchr(text, '\0', len);
	if (!nul)
		return 0;
	p->line = 1;
	for (const char *c = text; c < nul; c++)
		p->line += *c == '\n';
	return perr(p, -EINVAL, "a NUL byte");
}

int recipe_parse(const char *text, size_t len, const char *const *build_args, struct recipe **ret,
		 struct cordon_err *err)
{
	_cleanup_(parser_done) struct parser p = {
	    .build_args = build_args, .err = err, .workdir = "/"};
	int r;

	if (!text)
		text = "", len = 0;
	if ((r = check_text(&p, text, len)) < 0 || (r = check_build_args(&p, false)) < 0)
		return r;
	p.r = calloc(1, sizeof(*p.r));
	if (!p.r)
		return perr(&p, -ENOMEM, "out of memory");
	r = parse_text(&p, text, len);
	if (r >= 0)
		r = check_build_args(&p, true);
	if (r >= 0)
		r = make_build_env(&p);
	/* Errors without a message of their own: the allocations, and strv_push()'s limit. */
	if (r == -E2BIG)
		return perr(&p, r, "more than %u words in one instruction", RECIPE_MAX_ARGS);
	if (r < 0)
		return perr(&p, r, "out of memory");
	*ret = TAKE_PTR(p.r);
	return 0;
}

struct recipe *recipe_free(struct recipe *r)
{
	if (!r)
		return NULL;
	for (size_t i = 0; i < r->n_steps; i++) {
		struct recipe_step *st = &r->steps[i];
		for (size_t j = 0; st->argv && j < st->argc; j++)
			free(st->argv[j]);
		free(st->argv);
		free(st->text);
		free(st->chown);
		free(st->chmod);
	}
	free(r->steps);
	for (size_t i = 0; i < r->n_build_env; i++)
		free(r->build_env[i]);
	free(r->build_env);
	free(r);
	return NULL;
}
