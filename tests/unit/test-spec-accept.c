/* SPDX-License-Identifier: MIT */
/*
 * DSpark's acceptance rule (common/spec_accept.c), the one implementation the engine and the
 * scheduler share: first mismatch, all accepted, an accepted EOS ending the list, and that
 * row choices are asked for only as far as the rule needs them.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "spec_accept.h"

struct rows {
    const int32_t *g;
    int asked;          /* highest row asked for + 1 */
};

static int32_t choice(void *ctx, int j)
{
    struct rows *r = ctx;
    if (j + 1 > r->asked)
        r->asked = j + 1;
    return r->g[j];
}

static void test_first_mismatch(void **state)
{
    (void)state;
    const int32_t drafts[] = { 5, 6, 7, 8 }, g[] = { 5, 6, 9, 8, 1 };
    struct rows r = { g, 0 };
    int32_t out[5];
    int keep, acc;
    int n = dsv4_spec_accept(drafts, 4, 2, choice, &r, out, &keep, &acc);
    assert_int_equal(n, 3);
    assert_int_equal(acc, 2);
    assert_int_equal(keep, 3);          /* anchor, 5, 6 */
    assert_int_equal(out[0], 5);
    assert_int_equal(out[1], 6);
    assert_int_equal(out[2], 9);        /* the target's own next token */
    assert_int_equal(r.asked, 3);       /* rows after the mismatch are never computed */
}

static void test_all_accepted(void **state)
{
    (void)state;
    const int32_t drafts[] = { 5, 6, 7 }, g[] = { 5, 6, 7, 11 };
    struct rows r = { g, 0 };
    int32_t out[4];
    int keep, acc;
    assert_int_equal(dsv4_spec_accept(drafts, 3, 2, choice, &r, out, &keep, &acc), 4);
    assert_int_equal(acc, 3);
    assert_int_equal(keep, 4);
    assert_int_equal(out[3], 11);
}

static void test_accepted_eos_ends(void **state)
{
    (void)state;
    const int32_t drafts[] = { 5, 2, 7 }, g[] = { 5, 2, 7, 11 };
    struct rows r = { g, 0 };
    int32_t out[4];
    int keep, acc;
    assert_int_equal(dsv4_spec_accept(drafts, 3, 2, choice, &r, out, &keep, &acc), 2);
    assert_int_equal(acc, 2);
    assert_int_equal(keep, 2);          /* anchor and 5 fed; the EOS is emitted, never fed */
    assert_int_equal(out[1], 2);
    assert_int_equal(r.asked, 2);
}

static void test_no_drafts(void **state)
{
    (void)state;
    const int32_t g[] = { 4 };
    struct rows r = { g, 0 };
    int32_t out[1];
    int keep, acc;
    assert_int_equal(dsv4_spec_accept(NULL, 0, 2, choice, &r, out, &keep, &acc), 1);
    assert_int_equal(acc, 0);
    assert_int_equal(keep, 1);
    assert_int_equal(out[0], 4);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_first_mismatch),
        cmocka_unit_test(test_all_accepted),
        cmocka_unit_test(test_accepted_eos_ends),
        cmocka_unit_test(test_no_drafts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
