/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's verify step (daemons/scheduler/spec.c): a verify FORWARD of [anchor, d_1..d_L]
 * answered with every row gives the accepted drafts and the target's next token; answered with
 * fewer rows than L + 1 (compute may), only the rows that came are read: the drafts they
 * cannot judge are not accepted, and the last row that came gives the next token.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "spec.h"

static void verify_case(uint32_t n_rows, int want_n, int want_keep, int want_accepted,
                        const int32_t *want_out)
{
    struct spec_req q;
    struct dsv4_spec_opts o = { .fixed_verify = 3, .rows_as_cost = true };
    spec_admit(&q, 4, true, 0, &o);
    q.ids[0] = 10, q.ids[1] = 11, q.ids[2] = 12, q.ids[3] = 13;
    q.verify_l = 3;
    /* the target agrees with every draft; a fourth row past what came says 77 */
    struct dsv4_wire_row rows[5] = { { 10, 0, 0 }, { 11, 0, 0 }, { 12, 0, 0 }, { 42, 0, 0 },
                                     { 77, 0, 0 } };
    int32_t out[8];
    int keep = -1, accepted = -1;
    int n = spec_verify(&q, rows, n_rows, 1, out, &keep, &accepted);
    assert_int_equal(n, want_n);
    assert_int_equal(keep, want_keep);
    assert_int_equal(accepted, want_accepted);
    assert_memory_equal(out, want_out, (size_t)want_n * sizeof(int32_t));
    assert_int_equal(q.verify_l, 0);
}

static void test_verify_rows(void **state)
{
    (void)state;
    verify_case(4, 4, 4, 3, (const int32_t[]){ 10, 11, 12, 42 });   /* all L + 1 rows */
    verify_case(3, 3, 3, 2, (const int32_t[]){ 10, 11, 12 });       /* one row short */
    verify_case(1, 1, 1, 0, (const int32_t[]){ 10 });               /* the anchor's row only */
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_rows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
