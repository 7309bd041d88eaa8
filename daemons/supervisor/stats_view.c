/* SPDX-License-Identifier: MIT */
/* The table behind status and /metrics (stats_view.h). */
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fetcher_shm.h"
#include "shm.h"
#include "stats_view.h"

#define S(field) ((uint16_t)offsetof(struct dsv4_stats_shm, field))
#define E(field) ((uint16_t)offsetof(struct dsv4_expert_stats_shm, field))
#define SCHED DSV4_SV_ROLE(DSV4_ROLE_SCHEDULER)
#define COMPUTE DSV4_SV_ROLE(DSV4_ROLE_COMPUTE)
#define API DSV4_SV_ROLE(DSV4_ROLE_API)
#define C DSV4_SV_COUNTER
#define G DSV4_SV_GAUGE

/* Families are consecutive rows with the same metric name. */
const struct dsv4_sv_field dsv4_sv_stats[] = {
    { "dsv4_daemon_restarts_total", NULL, "restarts",
      "Respawns of the daemon after an unexpected exit.", C, DSV4_SV_ALL, S(restarts), 0 },
    { "dsv4_daemon_watchdog_kills_total", NULL, "watchdog_kills",
      "Times the supervisor killed the daemon because its heartbeat stalled.", C, DSV4_SV_ALL,
      S(watchdog_kills), 0 },
    { "dsv4_daemon_start_time_seconds", NULL, "started_unix_s",
      "Unix time the current process of the daemon was spawned.", G, DSV4_SV_ALL,
      S(started_unix_ms), 0.001 },
    { "dsv4_daemon_progress_total", NULL, "progress",
      "Work items done by the daemon (its liveness counter).", C, DSV4_SV_ALL, S(progress), 0 },
    { "dsv4_daemon_bad_messages_total", NULL, "bad_messages",
      "Malformed or unexpected messages the daemon dropped.", C, DSV4_SV_ALL, S(bad_messages), 0 },
    { "dsv4_requests_total", "outcome=\"ok\"", "requests_ok",
      "Generation and scoring requests finished, by outcome.", C, SCHED, S(req_ok), 0 },
    { "dsv4_requests_total", "outcome=\"error\"", "requests_error", NULL, C, SCHED, S(req_error),
      0 },
    { "dsv4_requests_total", "outcome=\"cancelled\"", "requests_cancelled", NULL, C, SCHED,
      S(req_cancelled), 0 },
    { "dsv4_requests_total", "outcome=\"busy\"", "requests_busy", NULL, C, SCHED, S(req_busy), 0 },
    { "dsv4_prompt_tokens_total", NULL, "prompt_tokens", "Prompt tokens accepted.", C, SCHED,
      S(prompt_tokens), 0 },
    { "dsv4_generated_tokens_total", NULL, "generated_tokens",
      "Tokens generated and sent to clients.", C, SCHED, S(generated_tokens), 0 },
    { "dsv4_queue_depth", NULL, "queue_depth", "Requests waiting for a compute slot.", G, SCHED,
      S(queue_depth), 0 },
    { "dsv4_active_requests", NULL, "active", "Requests being computed now.", G, SCHED, S(active),
      0 },
    { "dsv4_session_replays_total", NULL, "replays",
      "Sessions rebuilt by the scheduler after a compute restart.", C, SCHED, S(replays), 0 },
    { "dsv4_replayed_tokens_total", NULL, "replayed_tokens",
      "Tokens recomputed to rebuild sessions after a compute restart.", C, SCHED,
      S(replayed_tokens), 0 },
    { "dsv4_prefill_done_tokens", NULL, "prefill_done",
      "Prompt tokens of the prefill in progress computed so far (0 when none).", G, SCHED,
      S(prefill_done), 0 },
    { "dsv4_prefill_length_tokens", NULL, "prefill_total",
      "Prompt tokens of the prefill in progress (0 when none).", G, SCHED, S(prefill_total), 0 },
    { "dsv4_spec_proposed_tokens_total", NULL, "spec_proposed",
      "Draft tokens proposed by DSpark speculation.", C, SCHED, S(spec_proposed), 0 },
    { "dsv4_spec_accepted_tokens_total", NULL, "spec_accepted",
      "Draft tokens accepted by verification.", C, SCHED, S(spec_accepted), 0 },
    { "dsv4_spec_verify_steps_total", NULL, "spec_verify_steps",
      "Verification forwards of drafted tokens.", C, SCHED, S(spec_verify_steps), 0 },
    { "dsv4_spec_quench_events_total", NULL, "spec_quench",
      "Times speculation was switched off for low acceptance.", C, SCHED, S(spec_quench), 0 },
    { "dsv4_forward_calls_total", NULL, "forward_calls", "Model forward calls.", C, COMPUTE,
      S(forward_calls), 0 },
    { "dsv4_forward_rows_total", NULL, "forward_rows", "Token rows through the model.", C, COMPUTE,
      S(forward_rows), 0 },
    { "dsv4_sessions_open", NULL, "sessions_open", "KV sessions held by compute.", G, COMPUTE,
      S(sessions_open), 0 },
    { "dsv4_steps_total", NULL, "steps", "Batched forward steps (one per set of sessions).", C,
      COMPUTE, S(steps), 0 },
    { "dsv4_step_sessions_total", NULL, "step_sessions",
      "Sessions summed over steps (÷ steps: sessions per step).", C, COMPUTE, S(step_sessions),
      0 },
    { "dsv4_prefix_cache_lookup_tokens_total", NULL, "prefix_lookup_tokens",
      "Prompt tokens looked up in the prefix cache.", C, COMPUTE, S(prefix_lookup_tokens), 0 },
    { "dsv4_prefix_cache_hit_tokens_total", NULL, "prefix_hit_tokens",
      "Prompt tokens restored from the prefix cache instead of prefilled.", C, COMPUTE,
      S(prefix_hit_tokens), 0 },
    { "dsv4_prefix_cache_entries", "tier=\"ram\"", "prefix_ram_entries",
      "Blocks held by the prefix cache, by tier.", G, COMPUTE, S(prefix_ram_entries), 0 },
    { "dsv4_prefix_cache_entries", "tier=\"disk\"", "prefix_disk_entries", NULL, G, COMPUTE,
      S(prefix_disk_entries), 0 },
    { "dsv4_prefix_cache_bytes", "tier=\"ram\"", "prefix_ram_bytes",
      "Bytes held by the prefix cache, by tier.", G, COMPUTE, S(prefix_ram_bytes), 0 },
    { "dsv4_prefix_cache_bytes", "tier=\"disk\"", "prefix_disk_bytes", NULL, G, COMPUTE,
      S(prefix_disk_bytes), 0 },
    { "dsv4_prefix_cache_evictions_total", NULL, "prefix_evictions",
      "Prefix-cache blocks evicted (both tiers).", C, COMPUTE, S(prefix_evictions), 0 },
    { "dsv4_prefix_cache_bad_files_total", NULL, "prefix_bad_files",
      "Prefix-cache files skipped and deleted (corrupt, truncated, foreign, old version).", C,
      COMPUTE, S(prefix_bad_files), 0 },
    { "dsv4_experts_union_saved_total", NULL, "experts_union_saved",
      "Routed-expert leases saved by taking a step's union once instead of per session.", C,
      COMPUTE, S(experts_union_saved), 0 },
    { "dsv4_memory_resident_bytes", "tier=\"weights\"", "mem_weights_bytes",
      "Bytes resident in compute, by memory tier.", G, COMPUTE, S(mem_weights_bytes), 0 },
    { "dsv4_memory_resident_bytes", "tier=\"session\"", "mem_session_bytes", NULL, G, COMPUTE,
      S(mem_session_bytes), 0 },
    { "dsv4_memory_resident_bytes", "tier=\"scratch\"", "mem_scratch_bytes", NULL, G, COMPUTE,
      S(mem_scratch_bytes), 0 },
    { "dsv4_memory_budget_bytes", NULL, "mem_budget_bytes",
      "The memory budget the plan was made for.", G, COMPUTE, S(mem_budget_bytes), 0 },
    /* dsv4-api: HTTP requests by outcome (busy = answered 429) */
    { "dsv4_api_requests_total", "outcome=\"ok\"", "requests_ok",
      "HTTP generation requests through dsv4-api, by outcome.", C, API, S(req_ok), 0 },
    { "dsv4_api_requests_total", "outcome=\"error\"", "requests_error", NULL, C, API,
      S(req_error), 0 },
    { "dsv4_api_requests_total", "outcome=\"cancelled\"", "requests_cancelled", NULL, C, API,
      S(req_cancelled), 0 },
    { "dsv4_api_requests_total", "outcome=\"busy\"", "requests_busy", NULL, C, API, S(req_busy),
      0 },
    { "dsv4_api_active_requests", NULL, "active", "HTTP generation requests open now.", G, API,
      S(active), 0 },
    { "dsv4_api_prompt_tokens_total", NULL, "prompt_tokens", "Prompt tokens of HTTP requests.", C,
      API, S(prompt_tokens), 0 },
    { "dsv4_api_generated_tokens_total", NULL, "generated_tokens",
      "Tokens generated for HTTP requests.", C, API, S(generated_tokens), 0 },
};
const size_t dsv4_sv_n_stats = DSV4_ARRAY_SIZE(dsv4_sv_stats);

