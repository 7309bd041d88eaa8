/* SPDX-License-Identifier: MIT */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "buf.h"
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

/* dsv4_grow makes room for `need` in one call, however far past the capacity (by doubling
 * from 16), and a byte string takes one append many times its capacity. */
static void test_grow(void **state)
{
    (void)state;
    static const size_t needs[] = { 1, 16, 17, 100, 5000, 1u << 20 };
    for (size_t i = 0; i < sizeof(needs) / sizeof(needs[0]); i++) {
        for (size_t start = 0; start <= 16; start += 16) {
            uint32_t *p = NULL;
            size_t cap = 0;
            if (start)
                DSV4_GROW(p, cap, start);
            DSV4_GROW(p, cap, needs[i]);
            assert_true(cap >= needs[i] && cap >= 16 && (cap & (cap - 1)) == 0);
            assert_true(cap < 2 * needs[i] || cap == 16 || cap == start);
            memset(p, 0xab, cap * sizeof(*p));
            free(p);
        }
    }
    struct dsv4_buf b = { 0 };
    char big[10000];
    for (size_t i = 0; i < sizeof(big); i++)
        big[i] = (char)('a' + i % 26);
    dsv4_buf_append(&b, "x", 1);
    dsv4_buf_append(&b, big, sizeof(big));
    assert_int_equal(b.len, 1 + sizeof(big));
    assert_true(b.cap > b.len && b.p[b.len] == '\0');
    assert_memory_equal(b.p + 1, big, sizeof(big));
    dsv4_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_checked_arith),
        cmocka_unit_test(test_errf),
        cmocka_unit_test(test_grow),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
