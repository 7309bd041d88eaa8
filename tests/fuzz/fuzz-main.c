/* SPDX-License-Identifier: MIT */
/*
 * Corpus replay: a main() for any fuzz target, so that each corpus runs as
 * an ordinary regression test with gcc and without libFuzzer (the pattern
 * of systemd's fuzz-main). Arguments are files or directories; every file
 * (directories one level deep, in name order) is passed once to
 * LLVMFuzzerTestOneInput. A crash, sanitizer report or abort in the target
 * fails the test; a clean pass prints how many inputs ran.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv) __attribute__((weak));

static int run_file(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
        fprintf(stderr, "%s: not a regular file\n", path);
        close(fd);
        return -1;
    }
    size_t n = (size_t)st.st_size, done = 0;
    /* An exact-size heap buffer, so ASan sees any read past the input. */
    uint8_t *buf = dsv4_xmalloc(n);
    while (done < n) {
        ssize_t k = read(fd, buf + done, n - done);
        if (k <= 0) {
            fprintf(stderr, "%s: short read\n", path);
            free(buf);
            close(fd);
            return -1;
        }
        done += (size_t)k;
    }
    close(fd);
    fprintf(stderr, "input %s (%zu bytes)\n", path, n);
    LLVMFuzzerTestOneInput(buf, n);
    free(buf);
    return 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int run_dir(const char *dir, unsigned *count)
{
    DIR *d = opendir(dir);
    if (!d) {
        fprintf(stderr, "%s: %s\n", dir, strerror(errno));
        return -1;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (de->d_name[0] == '.')
            continue;
        names = dsv4_xrealloc(names, (n + 1) * sizeof(*names));
        size_t len = strlen(dir) + strlen(de->d_name) + 2;
        names[n] = dsv4_xmalloc(len);
        snprintf(names[n], len, "%s/%s", dir, de->d_name);
        n++;
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_str);
    int r = 0;
    for (size_t i = 0; i < n; i++) {
        if (r == 0 && run_file(names[i]) < 0)
            r = -1;
        else if (r == 0)
            (*count)++;
        free(names[i]);
    }
    free(names);
    return r;
}

int main(int argc, char **argv)
{
    if (LLVMFuzzerInitialize)
        LLVMFuzzerInitialize(&argc, &argv);
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    unsigned count = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "%s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (S_ISDIR(st.st_mode) ? run_dir(argv[i], &count) < 0 : run_file(argv[i]) < 0)
            return 1;
        if (!S_ISDIR(st.st_mode))
            count++;
    }
    if (count == 0) {
        fprintf(stderr, "no inputs: an empty corpus tests nothing\n");
        return 1;
    }
    printf("%u inputs ran clean\n", count);
    return 0;
}
