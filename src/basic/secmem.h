/* Memory for secret values: pages of their own, locked (never swapped), left out of core
 * dumps and wiped before they are unmapped. Used by cordon-egress (net/egress/secret.c) and
 * cordond (daemon/secrets.c), which hold the real values of sandboxes' secrets.
 *
 *     char *v = secmem_new(SECMEM_PAGE);     // NULL: no memory, or it cannot be locked
 *     memcpy(v, value, len);
 *     ...
 *     secmem_free(v, SECMEM_PAGE);           // wiped, unlocked, unmapped; NULL is fine
 *
 * secmem_free_wiped() is a free() that wipes first, for json_set_alloc_funcs(): a JSON
 * document that carried a value (a request body, a control line) leaves nothing behind. */
#pragma once

#include <stddef.h>

#define SECMEM_PAGE 4096

/* @size bytes, zeroed, locked and out of core dumps; NULL (errno set) if any step fails. */
void *secmem_new(size_t size);
void secmem_free(void *p, size_t size);
/* free(@p) after overwriting its malloc_usable_size() bytes. */
void secmem_free_wiped(void *p);
/* A key of exactly @len bytes from @path into @out, the file made first (0600, @len random
 * bytes, O_EXCL) when there is none. -EINVAL: the file is not @len bytes. */
int secmem_key_file(const char *path, void *out, size_t len);
