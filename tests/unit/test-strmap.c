/* SPDX-License-Identifier: MIT */
/*
 * String map: behaviour on edge keys (empty, embedded NUL, prefixes, keys
 * that differ only by trailing zero bytes, keys larger than an arena chunk)
 * and a bulk check of a few hundred thousand keys against the values they
 * were inserted with, across table growth.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "strmap.h"
#include "util.h"

static void test_basic(void **state)
{
    (void)state;
    dsv4_strmap *m = dsv4_strmap_new(0);
    uint64_t v = 99;
    size_t idx = 7;
    assert_int_equal(dsv4_strmap_size(m), 0);
    assert_false(dsv4_strmap_get_str(m, "a", &v));
    assert_int_equal(v, 99);
    assert_true(dsv4_strmap_insert(m, "a", 1, 10, &idx));
    assert_int_equal(idx, 0);
    assert_true(dsv4_strmap_insert(m, "b", 1, 20, &idx));
    assert_int_equal(idx, 1);
    /* Duplicate: refused, map unchanged, index of the existing entry. */
    assert_false(dsv4_strmap_insert(m, "a", 1, 30, &idx));
    assert_int_equal(idx, 0);
    assert_true(dsv4_strmap_get_str(m, "a", &v));
    assert_int_equal(v, 10);
    dsv4_strmap_set(m, "a", 1, 40);
    assert_true(dsv4_strmap_get(m, "a", 1, &v));
    assert_int_equal(v, 40);
    dsv4_strmap_set(m, "c", 1, 50);
    assert_int_equal(dsv4_strmap_size(m), 3);
    assert_int_equal(dsv4_strmap_index(m, "c", 1), 2);
    assert_int_equal(dsv4_strmap_index(m, "d", 1), SIZE_MAX);
    dsv4_strmap_set_value(m, 1, 21);
    assert_int_equal(dsv4_strmap_value(m, 1), 21);
    size_t len = 0;
    assert_string_equal(dsv4_strmap_key(m, 2, &len), "c");
    assert_int_equal(len, 1);
    assert_true(dsv4_strmap_get(m, "b", 1, NULL));
    assert_null(dsv4_strmap_free(m));
}

static void test_binary_keys(void **state)
{
    (void)state;
    dsv4_strmap *m = dsv4_strmap_new(4);
    static const char k0[] = "";          /* empty */
    static const char k1[] = "a";         /* "a" */
    static const char k2[] = "a\0";       /* "a\0": differs only by a trailing zero */
    static const char k3[] = "a\0\0";     /* "a\0\0" */
    static const char k4[] = "\0\0\0\0\0\0\0\0"; /* eight zero bytes: one full word */
    static const char k5[] = "\0\0\0\0\0\0\0";   /* seven zero bytes */
    static const char k6[] = "\xff\xfe\x80 \xc3";
    static const char k7[] = "abcdefghijklmnop";  /* prefixes of each other */
    struct {
        const char *k;
        size_t len;
    } keys[] = {
        { k0, 0 }, { k1, 1 }, { k2, 2 }, { k3, 3 }, { k4, 8 }, { k5, 7 },
        { k6, 5 }, { k7, 16 }, { k7, 15 }, { k7, 9 }, { k7, 8 },
    };
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(keys); i++)
        assert_true(dsv4_strmap_insert(m, keys[i].k, keys[i].len, 1000 + i, NULL));
    assert_int_equal(dsv4_strmap_size(m), DSV4_ARRAY_SIZE(keys));
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(keys); i++) {
        uint64_t v = 0;
        assert_true(dsv4_strmap_get(m, keys[i].k, keys[i].len, &v));
        assert_int_equal(v, 1000 + i);
        size_t len;
        const char *k = dsv4_strmap_key(m, i, &len);
        assert_int_equal(len, keys[i].len);
        assert_memory_equal(k, keys[i].k, len ? len : 1 /* both hold a NUL */);
        assert_int_equal(k[len], '\0');
        assert_false(dsv4_strmap_insert(m, keys[i].k, keys[i].len, 0, NULL));
    }
    /* A NULL pointer is a valid empty key. */
    assert_true(dsv4_strmap_get(m, NULL, 0, NULL));
    assert_false(dsv4_strmap_get(m, "a\0\0\0", 4, NULL));
    dsv4_strmap_free(m);
}

