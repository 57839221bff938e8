/* A sandbox's secrets, as the controller gave them (ctl.c): the placeholder the sandbox holds,
 * the real value, the hosts it is for and where in a request it may be substituted. The value
 * lives in pages of its own, locked in memory (never swapped), left out of core dumps and
 * wiped before they are unmapped; it is never logged or reported. Also the search for a
 * placeholder where it must not be: a stream (the raw relay), a DNS name. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <errno.h>
#include <string.h>
#include <strings.h>

#include <event2/buffer.h>

#include "basic/cleanup.h"
#include "basic/secmem.h"
#include "net/egress/egress.h"

static const char *const in_names[] = {"header", "query", "body"};

int secret_in_from(const char *s)
{
	for (size_t i = 0; i < ELEMENTSOF(in_names); i++)
		if (strcmp(s, in_names[i]) == 0)
			return 1 << i;
	return -1;
}

static bool name_ok(const char *s)
{
	size_t n = strlen(s);
	if (n == 0 || n >= SECRET_NAME_MAX || isdigit((unsigned char)s[0]))
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '_')
			return false;
	return true;
}

/* Letters, digits, - and _: safe in a header, a query, a DNS label; long enough to be unique. */
static bool placeholder_ok(const char *s)
{
	size_t n = strlen(s);
	if (n < SECRET_PH_MIN || n >= SECRET_PH_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if (!isalnum((unsigned char)s[i]) && s[i] != '-' && s[i] != '_')
			return false;
	return true;
}

/* No byte that could end a header line or a request. */
static bool value_ok(const char *v, size_t n)
{
	if (n == 0 || n > SECRET_VALUE_MAX)
		return false;
	for (size_t i = 0; i < n; i++)
		if ((unsigned char)v[i] < 0x20 || v[i] == 0x7f)
			return false;
	return true;
}

int secret_init(struct egress_secret *sec, const char *name, const char *placeholder,
		const char *value, size_t value_len, struct cordon_err *err)
{
	*sec = (struct egress_secret){0};
	if (!name_ok(name))
		return cordon_err_setf(err, -EINVAL, "secrets: a name is letters, digits and _");
	if (!placeholder_ok(placeholder))
		return cordon_err_setf(err, -EINVAL, "secrets: %s: a placeholder is %d to %d letters, digits, - or _",
				       name, SECRET_PH_MIN, SECRET_PH_MAX - 1);
	if (!value_ok(value, value_len))
		return cordon_err_setf(err, -EINVAL, "secrets: %s: a value is 1 to %d bytes without control characters",
				       name, SECRET_VALUE_MAX);
	snprintf(sec->name, sizeof(sec->name), "%s", name);
	snprintf(sec->placeholder, sizeof(sec->placeholder), "%s", placeholder);
	sec->ph_len = strlen(placeholder);
	sec->value = secmem_new(SECRET_VALUE_MAX);
	if (!sec->value)
		return cordon_err_setf(err, -ENOMEM, "secrets: %s: cannot lock its memory", name);
	memcpy(sec->value, value, value_len);
	sec->value_len = value_len;
	return 0;
}

void secret_clear(struct egress_secret *sec)
{
	secmem_free(sec->value, SECRET_VALUE_MAX);
	*sec = (struct egress_secret){0};
}

void secrets_free(struct egress_secret *secs, size_t n)
{
	for (size_t i = 0; i < n; i++)
		secret_clear(&secs[i]);
	free(secs);
}

bool secret_for_host(const struct egress_secret *sec, const char *host)
{
	for (size_t i = 0; i < sec->n_hosts; i++)
		if (strcasecmp(sec->hosts[i], host) == 0)
			return true;
	return false;
}

bool sbx_has_secret_for(const struct sbx *s, const char *host)
{
	for (size_t i = 0; host[0] && i < s->n_secrets; i++)
		if (secret_for_host(&s->secrets[i], host))
			return true;
	return false;
}

const struct egress_secret *secret_in_bytes(const struct sbx *s, const uint8_t *p, size_t len)
{
	for (size_t i = 0; i < s->n_secrets; i++)
		if (memmem(p, len, s->secrets[i].placeholder, s->secrets[i].ph_len))
			return &s->secrets[i];
	return NULL;
}

const struct egress_secret *secret_in_name(const struct sbx *s, const char *name)
{
	for (size_t i = 0; i < s->n_secrets; i++) {
		const struct egress_secret *sec = &s->secrets[i];
		/* DNS names are case-insensitive, and resolvers flip case (0x20 encoding). */
		for (const char *p = name; strlen(p) >= sec->ph_len; p++)
			if (strncasecmp(p, sec->placeholder, sec->ph_len) == 0)
				return sec;
	}
	return NULL;
}

const struct egress_secret *secret_in_stream(const struct sbx *s, struct secret_tail *t,
					     struct evbuffer *buf)
{
	size_t len = evbuffer_get_length(buf);
	if (!s->n_secrets || !len)
		return NULL;
	/* A placeholder split between two reads: the end of the last one plus the start of
	 * this one. */
	uint8_t joint[2 * SECRET_PH_MAX];
	size_t head = len < SECRET_PH_MAX - 1 ? len : SECRET_PH_MAX - 1;
	memcpy(joint, t->b, t->n);
	evbuffer_copyout(buf, joint + t->n, head);
	const struct egress_secret *hit = secret_in_bytes(s, joint, t->n + head);
	for (size_t i = 0; !hit && i < s->n_secrets; i++)
		if (evbuffer_search(buf, s->secrets[i].placeholder, s->secrets[i].ph_len, NULL).pos >= 0)
			hit = &s->secrets[i];
	/* The new tail: the last SECRET_PH_MAX - 1 bytes of what has been seen. */
	size_t keep = SECRET_PH_MAX - 1;
	if (len >= keep) {
		struct evbuffer_ptr at;
		evbuffer_ptr_set(buf, &at, len - keep, EVBUFFER_PTR_SET);
		evbuffer_copyout_from(buf, &at, t->b, keep);
		t->n = keep;
	} else {
		size_t old = t->n + len > keep ? t->n + len - keep : 0;
		memmove(t->b, t->b + old, t->n - old);
		t->n -= old;
		evbuffer_copyout(buf, t->b + t->n, len);
		t->n += len;
	}
	return hit;
}
