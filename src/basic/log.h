/* Logging for binaries. Library code logs at debug at most; binaries log once, where an error
 * is handled. The level is checked before anything is formatted. */
#pragma once

#include "basic/cleanup.h"

enum log_level { LOG_ERR = 3, LOG_WARNING = 4, LOG_INFO = 6, LOG_DEBUG = 7 };

extern int log_max_level;
extern const char *log_prefix;

void log_internal(int level, const char *fmt, ...) _printf_(2, 3);

#define log_at(level, ...)                                                                         \
	do {                                                                                       \
		if ((level) <= log_max_level)                                                      \
			log_internal((level), __VA_ARGS__);                                        \
	} while (0)

#define log_error(...)   log_at(LOG_ERR, __VA_ARGS__)
#define log_warning(...) log_at(LOG_WARNING, __VA_ARGS__)
#define log_info(...)    log_at(LOG_INFO, __VA_ARGS__)
#define log_debug(...)   log_at(LOG_DEBUG, __VA_ARGS__)
