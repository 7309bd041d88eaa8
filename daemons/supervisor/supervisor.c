/* SPDX-License-Identifier: MIT */
/* The daemon supervisor (supervisor.h). */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "tcp_listen.h"
#include "daemon.h"
#include "dsv4_wire.h"
#include "exitcode.h"
#include "file.h"
#include "fetcher_shm.h"
#include "log.h"
#include "shm.h"
#include "metrics.h"
#include "supervisor.h"

#define CRASH_LOOP_N 5
#define CRASH_LOOP_WINDOW_NS (120ull * DSV4_NSEC_PER_SEC)
#define READY_TIMEOUT_NS (600ull * DSV4_NSEC_PER_SEC)
#define STOP_GRACE_NS (5ull * DSV4_NSEC_PER_SEC)

struct child {
    int role;
    char exe[DSV4_PATH_MAX];
    bool present;               /* executable found (the fetcher may not be built) */
    pid_t pid;
    bool ready;
    uint64_t fail_ns[CRASH_LOOP_N];
    int n_fail;
    uint64_t restart_at;        /* 0 = none pending */
    struct dsv4_stats_shm *stats;
    /* watchdog: last HEARTBEAT, and since when the progress counter has been still */
    uint64_t beat_ns, still_since_ns, progress;
    bool killed;                /* SIGKILLed by the watchdog, not reaped yet */
};

struct sv {
    const struct supervisor_opts *o;
    char dir[DSV4_PATH_MAX];
    struct child ch[DSV4_ROLE_COUNT];
    void *zctx, *ctl;
    int sigfd, lockfd;
    char shm_id[DSV4_SHM_ID_LEN + 1];   /* this start's segment id ("" before it is made) */
    bool stopping;
    struct dsv4_zin in;
    struct dsv4_view view;      /* what the exporter reads: our own mappings */
    struct dsv4_metrics *metrics;
    char metrics_addr[128];     /* bound address, "" when none */
    int api_fd;                 /* dsv4-api's listening socket, -1 when none */
    uint64_t watched_ns;        /* when the watchdog last looked */
};

static void say(int *fd, const char *fmt, ...) DSV4_PRINTF(2, 3);

