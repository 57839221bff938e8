/* tar streams (tar.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "basic/tar.h"

enum { ST_HEADER, ST_DATA, ST_EXT, ST_SKIP, ST_PAD, ST_END };
enum { EXT_LONG_NAME = 1, EXT_LONG_LINK, EXT_PAX };

/* The fields of a ustar header: offset and width. */
#define F_NAME	  0, 100
#define F_MODE	  100, 8
#define F_UID	  108, 8
#define F_GID	  116, 8
#define F_SIZE	  124, 12
#define F_MTIME	  136, 12
#define F_CHKSUM  148, 8
#define F_TYPE	  156
#define F_LINK	  157, 100
#define F_MAGIC	  257
#define F_PREFIX  345, 155

void tar_reader_init(struct tar_reader *r, uint64_t max_bytes, uint64_t max_entries)
{
	memset(r, 0, sizeof(*r));
	r->pax_size = -1;
	r->max_bytes = max_bytes;
	r->max_entries = max_entries;
}

static int refuse(struct tar_reader *r, int code, const char *why, const char *name)
{
	snprintf(r->why, sizeof(r->why), "%s%s%.100s%s", why, name ? " ('" : "", name ? name : "",
		 name ? "')" : "");
	return code;
}

/* A number field: octal (spaces and NULs end it), or GNU base-256 when its top bit is set. */
static int number(const uint8_t *b, size_t off, size_t w, uint64_t *ret)
{
	const uint8_t *p = b + off;
	uint64_t v = 0;
	if (p[0] & 0x80) {
		if (p[0] != 0x80 || w > 12)
			return -EBADMSG; /* negative, or over 64 bits */
		for (size_t i = 1; i < w; i++) {
			if (v >> 56)
				return -EBADMSG;
			v = v << 8 | p[i];
		}
		*ret = v;
		return 0;
	}
	size_t i = 0;
	while (i < w && p[i] == ' ')
		i++;
	for (; i < w && p[i] >= '0' && p[i] <= '7'; i++) {
		if (v >> 61)
			return -EBADMSG;
		v = v * 8 + (p[i] - '0');
	}
	for (; i < w; i++)
		if (p[i] != ' ' && p[i] != '\0')
			return -EBADMSG;
	*ret = v;
	return 0;
}

static bool checksum_ok(const uint8_t *b)
{
	uint64_t want;
	unsigned long sum = 0;
	if (number(b, F_CHKSUM, &want) < 0)
		return false;
	for (size_t i = 0; i < TAR_BLOCK; i++)
		sum += (i >= 148 && i < 156) ? ' ' : b[i];
	return sum == want;
}

static void field_str(const uint8_t *b, size_t off, size_t w, char *out, size_t size)
{
	size_t n = strnlen((const char *)b + off, w);
	n = n < size ? n : size - 1;
	memcpy(out, b + off, n);
	out[n] = '\0';
}

bool tar_name_safe(const char *name)
{
	if (!name[0] || name[0] == '/')
		return false;
	for (const char *c = name; *c;) {
		size_t n = strcspn(c, "/");
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		c += n + (c[n] == '/');
	}
	return true;
}

bool tar_link_safe(const char *name, const char *target)
{
	long depth = 0;
	if (!target[0] || target[0] == '/')
		return false;
	for (const char *c = name; (c = strchr(c, '/')); c++)
		depth++; /* the symlink's directory, below the root */
	for (const char *c = target; *c;) {
		size_t n = strcspn(c, "/");
		if (n == 2 && c[0] == '.' && c[1] == '.') {
			if (--depth < 0)
				return false;
		} else if (n && !(n == 1 && c[0] == '.')) {
			depth++;
		}
		c += n + (c[n] == '/');
	}
	return true;
}

bool tar_link_kept(const char *name, const char *target)
{
	return target[0] == '/' || tar_link_safe(name, target);
}

/* "./a/b/" -> "a/b"; "" for the root itself. */
static void normalise(char *name)
{
	char *p = name;
	while (p[0] == '.' && p[1] == '/')
		for (p += 2; *p == '/'; p++)
			;
	if (p != name)
		memmove(name, p, strlen(p) + 1);
	size_t n = strlen(name);
	while (n > 0 && name[n - 1] == '/')
		name[--n] = '\0';
	if (strcmp(name, ".") == 0)
		name[0] = '\0';
}

