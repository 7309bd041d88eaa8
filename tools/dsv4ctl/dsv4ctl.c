/* SPDX-License-Identifier: MIT */
/*
 * dsv4ctl entry point: dispatch to the subcommand named by argv[1]. Usage
 * errors are specific and go to stderr; the full help only on --help.
 */
#include "dsv4ctl.h"

#include <stdio.h>
#include <string.h>

#include "dsv4-build.h"
#include "util.h"

static const struct dsv4ctl_command commands[] = {
    { "version", dsv4ctl_version, "print the version" },
    { "run", dsv4ctl_run, "generate in-process from text or token ids (--format text|ids)" },
    { "score", dsv4ctl_score_any,
      "teacher-forced argmax and log-probabilities (--format tsv; --model: in-process, else the daemons)" },
    { "inspect", dsv4ctl_inspect, "check a checkpoint against its config and summarise it" },
    { "tokenize", dsv4ctl_tokenize, "print the token ids of a text" },
    { "detokenize", dsv4ctl_detokenize, "print the text of token ids" },
    { "cache", dsv4ctl_cache, "the model's on-disk prefix cache: status | clear" },
    { "plan", dsv4ctl_plan, "print the memory plan for a budget (--memory-gb N)" },
    { "start", dsv4ctl_start, "start the daemon set (supervisor) and wait until it serves" },
    { "stop", dsv4ctl_stop, "stop the daemon set" },
    { "status", dsv4ctl_status, "daemons, restarts, memory, queue depth (--json)" },
    { "gen", dsv4ctl_gen, "generate through the daemons (streaming)" },
};

int dsv4ctl_version(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    printf("dsv4ctl %s\n", DSV4_VERSION);
    return DSV4_EXIT_OK;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: dsv4ctl COMMAND [ARGS...]\n\ncommands:\n");
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(commands); i++)
        fprintf(f, "  %-12s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\n'dsv4ctl COMMAND --help' describes each command.\n");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return DSV4_EXIT_USAGE;
    }
    if (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
        strcmp(argv[1], "help") == 0) {
        usage(stdout);
        return DSV4_EXIT_OK;
    }
    for (size_t i = 0; i < DSV4_ARRAY_SIZE(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "dsv4ctl: unknown command '%s' (try 'dsv4ctl --help')\n", argv[1]);
    return DSV4_EXIT_USAGE;
}
