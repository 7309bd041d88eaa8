/* SPDX-License-Identifier: MIT */
/*
 * `dsv4ctl stop [--run-dir DIR] [--timeout S]`: SIGTERM to the supervisor
 * (found through the run directory's lock), then wait until it released the
 * lock: by then it stopped scheduler, compute and fetcher in that order and
 * removed the stats pages and sockets. After --timeout (default 30 s) the
 * supervisor's process group gets SIGKILL.
 */
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv4ctl.h"
#include "parse.h"
#include "rundir.h"
#include "util.h"

static bool zombie(int pid)
{
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return true;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] == 'Z';
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
    if (pid == 0) {
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
        if (pid < 0 && waited > timeout) {
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
    for (int i = 0; sv > 0 && i < 500 && kill(sv, 0) == 0 && !zombie(sv); i++)
        usleep(10000);
    if (killed) {
        /* a killed supervisor cleaned nothing: remove what it left, and say the stop was not
         * clean (exit 1) */
        int n = dsv4_rundir_remove_leftovers(dir, true);
        fprintf(stderr, "dsv4ctl stop: the set was killed; removed %d leftover segments and "
                "sockets\n", n);
        return DSV4_EXIT_FAIL;
    }
    return DSV4_EXIT_OK;
}
