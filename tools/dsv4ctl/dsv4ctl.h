/* SPDX-License-Identifier: MIT */
/*
 * dsv4ctl: one binary, one file per subcommand. Each subcommand is a
 * function with main()'s signature (argv[0] is the subcommand name) that
 * returns a process exit status (sysexits: 0 ok, 64 usage, 65 bad data,
 * 66 no input, 69 unavailable, 70 software, 74 I/O).
 */
#pragma once

enum {
    DSV4_EXIT_OK = 0,
    DSV4_EXIT_FAIL = 1,       /* the check ran and found problems */
    DSV4_EXIT_USAGE = 64,
    DSV4_EXIT_DATAERR = 65,
    DSV4_EXIT_NOINPUT = 66,
    DSV4_EXIT_UNAVAILABLE = 69,
    DSV4_EXIT_SOFTWARE = 70,
    DSV4_EXIT_IOERR = 74,
};

struct dsv4ctl_command {
    const char *name;
    int (*run)(int argc, char **argv);
    const char *summary;
};

/* The subcommands; the table lives in dsv4ctl.c. */
int dsv4ctl_version(int argc, char **argv);
int dsv4ctl_run(int argc, char **argv);
int dsv4ctl_score(int argc, char **argv);
int dsv4ctl_inspect(int argc, char **argv);
int dsv4ctl_tokenize(int argc, char **argv);
int dsv4ctl_detokenize(int argc, char **argv);