/* "len key=value\n" records: path, linkpath and size are taken, the rest ignored. */
static int parse_pax(struct tar_reader *r)
{
	char *p = r->ext, *end = r->ext + r->ext_len;
	while (p < end) {
		char *sp = memchr(p, ' ', (size_t)(end - p)), *rec_end;
		unsigned long len = strtoul(p, &rec_end, 10);
		if (!sp || rec_end != sp || len < 5 || len > (size_t)(end - p) || p[len - 1] != '\n')
			return refuse(r, -EBADMSG, "a malformed pax header", NULL);
		char *kv = sp + 1, *eq = memchr(kv, '=', (size_t)(p + len - 1 - kv));
		if (!eq)
			return refuse(r, -EBADMSG, "a malformed pax record", NULL);
		size_t klen = (size_t)(eq - kv), vlen = (size_t)(p + len - 1 - eq - 1);
		char *dst = klen == 4 && !memcmp(kv, "path", 4) ? r->long_name
			  : klen == 8 && !memcmp(kv, "linkpath", 8) ? r->long_link : NULL;
		if (dst) {
			if (vlen >= TAR_MAX_PATH || memchr(eq + 1, '\0', vlen))
				return refuse(r, -EBADMSG, "a pax name too long or with a NUL", NULL);
			memcpy(dst, eq + 1, vlen);
			dst[vlen] = '\0';
		} else if (klen == 4 && !memcmp(kv, "size", 4)) {
			char num[32];
			char *e;
			snprintf(num, sizeof(num), "%.*s", (int)(vlen < 31 ? vlen : 31), eq + 1);
			r->pax_size = strtoll(num, &e, 10);
			if (*e || r->pax_size < 0)
				return refuse(r, -EBADMSG, "a bad pax size", NULL);
		}
		p += len;
	}
	return 0;
}

static int end_ext(struct tar_reader *r)
{
	r->ext[r->ext_len] = '\0';
	if (r->ext_kind == EXT_PAX)
		return parse_pax(r);
	char *dst = r->ext_kind == EXT_LONG_NAME ? r->long_name : r->long_link;
	if (strlen(r->ext) >= TAR_MAX_PATH)
		return refuse(r, -EBADMSG, "a long name over 4096 bytes", NULL);
	strcpy(dst, r->ext);
	return 0;
}

/* Starts reading @size bytes of data (then its padding) in @state. */
static void data_next(struct tar_reader *r, int state, uint64_t size)
{
	r->left = size;
	r->pad = tar_padding(size);
	r->state = size ? state : (r->pad ? ST_PAD : ST_HEADER);
}

