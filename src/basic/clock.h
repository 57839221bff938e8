/* Clocks in milliseconds, and the one timestamp format of the API and the audit log. */
#pragma once

#include <stdint.h>

/* CLOCK_REALTIME: for what is shown or stored (created_at, audit records). */
uint64_t now_ms(void);

/* CLOCK_MONOTONIC: for deadlines and durations, which a clock step must not move. */
uint64_t mono_ms(void);

/* @ms since the epoch as "2026-01-31T12:00:00.000Z" (UTC) into @buf; returns @buf. */
char *iso_time(uint64_t ms, char buf[40]);