const struct dsv4_sv_hist dsv4_sv_hists[] = {
    { "dsv4_time_to_first_token_seconds", "ttft",
      "From request accepted to its first generated token.", S(ttft), DSV4_ROLE_SCHEDULER, false },
    { "dsv4_token_latency_seconds", "per_token", "Between consecutive generated tokens.",
      S(per_token), DSV4_ROLE_SCHEDULER, false },
    { "dsv4_request_duration_seconds", "request", "From request accepted to its end.",
      S(request), DSV4_ROLE_SCHEDULER, false },
    { "dsv4_queue_wait_seconds", "queue_wait",
      "From request accepted to its first forward step (time queued).", S(queue_wait),
      DSV4_ROLE_SCHEDULER, false },
    { "dsv4_prefix_cache_restore_seconds", "prefix_restore",
      "Time to restore a cached prefix into a session.", S(prefix_restore), DSV4_ROLE_COMPUTE,
      false },
    { "dsv4_step_rows", "step_rows", "Token rows per batched forward step (all sessions).",
      S(step_rows), DSV4_ROLE_COMPUTE, true },
};
const size_t dsv4_sv_n_hists = DSV4_ARRAY_SIZE(dsv4_sv_hists);

const struct dsv4_sv_field dsv4_sv_expert[] = {
    { "dsv4_expert_load_requests_total", NULL, "load_requests",
      "Expert loads asked of the fetcher.", C, 0, E(requests), 0 },
    { "dsv4_expert_cache_hits_total", NULL, "hits", "Expert loads found resident.", C, 0, E(hits),
      0 },
    { "dsv4_expert_cache_misses_total", NULL, "misses", "Expert loads that needed a read.", C, 0,
      E(misses), 0 },
    { "dsv4_expert_load_failures_total", NULL, "failures", "Expert loads that failed.", C, 0,
      E(failures), 0 },
    { "dsv4_expert_prefetch_issued_total", NULL, "prefetch_issued", "Prefetch loads started.", C, 0,
      E(prefetch_issued), 0 },
    { "dsv4_expert_prefetch_used_total", NULL, "prefetch_used",
      "Prefetched experts that were used later.", C, 0, E(prefetch_used), 0 },
    { "dsv4_expert_prefetch_dropped_total", NULL, "prefetch_dropped",
      "Prefetch hints refused (no evictable slot, ring full).", C, 0, E(prefetch_dropped), 0 },
    { "dsv4_expert_read_bytes_total", NULL, "bytes_read", "Expert bytes read from the checkpoint.",
      C, 0, E(bytes_read), 0 },
    { "dsv4_expert_reads_total", NULL, "reads", "Expert read operations completed.", C, 0, E(reads),
      0 },
    { "dsv4_expert_buffered_reads_total", NULL, "buffered_reads",
      "Expert reads done without O_DIRECT.", C, 0, E(buffered_reads), 0 },
    { "dsv4_expert_evictions_total", NULL, "evictions", "Expert slots evicted.", C, 0, E(evictions),
      0 },
    { "dsv4_expert_pinned_slots", NULL, "pinned", "Expert slots pinned now.", G, 0, E(pinned), 0 },
    { "dsv4_expert_client_hits_total", NULL, "client_hits",
      "Resident experts leased by clients without asking the fetcher.", C, 0, E(client_hits), 0 },
    { "dsv4_expert_client_requests_total", NULL, "client_requests", "Experts clients asked for.", C,
      0, E(client_requests), 0 },
    { "dsv4_expert_fetcher_attaches_total", NULL, "fetcher_attaches",
      "Fetcher starts that found the segment in place (restarts).", C, 0, E(restarts), 0 },
    { "dsv4_expert_discarded_loads_total", NULL, "discarded_loading",
      "Half-done loads discarded when a restarted fetcher attached.", C, 0, E(discarded_loading),
      0 },
};
const size_t dsv4_sv_n_expert = DSV4_ARRAY_SIZE(dsv4_sv_expert);