/* The entry of header @b: its name, link, type, checked. */
static int take_entry(struct tar_reader *r, const uint8_t *b, const struct tar_ops *ops, void *arg)
{
	struct tar_entry *e = &r->e;
	uint64_t v;
	char t = (char)b[F_TYPE];
	memset(e, 0, sizeof(*e));
	if (r->long_name[0]) {
		strcpy(e->name, r->long_name);
	} else {
		char prefix[160] = "", name[104];
		if (memcmp(b + F_MAGIC, "ustar\0", 6) == 0)
			field_str(b, F_PREFIX, prefix, sizeof(prefix));
		field_str(b, F_NAME, name, sizeof(name));
		snprintf(e->name, sizeof(e->name), "%s%s%s", prefix, prefix[0] ? "/" : "", name);
	}
	if (r->long_link[0])
		strcpy(e->link, r->long_link);
	else
		field_str(b, F_LINK, e->link, sizeof(e->link));
	r->long_name[0] = r->long_link[0] = '\0';
	if (number(b, F_SIZE, &e->size) < 0)
		return refuse(r, -EBADMSG, "a bad size", e->name);
	if (r->pax_size >= 0)
		e->size = (uint64_t)r->pax_size;
	r->pax_size = -1;
	e->mode = number(b, F_MODE, &v) == 0 ? (uint32_t)(v & 0777) : 0644;
	e->uid = number(b, F_UID, &v) == 0 && v < 65536 ? (uint32_t)v : 0;
	e->gid = number(b, F_GID, &v) == 0 && v < 65536 ? (uint32_t)v : 0;
	e->mtime = number(b, F_MTIME, &v) == 0 && v < INT64_MAX ? (int64_t)v : 0;
	static const struct {
		char flag;
		enum tar_type type;
	} types[] = {{'0', TAR_FILE}, {'\0', TAR_FILE}, {'7', TAR_FILE}, {'5', TAR_DIR},
		     {'2', TAR_SYMLINK}, {'1', TAR_HARDLINK}};
	size_t i = 0;
	while (i < sizeof(types) / sizeof(types[0]) && types[i].flag != t)
		i++;
	if (i == sizeof(types) / sizeof(types[0]))
		return refuse(r, -EPERM, "a device, fifo or other special entry", e->name);
	e->type = types[i].type;
	if (e->name[0] == '/')
		return refuse(r, -EPERM, "an absolute name", e->name);
	normalise(e->name);
	if (e->type != TAR_FILE)
		data_next(r, ST_SKIP, e->size); /* a dir or link has no data of its own */
	else
		data_next(r, ST_DATA, e->size);
	if (!e->name[0] && e->type == TAR_DIR)
		return 0; /* the root itself */
	if (!tar_name_safe(e->name))
		return refuse(r, -EPERM, "a name with '..', '.' or empty components", e->name);
	if (e->type == TAR_SYMLINK &&
	    !(r->abs_links ? tar_link_kept(e->name, e->link) : tar_link_safe(e->name, e->link)))
		return refuse(r, -EPERM, "a symlink out of the archive's root", e->name);
	if (e->type == TAR_HARDLINK) {
		normalise(e->link);
		if (!tar_name_safe(e->link))
			return refuse(r, -EPERM, "a hard link out of the archive's root", e->name);
	}
	if (++r->entries > r->max_entries)
		return refuse(r, -EFBIG, "too many entries", NULL);
	if (e->type == TAR_FILE && (r->bytes += e->size) > r->max_bytes)
		return refuse(r, -EFBIG, "more data than allowed", NULL);
	return ops && ops->entry ? ops->entry(e, arg) : 0;
}

static int header(struct tar_reader *r, const struct tar_ops *ops, void *arg)
{
	const uint8_t *b = r->block;
	static const uint8_t zero[TAR_BLOCK];
	uint64_t size;
	if (memcmp(b, zero, TAR_BLOCK) == 0) {
		if (++r->zero_blocks == 2)
			r->state = ST_END;
		return 0;
	}
	if (r->zero_blocks)
		return refuse(r, -EBADMSG, "data after an end-of-archive block", NULL);
	if (!checksum_ok(b))
		return refuse(r, -EBADMSG, "not a tar archive (bad header checksum)", NULL);
	char t = (char)b[F_TYPE];
	if (t == 'L' || t == 'K' || t == 'x' || t == 'g') {
		if (number(b, F_SIZE, &size) < 0 || size > TAR_MAX_PAX)
			return refuse(r, -EBADMSG, "an extended header too large", NULL);
		r->ext_kind = t == 'L' ? EXT_LONG_NAME : t == 'K' ? EXT_LONG_LINK : EXT_PAX;
		r->ext_len = 0;
		data_next(r, t == 'g' ? ST_SKIP : ST_EXT, size);
		if (r->state == ST_HEADER || r->state == ST_PAD)
			return t == 'g' ? 0 : end_ext(r);
		return 0;
	}
	return take_entry(r, b, ops, arg);
}

