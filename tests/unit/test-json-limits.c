/* SPDX-License-Identifier: MIT */
/*
 * The pre-parse JSON scan (common/json_limits.c): each limit holds at exactly its value and
 * refuses one past it (array elements, object members, nesting, values, string bytes), with
 * -E2BIG and a message naming the document; what is inside strings (brackets, commas, colons,
 * escaped quotes) counts for nothing; object keys are not values.
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "json_limits.h"

static const struct dsv4_json_limits roomy = { 1000, 16, 1000, 1000, 1000 };

static int scan(const char *text, struct dsv4_json_limits lim, struct dsv4_err *err)
{
    return dsv4_json_prescan(text, strlen(text), &lim, "doc.json", err);
}

/* "[0,0,...]" of n elements, or {"k0":0,...} of n members */
static char *container(int n, int object)
{
    size_t cap = 16 + (size_t)n * 16;
    char *s = malloc(cap), *p = s;
    *p++ = object ? '{' : '[';
    for (int i = 0; i < n; i++)
        p += object ? sprintf(p, "%s\"k%d\":%d", i ? "," : "", i, i)
                    : sprintf(p, "%s%d", i ? "," : "", i);
    *p++ = object ? '}' : ']';
    *p = '\0';
    return s;
}

static void test_array_and_members(void **state)
{
    (void)state;
    struct dsv4_err err;
    for (int cap = 1; cap <= 40; cap += 13) {
        struct dsv4_json_limits lim = roomy;
        lim.max_array = lim.max_members = (uint64_t)cap;
        for (int object = 0; object < 2; object++) {
            char *at = container(cap, object), *over = container(cap + 1, object);
            assert_int_equal(scan(at, lim, &err), 0);
            assert_int_equal(scan(over, lim, &err), -E2BIG);
            assert_non_null(strstr(err.msg, "doc.json"));
            assert_non_null(strstr(err.msg, object ? "object" : "array"));
            free(at);
            free(over);
        }
    }
    /* the cap is per container: two arrays at the cap side by side pass */
    struct dsv4_json_limits lim = roomy;
    lim.max_array = 3;
    assert_int_equal(scan("[[1,2,3],[4,5,6],[7]]", lim, &err), 0);
    assert_int_equal(scan("[[1,2,3],[4,5,6,7]]", lim, &err), -E2BIG);
}

static void test_depth_nodes_strings(void **state)
{
    (void)state;
    struct dsv4_err err;
    struct dsv4_json_limits lim = roomy;
    lim.max_depth = 3;
    assert_int_equal(scan("[[[1]]]", lim, &err), 0);
    assert_int_equal(scan("[[[[1]]]]", lim, &err), -E2BIG);
    assert_int_equal(scan("{\"a\":{\"b\":[1]}}", lim, &err), 0);
    assert_int_equal(scan("{\"a\":{\"b\":[{}]}}", lim, &err), -E2BIG);
    lim = roomy;
    lim.max_nodes = 5;      /* the array, 1, "x", true, null: keys are not values */
    assert_int_equal(scan("[1, \"x\", true, null]", lim, &err), 0);
    assert_int_equal(scan("[1, \"x\", true, null, 2]", lim, &err), -E2BIG);
    assert_int_equal(scan("{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": 4}", lim, &err), 0);
    assert_int_equal(scan("{\"a\": 1, \"b\": 2, \"c\": 3, \"d\": [5]}", lim, &err), -E2BIG);
    lim = roomy;
    lim.max_string = 4;
    assert_int_equal(scan("[\"abcd\"]", lim, &err), 0);
    assert_int_equal(scan("[\"abcde\"]", lim, &err), -E2BIG);
    assert_int_equal(scan("[\"a\\\"c\"]", lim, &err), 0);        /* a\"c: 4 bytes as written */
    assert_int_equal(scan("[\"a\\\"cd\"]", lim, &err), -E2BIG);
    /* what a string holds is not structure */
    lim = roomy;
    lim.max_array = 2;
    lim.max_depth = 1;
    assert_int_equal(scan("[\"[[[,,,:{\", \"]]}\\\",,\"]", lim, &err), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_array_and_members),
        cmocka_unit_test(test_depth_nodes_strings),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