static void test_large_keys(void **state)
{
    (void)state;
    dsv4_strmap *m = dsv4_strmap_new(0);
    size_t big = 200 * 1024;
    char *a = dsv4_xmalloc(big), *b = dsv4_xmalloc(big);
    memset(a, 'x', big);
    memcpy(b, a, big);
    b[big - 1] = 'y';
    assert_true(dsv4_strmap_insert(m, "small", 5, 1, NULL));
    assert_true(dsv4_strmap_insert(m, a, big, 2, NULL));
    assert_true(dsv4_strmap_insert(m, "after", 5, 3, NULL));
    assert_true(dsv4_strmap_insert(m, b, big, 4, NULL));
    uint64_t v;
    assert_true(dsv4_strmap_get(m, a, big, &v));
    assert_int_equal(v, 2);
    assert_true(dsv4_strmap_get(m, b, big, &v));
    assert_int_equal(v, 4);
    assert_true(dsv4_strmap_get_str(m, "small", &v));
    assert_int_equal(v, 1);
    assert_true(dsv4_strmap_get_str(m, "after", &v));
    assert_int_equal(v, 3);
    assert_false(dsv4_strmap_get(m, a, big - 1, NULL));
    free(a);
    free(b);
    dsv4_strmap_free(m);
}

/* Distinct by construction: the decimal of i, prefixed by i % 7 bytes 0xAB
 * and suffixed with a NUL and i's low byte, so lengths and contents vary. */
static size_t make_key(char *buf, uint32_t i)
{
    size_t n = 0;
    for (uint32_t j = 0; j < i % 7; j++)
        buf[n++] = (char)0xab;
    n += (size_t)snprintf(buf + n, 32, "k%u", i);
    buf[n++] = '\0';
    buf[n++] = (char)(i & 0xff);
    return n;
}

static void test_bulk(void **state)
{
    (void)state;
    const uint32_t n = 300000;
    dsv4_strmap *m = dsv4_strmap_new(0); /* grows many times */
    char buf[64];
    for (uint32_t i = 0; i < n; i++) {
        size_t len = make_key(buf, i);
        size_t idx;
        assert_true(dsv4_strmap_insert(m, buf, len, (uint64_t)i * 3 + 1, &idx));
        assert_int_equal(idx, i);
    }
    assert_int_equal(dsv4_strmap_size(m), n);
    for (uint32_t i = 0; i < n; i++) {
        size_t len = make_key(buf, i);
        uint64_t v;
        assert_true(dsv4_strmap_get(m, buf, len, &v));
        assert_int_equal(v, (uint64_t)i * 3 + 1);
        size_t klen;
        const char *k = dsv4_strmap_key(m, i, &klen);
        assert_int_equal(klen, len);
        assert_memory_equal(k, buf, len);
        /* Absent: the same key with its last byte changed, or cut short
         * (only key i starts with its own prefix and decimal). */
        assert_int_equal(dsv4_strmap_index(m, buf, len - 1), SIZE_MAX);
        buf[len - 1] ^= 0x55;
        assert_int_equal(dsv4_strmap_index(m, buf, len), SIZE_MAX);
    }
    for (uint32_t i = n; i < n + 1000; i++) {
        size_t len = make_key(buf, i);
        assert_false(dsv4_strmap_get(m, buf, len, NULL));
    }
    dsv4_strmap_free(m);
}

static void test_hash_spread(void **state)
{
    (void)state;
    /* The slot position comes from the top 32 bits: sequential names like
     * the checkpoint's must spread over the buckets. 65536 keys into 1024
     * buckets: expect 64 each; a bucket above 128 means clustering. */
    enum { NB = 1024, NK = 65536 };
    unsigned *count = dsv4_xcalloc(NB, sizeof(*count));
    char buf[64];
    for (unsigned i = 0; i < NK; i++) {
        int len = snprintf(buf, sizeof(buf), "layers.%u.ffn.experts.%u.w1.weight", i / 256, i % 256);
        count[(dsv4_strmap_hash(buf, (size_t)len) >> 32) % NB]++;
    }
    for (unsigned b = 0; b < NB; b++)
        assert_in_range(count[b], 24, 128);
    free(count);
    assert_int_not_equal(dsv4_strmap_hash("", 0), dsv4_strmap_hash("\0", 1));
    assert_int_not_equal(dsv4_strmap_hash("ab", 2), dsv4_strmap_hash("ba", 2));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic),
        cmocka_unit_test(test_binary_keys),
        cmocka_unit_test(test_large_keys),
        cmocka_unit_test(test_bulk),
        cmocka_unit_test(test_hash_spread),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
