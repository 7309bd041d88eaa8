/* SPDX-License-Identifier: MIT */
/*
 * common/log.c: a line is `YYYY-MM-DDTHH:MM:SS.mmmZ level topic: message`
 * written to stderr in one piece and copied to DSV4_LOG_TEE_FD; the rate
 * limiter lets DSV4_LOG_LIMIT_BURST messages through per window, then
 * counts the rest and reports that count with the first message of the
 * next window (driven with synthetic clock values, no sleeping).
 */
#include <fcntl.h>
#include <regex.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "log.h"

static void test_limit_windows(void **state)
{
    struct dsv4_log_limit rl = { 0 };
    uint32_t dropped, passed = 0;
    const uint64_t t0 = 1000;
    for (int i = 0; i < 25; i++) {
        passed += dsv4_log_limit_check(&rl, t0 + (uint64_t)i, &dropped);
        assert_int_equal(dropped, 0);
    }
    assert_int_equal(passed, DSV4_LOG_LIMIT_BURST);
    /* still inside the window: refused and counted */
    assert_int_equal(dsv4_log_limit_check(&rl, t0 + DSV4_LOG_LIMIT_WINDOW_NS - 1, &dropped), 0);
    /* the next window: the first message carries the count, then the burst again */
    assert_int_equal(dsv4_log_limit_check(&rl, t0 + DSV4_LOG_LIMIT_WINDOW_NS, &dropped), 1);
    assert_int_equal(dropped, 25 - DSV4_LOG_LIMIT_BURST + 1);
    passed = 1;
    for (int i = 0; i < 20; i++) {
        passed += dsv4_log_limit_check(&rl, t0 + DSV4_LOG_LIMIT_WINDOW_NS + 1, &dropped);
        assert_int_equal(dropped, 0);
    }
    assert_int_equal(passed, DSV4_LOG_LIMIT_BURST);
    /* a quiet window reports nothing */
    assert_int_equal(dsv4_log_limit_check(&rl, t0 + 10 * DSV4_LOG_LIMIT_WINDOW_NS, &dropped), 1);
    assert_int_equal(dropped, 20 - (DSV4_LOG_LIMIT_BURST - 1));
    assert_int_equal(dsv4_log_limit_check(&rl, t0 + 20 * DSV4_LOG_LIMIT_WINDOW_NS, &dropped), 1);
    assert_int_equal(dropped, 0);
}

static char *slurp(FILE *f)
{
    static char buf[8192];
    fflush(f);
    rewind(f);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = '\0';
    return buf;
}

static void test_line_format_and_tee(void **state)
{
    FILE *err = tmpfile(), *tee = tmpfile();
    assert_non_null(err);
    assert_non_null(tee);
    int saved = dup(2);
    assert_true(dup2(fileno(err), 2) == 2);
    char fd[16];
    snprintf(fd, sizeof(fd), "%d", fileno(tee));
    setenv("DSV4_LOG_TEE_FD", fd, 1);       /* read on the first line */
    dsv4_log_set_level(DSV4_LOG_INFO);
    dsv4_log_info("topic", "hello %d", 42);
    dsv4_log_debug("topic", "not at info");
    for (int i = 0; i < 3 * DSV4_LOG_LIMIT_BURST; i++)
        dsv4_log_rl(DSV4_LOG_WARN, "hot", "again %d", i);
    dup2(saved, 2);
    close(saved);
    char *got = dsv4_xstrdup(slurp(err));
    regex_t re;
    assert_int_equal(regcomp(&re,
                             "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
                             "info topic: hello 42\n",
                             REG_EXTENDED), 0);
    assert_int_equal(regexec(&re, got, 0, NULL, 0), 0);
    regfree(&re);
    assert_null(strstr(got, "not at info"));
    int lines = 0;
    for (char *p = got; (p = strstr(p, "warn hot: again ")); p++)
        lines++;
    assert_int_equal(lines, DSV4_LOG_LIMIT_BURST);  /* the rest of the burst is suppressed */
    assert_string_equal(slurp(tee), got);
    free(got);
    fclose(err);
    fclose(tee);
}

/* Lines that cannot be written (the disk under the log is full: /dev/full here) are counted,
 * and the first line that can be written is preceded by the count and the reason. */
static void test_lost_lines_reported(void **state)
{
    (void)state;
    int full = open("/dev/full", O_WRONLY);
    assert_true(full >= 0);
    FILE *err = tmpfile();
    assert_non_null(err);
    int saved = dup(2);
    dsv4_log_set_level(DSV4_LOG_INFO);
    assert_true(dup2(full, 2) == 2);
    dsv4_log_info("disk", "first, lost");
    dsv4_log_info("disk", "second, lost");
    assert_true(dup2(fileno(err), 2) == 2);
    dsv4_log_info("disk", "third, written");
    dup2(saved, 2);
    close(saved);
    close(full);
    const char *got = slurp(err);
    const char *note = strstr(got, "2 log line(s) were lost: No space left on device");
    const char *third = strstr(got, "third, written");
    assert_non_null(note);
    assert_non_null(third);
    assert_true(note < third);
    assert_null(strstr(got, "lost\n"));
    fclose(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_limit_windows),
        cmocka_unit_test(test_line_format_and_tee),
        cmocka_unit_test(test_lost_lines_reported),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
