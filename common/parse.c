/* SPDX-License-Identifier: MIT */
/* Strict number parsing (parse.h). */
#include "parse.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int dsv4_parse_u64(const char *s, uint64_t min, uint64_t max, uint64_t *ret)
{
    if (!s || !isdigit((unsigned char)s[0]))
        return -EINVAL;     /* no sign, no leading space: strtoull would accept "-1" */
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

int dsv4_parse_i64(const char *s, int64_t min, int64_t max, int64_t *ret)
{
    if (!s || !(isdigit((unsigned char)s[0]) || ((s[0] == '-' || s[0] == '+') &&
                                                  isdigit((unsigned char)s[1]))))
        return -EINVAL;
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (*end)
        return -EINVAL;
    if (errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

int dsv4_parse_int(const char *s, int min, int max, int *ret)
{
    int64_t v;
    int r = dsv4_parse_i64(s, min, max, &v);
    if (r == 0)
        *ret = (int)v;
    return r;
}

int dsv4_parse_u32(const char *s, uint32_t min, uint32_t max, uint32_t *ret)
{
    uint64_t v;
    int r = dsv4_parse_u64(s, min, max, &v);
    if (r == 0)
        *ret = (uint32_t)v;
    return r;
}

int dsv4_parse_double(const char *s, double min, double max, double *ret)
{
    if (!s || !*s || isspace((unsigned char)s[0]))
        return -EINVAL;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (*end || end == s)
        return -EINVAL;
    if (!isfinite(v) || errno == ERANGE || v < min || v > max)
        return -ERANGE;
    *ret = v;
    return 0;
}

int dsv4_parse_int_opt(const char *prog, const char *name, const char *s, int min, int max,
                       int *ret)
{
    int r = dsv4_parse_int(s, min, max, ret);
    if (r < 0)
        fprintf(stderr, "%s: --%s: '%s' is not an integer in [%d, %d]\n", prog, name,
                s ? s : "", min, max);
    return r;
}

int dsv4_parse_u64_opt(const char *prog, const char *name, const char *s, uint64_t min,
                       uint64_t max, uint64_t *ret)
{
    int r = dsv4_parse_u64(s, min, max, ret);
    if (r < 0)
        fprintf(stderr, "%s: --%s: '%s' is not an integer in [%llu, %llu]\n", prog, name,
                s ? s : "", (unsigned long long)min, (unsigned long long)max);
    return r;
}

int dsv4_parse_double_opt(const char *prog, const char *name, const char *s, double min,
                          double max, double *ret)
{
    int r = dsv4_parse_double(s, min, max, ret);
    if (r < 0)
        fprintf(stderr, "%s: --%s: '%s' is not a number in [%g, %g]\n", prog, name, s ? s : "",
                min, max);
    return r;
}

int dsv4_parse_int_or_exit(const char *what, const char *s, int min, int max)
{
    int v = 0;
    if (dsv4_parse_int(s, min, max, &v) < 0) {
        fprintf(stderr, "%s: '%s' is not an integer in [%d, %d]\n", what, s ? s : "", min, max);
        exit(64);
    }
    return v;
}

double dsv4_parse_double_or_exit(const char *what, const char *s, double min, double max)
{
    double v = 0;
    if (dsv4_parse_double(s, min, max, &v) < 0) {
        fprintf(stderr, "%s: '%s' is not a number in [%g, %g]\n", what, s ? s : "", min, max);
        exit(64);
    }
    return v;
}
