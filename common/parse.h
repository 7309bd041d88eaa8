/* SPDX-License-Identifier: MIT */
/*
 * Strict number parsing for argv, environment and JSON-derived text: the whole string must be
 * one number in [min, max] (no sign for unsigned, no trailing junk, no overflow, finite for
 * doubles). Returns 0, or -EINVAL (not a number) / -ERANGE (outside [min, max]) with *ret
 * untouched. Never atoi/atof: "4294967297" must not become 1.
 */
#pragma once

#include <stdint.h>

int dsv4_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret);
int dsv4_parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret);
int dsv4_parse_int(const char *s, int min, int max, int *ret);
int dsv4_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *ret);
int dsv4_parse_double(const char *s, double min, double max, double *ret);
/* Benchmarks and tools: the number, or exit 64 naming `what` and the value. */
int dsv4_parse_int_or_exit(const char *what, const char *s, int min, int max);
double dsv4_parse_double_or_exit(const char *what, const char *s, double min, double max);

/*
 * argv helper: parse `s` as an option's value or print "PROG: --NAME: 'S' is not a number in
 * [MIN, MAX]" to stderr; returns 0 or a negative errno.
 */
int dsv4_parse_int_opt(const char *prog, const char *name, const char *s, int min, int max,
                       int *ret);
int dsv4_parse_u64_opt(const char *prog, const char *name, const char *s, uint64_t min,
                       uint64_t max, uint64_t *ret);
int dsv4_parse_double_opt(const char *prog, const char *name, const char *s, double min,
                          double max, double *ret);
