/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "err.h"
#include "util.h"

static void test_checked_arith(void **state)
{
    (void)state;
    uint64_t r = 7;
    assert_true(dsv4_mul_u64(1u << 20, 1u << 20, &r));
    assert_int_equal(r, 1ull << 40);
    r = 7;
    assert_false(dsv4_mul_u64(UINT64_MAX / 2 + 1, 2, &r));
    assert_int_equal(r, 7); /* untouched on overflow */
    assert_false(dsv4_add_u64(UINT64_MAX, 1, &r));
    assert_true(dsv4_add_u64(UINT64_MAX - 1, 1, &r));
    assert_int_equal(r, UINT64_MAX);
}

static void test_errf(void **state)
{
    (void)state;
    struct dsv4_err e;
    assert_int_equal(dsv4_errf(&e, -22, "file '%s': field %s", "a.json", "x"), -22);
    assert_string_equal(e.msg, "file 'a.json': field x");
    assert_int_equal(dsv4_errf(NULL, -5, "ignored"), -5);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checked_arith),
        cmocka_unit_test(test_errf),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