static void say(int *fd, const char *fmt, ...)
{
    char msg[1200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    dsv4_log_info("supervisor", "%s", msg);
    if (*fd >= 0) {
        dprintf(*fd, "%s\n", msg);
        close(*fd);
        *fd = -1;
    }
}

static int spawn(struct sv *s, struct child *c)
{
    char log[DSV4_PATH_MAX + 32], threads[16], mem[32], cache[24], dcache[24], sess[24],
        active[16], steptok[16], chunk[16];
    snprintf(log, sizeof(log), "%s/%s.log", s->dir, dsv4_role_name(c->role));
    snprintf(threads, sizeof(threads), "%d", s->o->threads);
    snprintf(mem, sizeof(mem), "%g", s->o->memory_gb);
    snprintf(cache, sizeof(cache), "%llu", (unsigned long long)s->o->cache_bytes);
    snprintf(dcache, sizeof(dcache), "%llu", (unsigned long long)s->o->drafter_cache_bytes);
    snprintf(sess, sizeof(sess), "%llu", (unsigned long long)s->o->session_bytes);
    snprintf(active, sizeof(active), "%d", s->o->sessions);
    snprintf(steptok, sizeof(steptok), "%d", s->o->step_tokens);
    snprintf(chunk, sizeof(chunk), "%d", s->o->chunk);
    char ctx[24];
    snprintf(ctx, sizeof(ctx), "%lld", (long long)s->o->max_ctx);
    atomic_store(&c->stats->state, DSV4_STATE_STARTING);
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        /* --foreground: the daemon's log lines go to our stderr too (log.c, DSV4_LOG_TEE_FD) */
        int tee = s->o->foreground ? fcntl(2, F_DUPFD_CLOEXEC, 10) : -1;
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        if (nul >= 0)
            dup2(nul, 0);
        if (tee >= 0 && dup2(tee, 3) == 3)
            setenv("DSV4_LOG_TEE_FD", "3", 1);
        sigset_t all;
        sigemptyset(&all);
        pthread_sigmask(SIG_SETMASK, &all, NULL);
        setenv("DSV4_SUPERVISED", "1", 1);
        /* 5 fixed + at most 20 per role (compute) + NULL; every option appended */
        char *argv[32] = { c->exe, "--run-dir", s->dir, "--model", (char *)s->o->model };
        char **a = argv + 5;
        bool fetcher = s->ch[DSV4_ROLE_FETCHER].present;
        if (c->role == DSV4_ROLE_FETCHER && s->o->cache_bytes) {   /* the plan's cache */
            *a++ = "--cache-bytes";
            *a++ = cache;
        }
        if (c->role == DSV4_ROLE_SCHEDULER && s->o->sessions > 0) {    /* the plan's sessions */
            *a++ = "--max-active";
            *a++ = active;
        }
        if (c->role == DSV4_ROLE_SCHEDULER && s->o->step_tokens > 0) {
            *a++ = "--step-tokens";
            *a++ = steptok;
        }
        if ((c->role == DSV4_ROLE_SCHEDULER || c->role == DSV4_ROLE_API) &&
            s->o->max_ctx > 0) {    /* ... and their size: the context a request may fill */
            *a++ = "--max-ctx";
            *a++ = ctx;
        }
        if (c->role == DSV4_ROLE_COMPUTE) {
            *a++ = "--threads";
            *a++ = threads;
            *a++ = "--memory-gb";
            *a++ = mem;
            if (fetcher)
                *a++ = "--fetcher";
            if (s->o->dspark)
                *a++ = "--dspark";
            if (s->o->session_bytes) {
                *a++ = "--session-bytes";
                *a++ = sess;
            }
            if (s->o->chunk > 0) {  /* the plan's prefill step */
                *a++ = "--chunk";
                *a++ = chunk;
            }
            if (!fetcher && s->o->cache_bytes) {
                *a++ = "--cache-bytes";
                *a++ = cache;
            }
            if (fetcher && s->o->dspark && s->o->drafter_cache_bytes) {
                *a++ = "--cache-bytes";
                *a++ = dcache;
            }
            if (s->o->no_prefix)
                *a++ = "--no-prefix-cache";
            const char *const pfx[][2] = { { "--prefix-cache-mb", s->o->prefix_mb },
                                           { "--prefix-cache-gb", s->o->prefix_gb },
                                           { "--prefix-cache-dir", s->o->prefix_dir } };
            for (size_t i = 0; i < DSV4_ARRAY_SIZE(pfx) && !s->o->no_prefix; i++)
                if (pfx[i][1]) {
                    *a++ = (char *)pfx[i][0];
                    *a++ = (char *)pfx[i][1];
                }
        }
        if (c->role == DSV4_ROLE_SCHEDULER && s->o->dspark)
            *a++ = "--dspark";
        if (c->role == DSV4_ROLE_SCHEDULER && s->o->dspark_trace) {
            *a++ = "--dspark-trace";
            *a++ = (char *)s->o->dspark_trace;
        }
        char lfd[16];
        if (c->role == DSV4_ROLE_API) {     /* our socket, inherited past exec (no CLOEXEC) */
            snprintf(lfd, sizeof(lfd), "%d", fcntl(s->api_fd, F_DUPFD, 20));
            *a++ = "--listen-fd";
            *a++ = lfd;
            if (s->o->api_key_file) {
                *a++ = "--api-key-file";
                *a++ = (char *)s->o->api_key_file;
            }
        }
        assert(a < argv + DSV4_ARRAY_SIZE(argv));
        execv(c->exe, argv);
        fprintf(stderr, "exec %s: %s\n", c->exe, strerror(errno));
        _exit(DSV4_EXIT_NOINPUT);
    }
    c->pid = pid;
    c->ready = false;
    c->killed = false;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    atomic_store(&c->stats->started_unix_ms, (uint64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000);
    atomic_store(&c->stats->pid, (uint64_t)pid);
    atomic_fetch_add(&c->stats->hdr.epoch, 1);
    dsv4_log_info("supervisor", "started %s[%d]", dsv4_role_name(c->role), (int)pid);
    return 0;
}

static void describe_status(int st, char *buf, size_t n)
{
    if (WIFEXITED(st))
        snprintf(buf, n, "exited with status %d", WEXITSTATUS(st));
    else if (WIFSIGNALED(st) && sigabbrev_np(WTERMSIG(st)))
        snprintf(buf, n, "killed by signal SIG%s%s", sigabbrev_np(WTERMSIG(st)),
                 WCOREDUMP(st) ? " (core dumped)" : "");
    else if (WIFSIGNALED(st))
        snprintf(buf, n, "killed by signal %d%s", WTERMSIG(st),
                 WCOREDUMP(st) ? " (core dumped)" : "");
    else
        snprintf(buf, n, "status 0x%x", st);
}

static void notify_peers(struct sv *s, int role)
{
    struct dsv4_msg_peer p = { (uint32_t)role, (uint32_t)s->ch[role].pid,
                               atomic_load(&s->ch[role].stats->hdr.epoch) };
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_simple(&b, DSV4_MSG_PEER_RESTARTED, &p, sizeof(p));
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        const char *id = dsv4_role_name(r);
        if (r != role && s->ch[r].ready)
            dsv4_zsend(s->ctl, id, strlen(id), &b, 1);
    }
    dsv4_wire_buf_free(&b);
}

