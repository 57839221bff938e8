/* UTF-8 validation for bytes from inside a sandbox, which JSON strings cannot carry as
 * they are. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Length of the valid UTF-8 sequence at @p (@left bytes left): 1..4; 0 when the sequence is
 * valid so far but cut short by the end; -1 when it is invalid (overlong forms, surrogates
 * and code points above U+10FFFF included). */
int utf8_seq(const uint8_t *p, size_t left);
