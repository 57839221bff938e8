/* UTF-8 validation for bytes from inside a sandbox, which JSON strings cannot carry as
 * they are. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at @p (@left bytes left): 1..4; 0 when the sequence is
 * valid so far but cut short by the end; -1 when it is invalid (overlong forms, surrogates
 * and code points above U+10FFFF included). */
int utf8_seq(const uint8_t *p, size_t left);

/* @in as valid UTF-8 into @out (room for 3 * @n bytes): each invalid byte, and each NUL
 * unless @nul_ok, becomes U+FFFD. With @ret_cut, a sequence cut short by the end is left
 * out and its length stored there (the caller carries it to the next chunk); without, its
 * bytes are invalid. Returns the bytes written. */
size_t utf8_clean(const uint8_t *in, size_t n, char *out, bool nul_ok, size_t *ret_cut);