static void on_ctl(struct sv *s)
{
    int r;
    while ((r = dsv4_zrecv(s->ctl, &s->in, 1, 1)) != -EAGAIN) {
        struct dsv4_msg m;
        struct dsv4_err err;
        int errc;
        if (r < 0 || dsv4_wire_decode(s->in.buf, s->in.len, &m, &errc, &err)) {
            dsv4_log_rl(DSV4_LOG_WARN, "supervisor", "dropped control message: %s",
                        r < 0 ? "framing" : err.msg);
            continue;
        }
        if (m.type == DSV4_MSG_HEARTBEAT) {
            const struct dsv4_msg_heartbeat *hb = m.body;
            if ((pid_t)hb->pid == s->ch[hb->role].pid)
                s->ch[hb->role].beat_ns = dsv4_now_ns();
            continue;
        }
        if (m.type != DSV4_MSG_READY)
            continue;
        const struct dsv4_msg_ready *rd = m.body;
        struct child *c = &s->ch[rd->role];
        if ((pid_t)rd->pid != c->pid || c->ready)
            continue;
        c->ready = true;
        c->beat_ns = c->still_since_ns = dsv4_now_ns();
        c->progress = atomic_load(&c->stats->progress);
        dsv4_log_info("supervisor", "%s[%d] ready", dsv4_role_name(c->role), (int)c->pid);
        if (atomic_load(&c->stats->restarts) > 0)
            notify_peers(s, c->role);
    }
}

