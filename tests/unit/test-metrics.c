/* SPDX-License-Identifier: MIT */
/*
 * The /metrics text (tools/dsv4ctl/metrics.c) rendered from hand-filled stats
 * pages and an expert segment header: exact sample lines (labels, base
 * units, cumulative histogram buckets whose +Inf equals _count), one HELP
 * and TYPE per family before its samples, nothing for a daemon outside the
 * set, and a final newline. The HTTP side and promtool run in
 * tests/e2e/test_metrics.py.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "metrics.h"

static void has_line(const char *text, const char *line)
{
    size_t n = strlen(line);
    for (const char *p = text; (p = strstr(p, line)); p++)
        if ((p == text || p[-1] == '\n') && p[n] == '\n')
            return;
    fail_msg("line missing: %s", line);
}

static void test_render(void **state)
{
    struct dsv4_stats_shm *pg[DSV4_ROLE_COUNT];
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        pg[r] = dsv4_xcalloc(1, sizeof(*pg[r]));
    struct dsv4_expert_shm *es = dsv4_xcalloc(1, sizeof(*es));
    struct dsv4_stats_shm *c = pg[DSV4_ROLE_COMPUTE], *s = pg[DSV4_ROLE_SCHEDULER];
    atomic_store(&c->state, DSV4_STATE_READY);
    atomic_store(&c->restarts, 2);
    atomic_store(&c->started_unix_ms, 1700000000123ull);
    atomic_store(&c->forward_calls, 7);
    atomic_store(&c->mem_weights_bytes, 1ull << 30);
    atomic_store(&s->state, DSV4_STATE_STARTING);
    atomic_store(&s->req_ok, 3);
    atomic_store(&s->req_busy, 1);
    atomic_store(&s->generated_tokens, 42);
    atomic_store(&s->prefill_done, 100);
    atomic_store(&s->prefill_total, 4000);
    dsv4_hist_add(&s->ttft, 3000);          /* le 0.005 */
    dsv4_hist_add(&s->ttft, 30000);         /* le 0.05 */
    dsv4_hist_add(&s->ttft, 700000000);     /* past the last bound */
    atomic_store(&pg[DSV4_ROLE_FETCHER]->restarts, 9);
    atomic_store(&pg[DSV4_ROLE_API]->req_ok, 5);        /* dsv4-api: its own families */
    atomic_store(&pg[DSV4_ROLE_API]->req_busy, 2);
    atomic_store(&pg[DSV4_ROLE_API]->active, 1);
    es->n_slots = 16;
    atomic_store(&es->stats.hits, 5);
    atomic_store(&es->stats.lat_hist[0], 2);
    atomic_store(&es->stats.lat_hist[DSV4_EXPERT_LAT_BUCKETS - 1], 1);
    atomic_store(&es->stats.lat_sum_us, 1000000);

    struct dsv4_view v = { .dir = "/nonexistent", .experts = es };
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        v.page[r] = pg[r];
        v.in_set[r] = r != DSV4_ROLE_FETCHER;   /* a set built without the fetcher */
    }
    char *t = NULL;
    size_t len = 0;
    assert_int_equal(dsv4_metrics_render(&v, &t, &len), 0);
    assert_int_equal(strlen(t), len);
    assert_true(len > 0 && t[len - 1] == '\n');

    has_line(t, "# TYPE dsv4_build_info gauge");
    has_line(t, "dsv4_daemon_up{daemon=\"compute\"} 1");
    has_line(t, "dsv4_daemon_up{daemon=\"scheduler\"} 0");
    has_line(t, "dsv4_daemon_state{daemon=\"scheduler\"} 1");
    has_line(t, "# TYPE dsv4_daemon_restarts_total counter");
    has_line(t, "dsv4_daemon_restarts_total{daemon=\"compute\"} 2");
    has_line(t, "dsv4_daemon_start_time_seconds{daemon=\"compute\"} 1700000000.123");
    has_line(t, "dsv4_requests_total{outcome=\"ok\"} 3");
    has_line(t, "dsv4_requests_total{outcome=\"busy\"} 1");
    has_line(t, "dsv4_requests_total{outcome=\"error\"} 0");
    has_line(t, "dsv4_generated_tokens_total 42");
    has_line(t, "dsv4_api_requests_total{outcome=\"ok\"} 5");
    has_line(t, "dsv4_api_requests_total{outcome=\"busy\"} 2");
    has_line(t, "dsv4_api_active_requests 1");
    has_line(t, "dsv4_daemon_restarts_total{daemon=\"api\"} 0");
    has_line(t, "dsv4_prefill_done_tokens 100");
    has_line(t, "dsv4_prefill_length_tokens 4000");
    has_line(t, "dsv4_forward_calls_total 7");
    has_line(t, "dsv4_memory_resident_bytes{tier=\"weights\"} 1073741824");
    has_line(t, "# TYPE dsv4_time_to_first_token_seconds histogram");
    has_line(t, "dsv4_time_to_first_token_seconds_bucket{le=\"0.005\"} 1");
    has_line(t, "dsv4_time_to_first_token_seconds_bucket{le=\"0.025\"} 1");
    has_line(t, "dsv4_time_to_first_token_seconds_bucket{le=\"0.05\"} 2");
    has_line(t, "dsv4_time_to_first_token_seconds_bucket{le=\"600\"} 2");
    has_line(t, "dsv4_time_to_first_token_seconds_bucket{le=\"+Inf\"} 3");
    has_line(t, "dsv4_time_to_first_token_seconds_sum 700.033");
    has_line(t, "dsv4_time_to_first_token_seconds_count 3");
    has_line(t, "dsv4_expert_cache_hits_total 5");
    has_line(t, "dsv4_expert_slots 16");
    has_line(t, "dsv4_expert_read_latency_seconds_bucket{le=\"6.4e-05\"} 2");
    has_line(t, "dsv4_expert_read_latency_seconds_bucket{le=\"1.048576\"} 2");
    has_line(t, "dsv4_expert_read_latency_seconds_bucket{le=\"+Inf\"} 3");
    has_line(t, "dsv4_expert_read_latency_seconds_sum 1");
    assert_null(strstr(t, "daemon=\"fetcher\""));

    /* every sample belongs to the family whose TYPE came last; no family is declared twice */
    char fam[128] = "", *save = NULL, *copy = dsv4_xstrdup(t);
    int families = 0;
    for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "# TYPE ", 7) == 0) {
            sscanf(line + 7, "%127s", fam);
            char needle[160];
            snprintf(needle, sizeof(needle), "\n# TYPE %s ", fam);
            const char *first = strstr(t, needle);
            assert_non_null(first);
            assert_null(strstr(first + 1, needle));
            snprintf(needle, sizeof(needle), "# HELP %s ", fam);
            first = strstr(t, needle);
            assert_non_null(first);
            assert_null(strstr(first + 1, needle));
            families++;
        } else if (line[0] != '#') {
            assert_true(fam[0] && strncmp(line, fam, strlen(fam)) == 0);
        }
    }
    assert_true(families >= 40);
    free(copy);
    free(t);
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        free(pg[r]);
    free(es);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_render),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
