/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl stop [--run-dir DIR] [--timeout S]`: SIGTERM to the supervisor
 * (found through the run directory's lock), then wait until it released the
 * lock: by then it stopped scheduler, compute and fetcher in that order and
 * removed the stats pages and sockets. After --timeout (default 30 s) the
 * supervisor's process group gets SIGKILL.
 *
 * Then, and also when no supervisor runs (it may have been killed: its daemons follow it
 * through their parent-death signal but nobody removes what they used), stop verifies: any
 * daemon (dsv4-*) still mapping one of the set's segments or started with its run dir, or
 * recorded as the set's (a stats page's pid, the lock file's: one on its way out shows neither
 * maps nor command line) is stopped (SIGTERM, then SIGKILL; stop waits until each is gone),
 * the set's segments, sockets and address files are removed, and what was found is said; the
 * exit status is 1 when the set had to be cleaned up after, 0 for a clean stop.
 */
#include <errno.h>
#include <dirent.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "dsv4_wire.h"
#include "dsv4ctl.h"
#include "parse.h"
#include "rundir.h"
#include "shm.h"
#include "util.h"

/* A process of pid: whether it exists and has not finished (a zombie has: its parent reaps
 * it), and its start time in clock ticks since boot (/proc/PID/stat field 22), which tells a
 * reused pid from the process seen before. */
static bool running(int pid, unsigned long long *start)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');   /* the name may hold spaces and parentheses */
    char state;
    unsigned long long st;
    if (!p || sscanf(p + 1, " %c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s "
                            "%*s %*s %*s %llu", &state, &st) != 2)
        return false;
    if (start)
        *start = st;
    return state != 'Z';
}

struct member {
    int pid;
    unsigned long long start;   /* see running() */
};

/* Whether our process pid was started with `--run-dir D`, D being the directory `real`
 * (realpath'd; a relative D is taken from the process's own working directory). */
static bool started_in(int pid, const char *real)
{
    char path[64], buf[8192];
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%d", pid);
    if (!real || stat(path, &st) < 0 || st.st_uid != geteuid())
        return false;
    snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return false;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    for (size_t i = 0; i < n; i += strlen(buf + i) + 1) {
        if (strcmp(buf + i, "--run-dir") || i + 10 >= n)
            continue;
        const char *arg = buf + i + 10;
        char full[DSV4_PATH_MAX + 64], res[PATH_MAX];
        if (arg[0] == '/')
            snprintf(full, sizeof(full), "%s", arg);
        else
            snprintf(full, sizeof(full), "/proc/%d/cwd/%s", pid, arg);
        return realpath(full, res) && !strcmp(res, real);
    }
    return false;
}

/* Our daemons (dsv4-*: not a dsv4ctl client, which maps the scheduler's page too) of the set
 * named by `id` in run dir `real` (realpath'd, or NULL): those that map one of its segments
 * (every daemon maps its stats page until it exits) and those started with its run dir (a
 * daemon on its way out has unmapped them, and under a sanitizer the exit's leak check still
 * takes a while): into m[0..max), the count returned. */
static int set_members(const char *id, const char *real, struct member *m, int max)
{
    char needle[96];
    snprintf(needle, sizeof(needle), "/dsv4-%u-%s-", (unsigned)geteuid(), id);
    DIR *d = opendir("/proc");
    if (!d)
        return 0;
    int n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d))) {
        int pid = atoi(e->d_name);
        if (pid <= 0 || pid == getpid())
            continue;
        char path[64], line[512];
        snprintf(path, sizeof(path), "/proc/%d/comm", pid);
        FILE *f = fopen(path, "r");
        if (!f)
            continue;
        bool daemon = fgets(line, sizeof(line), f) && !strncmp(line, "dsv4-", 5);
        fclose(f);
        if (!daemon)
            continue;
        snprintf(path, sizeof(path), "/proc/%d/maps", pid);
        f = fopen(path, "r");   /* another user's: EACCES, not ours to look at */
        bool hit = false;
        while (f && !hit && fgets(line, sizeof(line), f))
            hit = strstr(line, needle) != NULL;
        if (f)
            fclose(f);
        hit = hit || (f && started_in(pid, real));
        if (hit && running(pid, &m[n].start))
            m[n++].pid = pid;
    }
    closedir(d);
    return n;
}

/* When a process started, in CLOCK_REALTIME seconds, from its start in clock ticks since boot. */
static double started_unix_s(unsigned long long ticks)
{
    struct timespec rt, bt;
    clock_gettime(CLOCK_REALTIME, &rt);
    clock_gettime(CLOCK_BOOTTIME, &bt);
    return (double)(rt.tv_sec - bt.tv_sec) + (double)(rt.tv_nsec - bt.tv_nsec) / 1e9 +
           (double)ticks / (double)sysconf(_SC_CLK_TCK);
}

/* Adds to m[0..*n) the process the set recorded as pid, started between lo and hi (CLOCK_REALTIME
 * seconds), when it is ours, named dsv4-*, still running and not there already. A process on
 * its way out has let go of its memory (no maps, an empty command line) some time before it
 * has finished: set_members cannot see it, only these records still name it. The start window
 * tells the recorded process from a later one given the same pid. */
static void add_recorded(long long pid, double lo, double hi, struct member *m, int *n, int max)
{
    if (pid <= 0 || pid > INT_MAX || pid == getpid() || *n >= max)
        return;
    for (int i = 0; i < *n; i++)
        if (m[i].pid == pid)
            return;
    char path[64], comm[32] = "";
    struct stat st;
    snprintf(path, sizeof(path), "/proc/%lld", pid);
    if (stat(path, &st) < 0 || st.st_uid != geteuid())
        return;
    snprintf(path, sizeof(path), "/proc/%lld/comm", pid);
    FILE *f = fopen(path, "r");
    bool named = f && fgets(comm, sizeof(comm), f) && !strncmp(comm, "dsv4-", 5);
    if (f)
        fclose(f);
    unsigned long long start;
    if (!named || !running((int)pid, &start))
        return;
    double t = started_unix_s(start);
    if (t < lo || t > hi)
        return;
    m[*n].pid = (int)pid;
    m[*n].start = start;
    (*n)++;
}

/* The set's processes as recorded: each daemon's pid in its stats page (the supervisor writes
 * it at the spawn, with the time) and the supervisor's in the lock file (written at its start,
 * which the file's mtime dates), added to m[0..*n) by add_recorded. */
static void recorded_members(const char *dir, int lock, struct member *m, int *n, int max)
{
    for (int r = 0; r < DSV4_ROLE_COUNT; r++) {
        struct dsv4_stats_shm *s;
        if (dsv4_stats_map(dir, r, false, &s, NULL) < 0)
            continue;
        double t = (double)atomic_load(&s->started_unix_ms) / 1e3;
        add_recorded((long long)atomic_load(&s->pid), t - 5, t + 5, m, n, max);
        dsv4_stats_unmap(s);
    }
    char buf[32] = "";
    struct stat st;
    int pid;
    ssize_t k = pread(lock, buf, sizeof(buf) - 1, 0);
    if (k > 0 && fstat(lock, &st) == 0) {
        buf[k] = '\0';
        buf[strcspn(buf, "\n")] = '\0';
        double t = (double)st.st_mtim.tv_sec + (double)st.st_mtim.tv_nsec / 1e9;
        if (dsv4_parse_int(buf, 1, INT32_MAX, &pid) == 0)  /* started, then wrote the file */
            add_recorded(pid, t - 120, t + 5, m, n, max);
    }
}

/* Whether m is still the process set_members saw (not finished, its pid not reused). */
static bool member_running(const struct member *m)
{
    unsigned long long start;
    return running(m->pid, &start) && start == m->start;
}

/* How many of m[0..n) are still running. */
static int still_running(const struct member *m, int n)
{
    int left = 0;
    for (int i = 0; i < n; i++)
        left += member_running(&m[i]);
    return left;
}

/*
 * What a set left behind: processes (SIGTERM, after `grace` s SIGKILL), then segments,
 * sockets and address files. Holds the run dir's lock meanwhile, so that a `start` racing
 * with us is refused instead of losing its fresh files. Returns the files removed; the
 * processes found go to *n_procs.
 */
static int sweep(const char *dir, double grace, int *n_procs)
{
    *n_procs = 0;
    char path[DSV4_PATH_MAX + 32], id[DSV4_SHM_ID_LEN + 1];
    snprintf(path, sizeof(path), "%s/supervisor.lock", dir);
    int lock = open(path, O_RDWR | O_CLOEXEC);
    if (lock < 0 || flock(lock, LOCK_EX | LOCK_NB) < 0) {
        if (lock >= 0)
            close(lock);
        return 0;   /* never started here, or a new set holds it: nothing of ours to sweep */
    }
    int n = 0;
    if (dsv4_shm_id_read(dir, id, NULL) == 0) {
        enum { MAXP = 64 };
        struct member m[MAXP];
        char real[PATH_MAX];
        *n_procs = set_members(id, realpath(dir, real) ? real : NULL, m, MAXP);
        recorded_members(dir, lock, m, n_procs, MAXP);
        for (int i = 0; i < *n_procs; i++)
            kill(m[i].pid, SIGTERM);
        /* wait for the processes themselves, not for their mappings: a daemon unmaps its
         * segments on the way out, some time before it has exited */
        uint64_t t0 = dsv4_now_ns();
        int left;
        while ((left = still_running(m, *n_procs)) > 0 &&
               (double)(dsv4_now_ns() - t0) / 1e9 < grace)
            usleep(20000);
        for (int i = 0; i < *n_procs; i++)
            if (member_running(&m[i]))
                kill(m[i].pid, SIGKILL);
        for (int i = 0; i < 250 && still_running(m, *n_procs) > 0; i++)
            usleep(20000);
        if (*n_procs)
            fprintf(stderr, "dsv4ctl stop: %d process%s of the set still ran: %s\n", *n_procs,
                    *n_procs > 1 ? "es" : "", left ? "SIGKILL" : "stopped");
    }
    n = dsv4_rundir_remove_leftovers(dir, true);
    close(lock);
    return n;
}

int dsv4ctl_stop(int argc, char **argv)
{
    static const struct option opts[] = {
        { "run-dir", required_argument, NULL, 'r' },
        { "timeout", required_argument, NULL, 't' },
        { 0 },
    };
    const char *arg = NULL;
    double timeout = 30;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        if (c == 'r')
            arg = optarg;
        else if (c == 't') {
            if (dsv4_parse_double_opt("dsv4ctl stop", "timeout", optarg, 0, 86400, &timeout) < 0)
                return DSV4_EXIT_USAGE;
        } else
            return DSV4_EXIT_USAGE;
    }
    char dir[DSV4_PATH_MAX];
    dsv4_rundir_resolve(arg, dir);
    int pid = dsv4_rundir_supervisor_pid(dir);
    if (pid == DSV4_SUPERVISOR_UNREADABLE) {  /* a set may run: never report "none" */
        fprintf(stderr, "dsv4ctl stop: %s/supervisor.lock: %s; cannot tell whether the set "
                "runs, not stopping anything\n", dir, strerror(errno));
        return DSV4_EXIT_OSERR;
    }
    if (pid == 0) {
        /* no supervisor: a set that died (SIGKILL, OOM) may have left processes and files */
        int procs, files = sweep(dir, DSV4_MIN(timeout, 5.0), &procs);
        if (procs || files) {
            fprintf(stderr, "dsv4ctl stop: no supervisor in %s: the set had died; removed %d "
                    "leftover segments and files\n", dir, files);
            return DSV4_EXIT_FAIL;
        }
        fprintf(stderr, "dsv4ctl stop: no daemons running in %s\n", dir);
        return DSV4_EXIT_OK;
    }
    int sv = pid;
    if (pid > 0)
        kill(pid, SIGTERM);
    uint64_t t0 = dsv4_now_ns();
    bool killed = false;
    while ((pid = dsv4_rundir_supervisor_pid(dir)) != 0) {
        double waited = (double)(dsv4_now_ns() - t0) / 1e9;
        if (pid == DSV4_SUPERVISOR_UNREADABLE && waited > timeout) {
            fprintf(stderr, "dsv4ctl stop: %s/supervisor.lock: %s; the set was sent SIGTERM "
                    "but whether it stopped is unknown\n", dir, strerror(errno));
            return DSV4_EXIT_OSERR;
        }
        if (pid == -1 && waited > timeout) {
            /* the lock is held but names no pid (a start that died writing it, or not ours):
             * nothing to signal; say so instead of waiting for ever */
            fprintf(stderr, "dsv4ctl stop: %s/supervisor.lock is held by a process that wrote "
                    "no pid; not stopping it (see `fuser %s/supervisor.lock`)\n", dir, dir);
            return DSV4_EXIT_UNAVAILABLE;
        }
        if (pid > 0 && waited > timeout && !killed) {
            fprintf(stderr, "dsv4ctl stop: supervisor %d still running after %g s: SIGKILL\n",
                    pid, timeout);
            kill(-pid, SIGKILL);    /* its process group: the daemons too */
            kill(pid, SIGKILL);
            killed = true;
            sv = pid;
        }
        usleep(20000);
    }
    /* the lock goes a moment before the process: wait for it to be gone (or a zombie) */
    for (int i = 0; sv > 0 && i < 500 && running(sv, NULL); i++)
        usleep(10000);
    /* verify: a clean stop left nothing; a killed supervisor cleaned nothing */
    int procs, files = sweep(dir, 5.0, &procs);
    if (killed || procs || files) {
        fprintf(stderr, "dsv4ctl stop: the set %s; removed %d leftover segments and files\n",
                killed ? "was killed" : "did not stop cleanly", files);
        return DSV4_EXIT_FAIL;
    }
    return DSV4_EXIT_OK;
}