/* Reap children: schedule restarts, or give up on exit 78 and crash loops. */
static void reap(struct sv *s, int *ready_fd)
{
    int st;
    pid_t pid;
    while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
        for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
            struct child *c = &s->ch[r];
            if (c->pid != pid)
                continue;
            char why[64];
            describe_status(st, why, sizeof(why));
            c->pid = 0;
            c->ready = false;
            atomic_store(&c->stats->state, DSV4_STATE_DOWN);
            if (s->stopping) {
                dsv4_log_info("supervisor", "%s[%d] %s", dsv4_role_name(r), (int)pid, why);
                break;
            }
            uint64_t now = dsv4_now_ns();
            memmove(c->fail_ns + 1, c->fail_ns, sizeof(c->fail_ns) - sizeof(c->fail_ns[0]));
            c->fail_ns[0] = now;
            c->n_fail++;
            int recent = 0;
            for (int i = 0; i < CRASH_LOOP_N && i < c->n_fail; i++)
                recent += now - c->fail_ns[i] < CRASH_LOOP_WINDOW_NS;
            if ((WIFEXITED(st) && WEXITSTATUS(st) == DSV4_EXIT_CONFIG) || recent >= CRASH_LOOP_N) {
                atomic_store(&c->stats->state, DSV4_STATE_FAILED);
                say(ready_fd, "error: %s[%d] %s%s; not restarting (see %s/%s.log)",
                    dsv4_role_name(r), (int)pid, why,
                    recent >= CRASH_LOOP_N ? ", crash loop" : " (bad config)", s->dir,
                    dsv4_role_name(r));
                s->stopping = true;
                break;
            }
            uint64_t delay = (100 * DSV4_NSEC_PER_MSEC) << DSV4_MIN(recent - 1, 8);
            delay = DSV4_MIN(delay, 30 * DSV4_NSEC_PER_SEC);
            c->restart_at = now + delay;
            dsv4_log_warn("supervisor", "%s[%d] %s, restarting in %llu ms (%d/%d)",
                          dsv4_role_name(r), (int)pid, why,
                          (unsigned long long)(delay / 1000000), recent, CRASH_LOOP_N);
        }
    }
}

/*
 * The watchdog: a ready daemon that is alive but hung is SIGKILLed; reap()
 * then restarts it like any other death (the scheduler replays, the client
 * resumes). Two signs: no HEARTBEAT for watchdog_s (heartbeats come from the
 * daemon's working thread, between messages and after every layer of a
 * forward, so a stopped, deadlocked or spinning daemon goes quiet while a
 * long prefill does not), or, for compute, a progress counter (bumped after
 * every layer) that has not moved for stall_s while there is work: a command
 * in hand (its `active` gauge) or requests running in the scheduler, which
 * always has a command out to compute then. Killing compute is also the
 * remedy when the scheduler lost a reply: PEER_RESTARTED makes it replay.
 * The scheduler's loop never blocks, so its heartbeats are enough; the
 * fetcher heartbeats from its control thread (a stopped or hung process goes
 * quiet; its I/O thread is bounded by the kernel's reads).
 */
static void watchdog(struct sv *s, uint64_t now)
{
    uint64_t hb_ns = (uint64_t)(s->o->watchdog_s * 1e9), stall_ns = (uint64_t)(s->o->stall_s * 1e9);
    /* We did not run for a while (SIGSTOP, a starved machine; a turn waits 200 ms at most):
     * the daemons' heartbeats of that time are still on their way in (ZeroMQ's I/O thread
     * was stopped too), not missing. Judge from now on. */
    bool gap = s->watched_ns && now - s->watched_ns > DSV4_NSEC_PER_SEC;
    if (gap)
        dsv4_log_warn("supervisor", "did not run for %.1f s: watchdog clocks restarted",
                      (double)(now - s->watched_ns) / 1e9);
    s->watched_ns = now;
    for (int r = 0; r < DSV4_ROLE_COUNT && !s->stopping; r++) {
        struct child *c = &s->ch[r];
        if (!c->pid || !c->ready || c->killed)
            continue;
        if (gap)
            c->beat_ns = c->still_since_ns = now;
        uint64_t progress = atomic_load(&c->stats->progress);
        bool work = r == DSV4_ROLE_COMPUTE &&
                    (atomic_load(&c->stats->active) || atomic_load(&s->ch[DSV4_ROLE_SCHEDULER].stats->active));
        if (progress != c->progress || !work) {
            c->progress = progress;
            c->still_since_ns = now;
        }
        char why[96];   /* the limit that was passed, not the (poll-dependent) time waited */
        if (hb_ns && now - c->beat_ns > hb_ns)
            snprintf(why, sizeof(why), "hung: no heartbeat for %g s", s->o->watchdog_s);
        else if (stall_ns && now - c->still_since_ns > stall_ns)
            snprintf(why, sizeof(why), "stalled: progress %llu unchanged for %g s with work pending",
                     (unsigned long long)progress, s->o->stall_s);
        else
            continue;
        dsv4_log_warn("supervisor", "%s[%d] %s: SIGKILL", dsv4_role_name(r), (int)c->pid, why);
        atomic_fetch_add(&c->stats->watchdog_kills, 1);
        c->killed = true;
        kill(c->pid, SIGKILL);
    }
}