uint64_t dsv4_sv_raw(const void *base, const struct dsv4_sv_field *f)
{
    return atomic_load_explicit((const _Atomic uint64_t *)((const char *)base + f->off),
                                memory_order_relaxed);
}

double dsv4_sv_value(const void *base, const struct dsv4_sv_field *f)
{
    return (double)dsv4_sv_raw(base, f) * (f->scale != 0 ? f->scale : 1.0);
}

double dsv4_expert_lat_bound_s(int i)
{
    /* fetcher.c: bucket b counts loads under 64 << b µs; the last one the rest */
    return i < DSV4_EXPERT_LAT_BUCKETS - 1 ? (double)(64ull << i) / 1e6 : INFINITY;
}

const char *dsv4_state_name(uint64_t st)
{
    static const char *const names[] = { "down", "starting", "ready", "failed" };
    return st < DSV4_ARRAY_SIZE(names) ? names[st] : "unknown";
}

uint64_t dsv4_rss_bytes(uint64_t pid)
{
    char path[64], line[256];
    if (pid == 0)
        return 0;
    snprintf(path, sizeof(path), "/proc/%llu/status", (unsigned long long)pid);
    FILE *f = fopen(path, "r");
    long kib = 0;
    while (f && fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld", &kib) == 1)
            break;
    if (f)
        fclose(f);
    return kib > 0 ? (uint64_t)kib * 1024 : 0;
}

void dsv4_view_open(struct dsv4_view *v, const char *dir)
{
    memset(v, 0, sizeof(*v));
    v->dir = dir;
    v->owned = true;
    v->metrics_addr = "";
    v->supervisor_pid = dsv4_rundir_supervisor_pid(dir);
    if (v->supervisor_pid == 0)
        return;
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        if (dsv4_stats_map(dir, r, false, &v->page[r], NULL) < 0) {
            v->page[r] = NULL;
            continue;
        }
        /* the fetcher (and the api) are not part of a set built or started without: never spawned */
        v->in_set[r] = (r != DSV4_ROLE_FETCHER && r != DSV4_ROLE_API) ||
                       atomic_load(&v->page[r]->pid) != 0 ||
                       atomic_load(&v->page[r]->state) != DSV4_STATE_DOWN;
    }
}