int tar_reader_feed(struct tar_reader *r, const uint8_t *p, size_t n, const struct tar_ops *ops,
		    void *arg)
{
	int k = 0;
	while (n > 0 && k >= 0) {
		size_t take;
		switch (r->state) {
		case ST_END:
			return 0; /* what follows the end (more zero blocks) is not read */
		case ST_HEADER:
			take = TAR_BLOCK - r->have < n ? TAR_BLOCK - r->have : n;
			memcpy(r->block + r->have, p, take);
			r->have += take;
			if (r->have == TAR_BLOCK) {
				r->have = 0;
				k = header(r, ops, arg);
			}
			break;
		case ST_PAD:
			take = r->pad < n ? (size_t)r->pad : n;
			if ((r->pad -= take) == 0)
				r->state = ST_HEADER;
			break;
		default: /* ST_DATA, ST_EXT, ST_SKIP */
			take = r->left < n ? (size_t)r->left : n;
			if (r->state == ST_DATA && ops && ops->data)
				k = ops->data(p, take, arg);
			if (r->state == ST_EXT) {
				memcpy(r->ext + r->ext_len, p, take);
				r->ext_len += take;
			}
			if ((r->left -= take) == 0) {
				int was = r->state;
				r->state = r->pad ? ST_PAD : ST_HEADER;
				if (was == ST_EXT && k >= 0)
					k = end_ext(r);
			}
			break;
		}
		p += take;
		n -= take;
	}
	return k < 0 ? k : 0;
}

int tar_reader_finish(struct tar_reader *r)
{
	if (r->state == ST_END || (r->state == ST_HEADER && r->have == 0 && !r->long_name[0] &&
				   !r->long_link[0] && r->pax_size < 0))
		return 0;
	return refuse(r, -EBADMSG, "the archive ends in the middle of an entry", NULL);
}

/* ---- writing ---- */

static void octal(uint8_t *b, size_t off, size_t w, uint64_t v)
{
	char tmp[24];
	if (w == 12 && v >= (1ULL << 33)) { /* GNU base-256 for sizes of 8 GiB and more */
		b[off] = 0x80;
		for (size_t i = w - 1; i > 0; i--, v >>= 8)
			b[off + i] = (uint8_t)v;
		return;
	}
	snprintf(tmp, sizeof(tmp), "%0*llo", (int)(w - 1), (unsigned long long)v);
	memcpy(b + off, tmp, w - 1);
	b[off + w - 1] = '\0';
}

static void one_header(uint8_t *b, const char *name, const char *link, char type, uint64_t size,
		       const struct tar_entry *e)
{
	memset(b, 0, TAR_BLOCK);
	memcpy(b, name, strnlen(name, 100));
	octal(b, F_MODE, e->mode & 0777);
	octal(b, F_UID, e->uid);
	octal(b, F_GID, e->gid);
	octal(b, F_SIZE, size);
	octal(b, F_MTIME, e->mtime > 0 ? (uint64_t)e->mtime : 0);
	b[F_TYPE] = (uint8_t)type;
	memcpy(b + 157, link, strnlen(link, 100));
	memcpy(b + F_MAGIC, "ustar  ", 8); /* GNU: its long names follow */
	memset(b + 148, ' ', 8);
	unsigned long sum = 0;
	for (size_t i = 0; i < TAR_BLOCK; i++)
		sum += b[i];
	char ck[8];
	snprintf(ck, sizeof(ck), "%06lo", sum & 0777777);
	memcpy(b + 148, ck, 7);
}

/* A GNU 'L' or 'K' record holding @s: its header and data blocks. */
static size_t long_record(uint8_t *out, char type, const char *s, const struct tar_entry *e)
{
	size_t len = strlen(s) + 1;
	one_header(out, "././@LongLink", "", type, len, e);
	memset(out + TAR_BLOCK, 0, len + tar_padding(len));
	memcpy(out + TAR_BLOCK, s, len);
	return TAR_BLOCK + len + tar_padding(len);
}

size_t tar_header(uint8_t *out, const struct tar_entry *e)
{
	static const char flags[] = {[TAR_FILE] = '0', [TAR_DIR] = '5', [TAR_SYMLINK] = '2',
				     [TAR_HARDLINK] = '1'};
	char name[TAR_MAX_PATH + 2];
	size_t off = 0;
	snprintf(name, sizeof(name), "%s%s", e->name, e->type == TAR_DIR ? "/" : "");
	if (strlen(name) > 100)
		off += long_record(out, 'L', name, e);
	if (strlen(e->link) > 100)
		off += long_record(out + off, 'K', e->link, e);
	one_header(out + off, name, e->link, flags[e->type], e->type == TAR_FILE ? e->size : 0, e);
	return off + TAR_BLOCK;
}