static void handle_signals(struct sv *s, int *ready_fd)
{
    struct signalfd_siginfo si;
    while (read(s->sigfd, &si, sizeof(si)) == sizeof(si)) {
        if (si.ssi_signo == SIGCHLD)
            reap(s, ready_fd);
        else if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
            if (!s->stopping)
                dsv4_log_info("supervisor", "stopping on %s", sigabbrev_np((int)si.ssi_signo));
            s->stopping = true;
        }
    }
}

/* One poll round: control messages, signals, due restarts. */
static void turn(struct sv *s, int timeout_ms, int *ready_fd)
{
    zmq_pollitem_t it[2] = { { s->ctl, 0, ZMQ_POLLIN, 0 }, { NULL, s->sigfd, ZMQ_POLLIN, 0 } };
    zmq_poll(it, 2, timeout_ms);
    if (it[1].revents & ZMQ_POLLIN)
        handle_signals(s, ready_fd);
    if (it[0].revents & ZMQ_POLLIN)
        on_ctl(s);
    uint64_t now = dsv4_now_ns();
    watchdog(s, now);
    for (int r = 0; r < DSV4_ROLE_COUNT && !s->stopping; r++) {
        struct child *c = &s->ch[r];
        if (c->restart_at && now >= c->restart_at) {
            c->restart_at = 0;
            atomic_fetch_add(&c->stats->restarts, 1);
            if (spawn(s, c) < 0)
                c->restart_at = now + DSV4_NSEC_PER_SEC;
        }
    }
}

static void stop_all(struct sv *s)
{
    struct dsv4_msg_stop st = { 0, 0 };
    struct dsv4_wire_buf b = { 0 };
    dsv4_wire_simple(&b, DSV4_MSG_STOP, &st, sizeof(st));
    int dummy = -1;
    for (int r = DSV4_ROLE_COUNT - 1; r >= 0; r--) {  /* api, scheduler, compute, fetcher */
        struct child *c = &s->ch[r];
        c->restart_at = 0;
        if (!c->pid)
            continue;
        const char *id = dsv4_role_name(r);
        dsv4_zsend(s->ctl, id, strlen(id), &b, 1);
        kill(c->pid, SIGTERM);
        uint64_t t0 = dsv4_now_ns();
        int wait_ms = 10;
        while (c->pid && dsv4_now_ns() - t0 < STOP_GRACE_NS) {
            turn(s, wait_ms, &dummy);
            wait_ms = DSV4_MIN(wait_ms * 2, 200);
        }
        if (c->pid) {
            dsv4_log_warn("supervisor", "%s[%d] did not stop in time: SIGKILL", id, (int)c->pid);
            kill(c->pid, SIGKILL);
            while (c->pid)
                turn(s, 50, &dummy);
        }
    }
    dsv4_wire_buf_free(&b);
}

/* Every segment a set with this id may have made. */
static void unlink_segments(const char *id)
{
    char name[96];
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        if (dsv4_shm_name(id, dsv4_role_name(r), name, sizeof(name), NULL) == 0)
            shm_unlink(name);
    if (dsv4_shm_name(id, "experts", name, sizeof(name), NULL) == 0)
        shm_unlink(name);
}

static void cleanup(struct sv *s)
{
    dsv4_metrics_stop(s->metrics);  /* before the pages it reads go */
    s->metrics = NULL;
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        dsv4_stats_unmap(s->ch[r].stats);
        dsv4_stats_unlink(s->dir, r);
    }
    /* the fetcher removes its segment on SIGTERM, not after a SIGKILL: one list of what a
     * set leaves, shared with `dsv4ctl stop` */
    dsv4_rundir_remove_leftovers(s->dir, true);
    if (s->shm_id[0])   /* by the id we made, too: RUN_DIR/shm-id may not read back (EIO) */
        unlink_segments(s->shm_id);
    if (s->api_fd >= 0)
        close(s->api_fd);
    if (s->ctl)
        zmq_close(s->ctl);
    if (s->zctx)
        zmq_ctx_term(s->zctx);
    dsv4_zin_free(&s->in);
    if (s->lockfd >= 0) {
        if (ftruncate(s->lockfd, 0) < 0)
            dsv4_log_debug("supervisor", "truncate lock: %s", strerror(errno));
        close(s->lockfd);
    }
}