void dsv4_view_map_experts(struct dsv4_view *v)
{
    char name[96];
    v->experts = NULL;
    if (dsv4_eshm_name(v->dir, name, sizeof(name), NULL) < 0)
        return;
    int fd = dsv4_shm_open_own(name, O_RDONLY, NULL);
    if (fd < 0)
        return;
    struct stat st;
    void *p = MAP_FAILED;
    if (fstat(fd, &st) == 0 && (uint64_t)st.st_size >= sizeof(struct dsv4_expert_shm))
        p = mmap(NULL, sizeof(struct dsv4_expert_shm), PROT_READ, MAP_SHARED, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return;
    const struct dsv4_expert_shm *s = p;
    if (s->hdr.magic != DSV4_EXPERT_SHM_MAGIC || s->hdr.layout_id != dsv4_expert_shm_layout_id()) {
        munmap(p, sizeof(struct dsv4_expert_shm));
        return;
    }
    v->experts = s;
}

void dsv4_view_close(struct dsv4_view *v)
{
    if (v->experts)
        munmap((void *)v->experts, sizeof(struct dsv4_expert_shm));
    v->experts = NULL;
    if (!v->owned)
        return;
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        dsv4_stats_unmap(v->page[r]);
        v->page[r] = NULL;
    }
}
