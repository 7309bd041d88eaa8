/* SPDX-License-Identifier: MIT */
/*
 * Process exit statuses, one table for dsv4ctl, the daemons and the supervisor (sysexits.h
 * numbers). The supervisor reads them: a daemon that exits DSV4_EXIT_CONFIG is never
 * restarted (a bad model or option is not fixed by respawning); any other death is.
 */
#pragma once

enum dsv4_exit {
    DSV4_EXIT_OK = 0,
    DSV4_EXIT_FAIL = 1,         /* the check ran and found problems */
    DSV4_EXIT_USAGE = 64,       /* bad command line */
    DSV4_EXIT_DATAERR = 65,     /* bad input data */
    DSV4_EXIT_NOINPUT = 66,     /* an input file or executable is missing */
    DSV4_EXIT_UNAVAILABLE = 69, /* the service cannot run (budget, set already running, ...) */
    DSV4_EXIT_SOFTWARE = 70,    /* internal error */
    DSV4_EXIT_OSERR = 71,       /* a system call failed (fork, bind, shm) */
    DSV4_EXIT_CANTCREAT = 73,   /* cannot create a file (run dir) */
    DSV4_EXIT_IOERR = 74,
    DSV4_EXIT_TEMPFAIL = 75,    /* busy: retry later */
    DSV4_EXIT_PROTOCOL = 76,    /* peer speaks another protocol version */
    DSV4_EXIT_NOPERM = 77,      /* run dir not ours */
    DSV4_EXIT_CONFIG = 78,      /* bad model or option: do not restart */
};