/* RUN_DIR/metrics-addr or api-addr: whole or not at all (status and clients read it). */
static void write_addr(const char *path, const char *bound)
{
    char line[160];
    int n = snprintf(line, sizeof(line), "%s\n", bound);
    struct dsv4_err err;
    if (dsv4_write_file_atomic(path, line, (size_t)n, &err) < 0)
        dsv4_log_warn("supervisor", "%s", err.msg);
}

/*
 * A default address (not asked for) that someone else holds — another set on this host, or
 * another user squatting on it — must neither stop the set nor leave it without the service:
 * the same host on any free port, with a warning naming both (status and RUN_DIR/<name>-addr
 * give the one in use). An address asked for must work.
 */
static const char *default_fallback(const char *what, const char *addr, const char *why,
                                    char *buf, size_t n)
{
    const char *colon = strrchr(addr, ':');
    if (!colon || colon == addr)
        return NULL;
    snprintf(buf, n, "%.*s:0", (int)(colon - addr), addr);
    dsv4_log_warn("supervisor", "%s; %s on another port (the address in use is in dsv4ctl status)",
                  why, what);
    return buf;
}

/* The exporter runs on its own thread here: this process maps every stats page and outlives
 * the daemons. Started after the signal mask is set, so its thread inherits it. */
static int start_metrics(struct sv *s, int *ready_fd)
{
    char *bound = s->metrics_addr, path[DSV4_PATH_MAX + 32];
    snprintf(path, sizeof(path), "%s/metrics-addr", s->dir);
    unlink(path);   /* a crashed set's */
    if (!s->o->metrics_addr)
        return 0;
    s->view.dir = s->dir;
    s->view.supervisor_pid = (int)getpid();
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        s->view.page[r] = s->ch[r].stats;
        s->view.in_set[r] = s->ch[r].present;
    }
    struct dsv4_err err;
    char alt[160];
    const char *other = NULL;
    int rc = dsv4_metrics_start(s->o->metrics_addr, &s->view, &s->metrics, bound,
                                sizeof(s->metrics_addr), &err);
    if (rc == -EADDRINUSE && !s->o->metrics_explicit &&
        (other = default_fallback("metrics", s->o->metrics_addr, err.msg, alt, sizeof(alt))))
        rc = dsv4_metrics_start(other, &s->view, &s->metrics, bound, sizeof(s->metrics_addr),
                                &err);
    if (rc < 0) {
        if (s->o->metrics_explicit) {
            say(ready_fd, "error: %s", err.msg);
            return -1;
        }
        dsv4_log_warn("supervisor", "%s; serving no metrics", err.msg);
        return 0;
    }
    s->view.metrics_addr = bound;
    dsv4_log_info("supervisor", "metrics on http://%s/metrics", bound);
    write_addr(path, bound);
    return 0;
}

/* dsv4-api's socket, bound here (port 0 resolved, RUN_DIR/api-addr) so it outlives restarts of
 * dsv4-api. Like the metrics: a busy default address moves to another port (a warning); an
 * address asked for must work. */
