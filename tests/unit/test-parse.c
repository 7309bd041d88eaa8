/* SPDX-License-Identifier: MIT */
/* Strict number parsing (common/parse.c): whole string, range, no sign games, no overflow. */
#include <errno.h>
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "parse.h"

static void test_u64(void **state)
{
    (void)state;
    uint64_t v = 7;
    assert_int_equal(dsv4_parse_u64("42", 0, 100, &v), 0);
    assert_int_equal(v, 42);
    assert_int_equal(dsv4_parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
    assert_true(v == UINT64_MAX);
    v = 7;
    assert_int_equal(dsv4_parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
    assert_int_equal(dsv4_parse_u64("-1", 0, UINT64_MAX, &v), -EINVAL);
    assert_int_equal(dsv4_parse_u64(" 1", 0, 10, &v), -EINVAL);
    assert_int_equal(dsv4_parse_u64("1 ", 0, 10, &v), -EINVAL);
    assert_int_equal(dsv4_parse_u64("1x", 0, 10, &v), -EINVAL);
    assert_int_equal(dsv4_parse_u64("", 0, 10, &v), -EINVAL);
    assert_int_equal(dsv4_parse_u64(NULL, 0, 10, &v), -EINVAL);
    assert_int_equal(dsv4_parse_u64("11", 0, 10, &v), -ERANGE);
    assert_int_equal(dsv4_parse_u64("0", 1, 10, &v), -ERANGE);
    assert_int_equal(v, 7);     /* untouched on failure */
}

static void test_int(void **state)
{
    (void)state;
    int v = 3;
    /* the finding of issue 18: 4294967297 must not wrap to 1 */
    assert_int_equal(dsv4_parse_int("4294967297", 1, INT32_MAX, &v), -ERANGE);
    assert_int_equal(dsv4_parse_int("-5", -10, 10, &v), 0);
    assert_int_equal(v, -5);
    assert_int_equal(dsv4_parse_int("+5", -10, 10, &v), 0);
    assert_int_equal(v, 5);
    assert_int_equal(dsv4_parse_int("-", -10, 10, &v), -EINVAL);
    assert_int_equal(dsv4_parse_int("99999999999999999999", INT32_MIN, INT32_MAX, &v), -ERANGE);
    uint32_t u;
    assert_int_equal(dsv4_parse_u32("4294967295", 0, UINT32_MAX, &u), 0);
    assert_true(u == UINT32_MAX);
    assert_int_equal(dsv4_parse_u32("4294967296", 0, UINT32_MAX, &u), -ERANGE);
}

static void test_double(void **state)
{
    (void)state;
    double d = 0;
    assert_int_equal(dsv4_parse_double("0.25", 0, 1, &d), 0);
    assert_true(d == 0.25);
    assert_int_equal(dsv4_parse_double("1e3", 0, 1e4, &d), 0);
    assert_true(d == 1000);
    assert_int_equal(dsv4_parse_double("nan", 0, 1, &d), -ERANGE);
    assert_int_equal(dsv4_parse_double("inf", 0, INFINITY, &d), -ERANGE);
    assert_int_equal(dsv4_parse_double("1e400", 0, INFINITY, &d), -ERANGE);
    assert_int_equal(dsv4_parse_double("2", 0, 1, &d), -ERANGE);
    assert_int_equal(dsv4_parse_double("0.5x", 0, 1, &d), -EINVAL);
    assert_int_equal(dsv4_parse_double("", 0, 1, &d), -EINVAL);
    assert_int_equal(dsv4_parse_double(" 1", 0, 1, &d), -EINVAL);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_u64),
        cmocka_unit_test(test_int),
        cmocka_unit_test(test_double),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