static int start_api(struct sv *s, int *ready_fd)
{
    char bound[128], path[DSV4_PATH_MAX + 32];
    struct child *c = &s->ch[DSV4_ROLE_API];
    snprintf(path, sizeof(path), "%s/api-addr", s->dir);
    unlink(path);   /* a crashed set's */
    if (!s->o->api_addr || !c->present) {
        if (s->o->api_addr && s->o->api_explicit) {
            say(ready_fd, "error: dsv4-api not found next to dsv4ctl");
            return -1;
        }
        c->present = false;
        return 0;
    }
    snprintf(path, sizeof(path), "%s/tokenizer.json", s->o->model);
    if (access(path, R_OK) != 0) {  /* text in and out needs the model's tokenizer */
        c->present = false;
        if (s->o->api_explicit) {
            say(ready_fd, "error: --api-addr: the model has no tokenizer.json");
            return -1;
        }
        dsv4_log_warn("supervisor", "the model has no tokenizer.json; serving no API");
        return 0;
    }
    snprintf(path, sizeof(path), "%s/api-addr", s->dir);
    struct dsv4_err err;
    s->api_fd = dsv4_tcp_listen("api", s->o->api_addr, 128, bound, sizeof(bound), &err);
    char alt[160];
    const char *other = NULL;
    if (s->api_fd == -EADDRINUSE && !s->o->api_explicit &&
        (other = default_fallback("API", s->o->api_addr, err.msg, alt, sizeof(alt))))
        s->api_fd = dsv4_tcp_listen("api", other, 128, bound, sizeof(bound), &err);
    if (s->api_fd < 0) {
        c->present = false;
        if (s->o->api_explicit) {
            say(ready_fd, "error: %s", err.msg);
            return -1;
        }
        dsv4_log_warn("supervisor", "%s; serving no API", err.msg);
        return 0;
    }
    dsv4_log_info("supervisor", "API on http://%s/v1", bound);
    write_addr(path, bound);
    return 0;
}

int dsv4_supervise(const struct supervisor_opts *o, int ready_fd)
{
    static struct sv s;
    memset(&s, 0, sizeof(s));
    s.o = o;
    s.lockfd = -1;
    s.sigfd = -1;
    s.api_fd = -1;
    dsv4_rundir_resolve(o->run_dir, s.dir);
    struct dsv4_err err;
    char path[DSV4_PATH_MAX + 32], ep[DSV4_PATH_MAX];
    if (dsv4_rundir_create(s.dir, &err) < 0 || dsv4_rundir_check_dedicated(s.dir, &err) < 0 ||
        dsv4_rundir_endpoint(s.dir, "compute", ep, &err) < 0) {
        say(&ready_fd, "error: run dir: %s", err.msg);
        return DSV4_EXIT_NOPERM;
    }
    snprintf(path, sizeof(path), "%s/supervisor.lock", s.dir);
    s.lockfd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (s.lockfd < 0) {     /* an I/O error, not another set: say which */
        say(&ready_fd, "error: %s: %s", path, strerror(errno));
        return DSV4_EXIT_CANTCREAT;
    }
    if (flock(s.lockfd, LOCK_EX | LOCK_NB) < 0) {
        say(&ready_fd, "error: daemons already running in %s (pid %d)", s.dir,
            dsv4_rundir_supervisor_pid(s.dir));
        close(s.lockfd);
        return DSV4_EXIT_UNAVAILABLE;
    }
    char pid_line[24];
    int pl = snprintf(pid_line, sizeof(pid_line), "%d\n", (int)getpid());
    if (ftruncate(s.lockfd, 0) < 0 || pwrite(s.lockfd, pid_line, (size_t)pl, 0) != pl) {
        /* `stop` finds us by this pid: without it the set could not be stopped */
        say(&ready_fd, "error: %s: cannot write our pid: %s", path, strerror(errno ? errno : EIO));
        close(s.lockfd);
        s.lockfd = -1;
        return DSV4_EXIT_CANTCREAT;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGHUP);
    sigaddset(&set, SIGPIPE);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    s.sigfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    int rc = 0;
    /* A fresh random id names this start's segments (common/shm.h); what a crashed set left
     * under the previous id is removed first. */
    char id[DSV4_SHM_ID_LEN + 1], old[DSV4_SHM_ID_LEN + 1];
    if (dsv4_shm_id_new(s.dir, id, old, &err) < 0) {
        say(&ready_fd, "error: %s", err.msg);
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    if (old[0])
        unlink_segments(old);
    memcpy(s.shm_id, id, sizeof(id));
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        static const char *const exes[] = { "dsv4-fetcher", "dsv4-compute", "dsv4-scheduler",
                                            "dsv4-api" };
        struct child *c = &s.ch[r];
        c->role = r;
        c->present = dsv4_daemon_exe(exes[r], c->exe, sizeof(c->exe)) != NULL;
        if (dsv4_stats_create(s.dir, r, &c->stats, &err) < 0) {
            say(&ready_fd, "error: %s", err.msg);
            rc = DSV4_EXIT_OSERR;
            goto out;
        }
        atomic_store(&c->stats->state, DSV4_STATE_DOWN);
        atomic_store(&c->stats->pid, 0);
        if (r == DSV4_ROLE_COMPUTE)
            atomic_store(&c->stats->mem_budget_bytes, o->budget_bytes);
        if (!c->present && r != DSV4_ROLE_FETCHER && r != DSV4_ROLE_API) {
            say(&ready_fd, "error: %s not found next to dsv4-supervisor", exes[r]);
            rc = DSV4_EXIT_NOINPUT;
            goto out;
        }
    }
    if (start_api(&s, &ready_fd) < 0 || start_metrics(&s, &ready_fd) < 0) {
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    char model[DSV4_PATH_MAX];
    if (!realpath(o->model, model)) {
        say(&ready_fd, "error: model %s: %s", o->model, strerror(errno));
        rc = DSV4_EXIT_NOINPUT;
        goto out;
    }
    snprintf(path, sizeof(path), "%s/model", s.dir);
    char line[DSV4_PATH_MAX + 2];
    int ln = snprintf(line, sizeof(line), "%s\n", model);
    if (dsv4_write_file_atomic(path, line, (size_t)ln, &err) < 0) {    /* clients read it */
        say(&ready_fd, "error: run dir: %s", err.msg);
        rc = DSV4_EXIT_CANTCREAT;
        goto out;
    }
    s.zctx = dsv4_zctx_new();
    s.ctl = dsv4_zsock(s.zctx, ZMQ_ROUTER, NULL);
    dsv4_rundir_endpoint(s.dir, "ctl", ep, &err);
    if (zmq_bind(s.ctl, ep) < 0) {
        say(&ready_fd, "error: bind %s: %s", ep, zmq_strerror(errno));
        rc = DSV4_EXIT_OSERR;
        goto out;
    }
    for (int r = 0; r < DSV4_ROLE_COUNT && !s.stopping; r++) {
        struct child *c = &s.ch[r];
        if (!c->present)
            continue;
        if (spawn(&s, c) < 0) {
            say(&ready_fd, "error: fork: %s", strerror(errno));
            s.stopping = true;
            break;
        }
        uint64_t t0 = dsv4_now_ns();
        while (!c->ready && !s.stopping) {
            turn(&s, 100, &ready_fd);
            if (!c->pid || c->restart_at) {
                say(&ready_fd, "error: %s did not start (see %s/%s.log)", dsv4_role_name(r),
                    s.dir, dsv4_role_name(r));
                s.stopping = true;
            } else if (dsv4_now_ns() - t0 > READY_TIMEOUT_NS) {
                say(&ready_fd, "error: %s not ready after %llu s", dsv4_role_name(r),
                    (unsigned long long)(READY_TIMEOUT_NS / DSV4_NSEC_PER_SEC));
                s.stopping = true;
            }
        }
    }
    if (!s.stopping)
        say(&ready_fd, "ok");
    while (!s.stopping)
        turn(&s, 200, &ready_fd);
    stop_all(&s);
    for (int r = 0; r < DSV4_ROLE_COUNT; r++)
        if (s.ch[r].stats && atomic_load(&s.ch[r].stats->state) == DSV4_STATE_FAILED)
            rc = DSV4_EXIT_UNAVAILABLE;
out:
    if (ready_fd >= 0)
        say(&ready_fd, "error: supervisor exiting");
    dsv4_log_info("supervisor", "stopped");
    cleanup(&s);
    return rc;
}
