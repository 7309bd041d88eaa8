/* SPDX-License-Identifier: MIT */
/*
 * bench-fetcher: expert loads through dsv4-fetcher against `fio` reading the
 * same file in the same run, passes interleaved so a drifting disk cancels.
 *
 * Writes (once) a synthetic checkpoint under --dir: a Flash-shaped config
 * reduced to one layer of N routed experts and one safetensors file holding
 * their six tensors each at the real Flash sizes (13,369,344 bytes per
 * expert, random bytes, tensors not 4 KiB aligned as in the official
 * shards). Then, per run, six passes back to back:
 *   fio, fetcher (one expert per acquire), fio, fetcher (6 per acquire), fio, fetcher
 *   (one per acquire, the next queue-depth experts hinted ahead, as router lookahead does)
 * and one last fio pass after the final run. A fetcher pass is a fresh fetcher
 * (cold cache) serving every expert once in random order; with several
 * --chunk-kib values each run repeats its four passes for each, so settings
 * are compared against fio and each other in the same minutes. A fio pass
 * (tools/setup-deps.sh installs fio) reads the same file at random in spans of
 * one expert's size, every span once, with the fetcher's queue depth in
 * flight, O_DIRECT, io_uring, registered buffers: the disk's rate for this
 * pattern by a tool that is not ours. Each fetcher pass is divided by the mean
 * of the fio passes just before and just after it (linear drift cancels);
 * the median of those ratios is the figure, and beside it the passes pooled (all
 * their bytes over all their time, fetcher against the fio passes around them: on a
 * disk that switches between rates for whole passes the median of a few ratios swings;
 * the pooled figure is the time to load the same experts). Per fetcher pass also the mean
 * load time (start to READY) and the most reads in flight. CPU time of each pass (fetcher:
 * this process, client and I/O thread; fio: the child) is printed too: the
 * machine may be shared. Last, the cost of a cache hit (lease + release on a
 * cached expert) in ns.
 *
 * The expert tensors (names, dtypes, shapes, so the expert size) come from the
 * tensor inventory of the reduced config (common/inventory.c), as the fetcher's
 * plan sees them.
 *
 *   bench-fetcher --config FLASH_CONFIG.json [--dir /tmp/dsv4-bench-fetcher] [--experts 64]
 *                 [--slots 16] [--queue-depth 16] [--chunk-kib 1024[,512...]] [--runs 3]
 *                 [--fio-iodepth N]   (default: the queue depth; 1 = one expert in flight, all
 *                                      that one acquire of one expert lets the fetcher have)
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>
#include <unistd.h>

#include "config.h"
#include "fetcher.h"
#include "inventory.h"
#include "parse.h"
#include "fetcher_client.h"
#include "fetcher_io.h"
#include "fetcher_shm.h"
#include "shm.h"
#include "util.h"

static void die(const char *what)
{
    fprintf(stderr, "bench-fetcher: %s: %s\n", what, strerror(errno));
    exit(1);
}

static void write_config(const char *src, const char *dir, int n_experts)
{
    FILE *fp = fopen(src, "r");
    if (!fp)
        die(src);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, fp);
    fclose(fp);
    buf[n] = 0;
    cJSON *c = cJSON_Parse(buf);
    if (!c)
        die("config.json is not JSON");
    cJSON_ReplaceItemInObject(c, "num_hidden_layers", cJSON_CreateNumber(1));
    cJSON_ReplaceItemInObject(c, "n_routed_experts", cJSON_CreateNumber(n_experts));
    cJSON_ReplaceItemInObject(c, "num_hash_layers", cJSON_CreateNumber(0));
    int ratios[2] = { 0, 0 };
    cJSON_ReplaceItemInObject(c, "compress_ratios", cJSON_CreateIntArray(ratios, 2));
    char *text = cJSON_Print(c);
    char path[4200];
    snprintf(path, sizeof(path), "%s/config.json", dir);
    fp = fopen(path, "w");
    if (!fp || fputs(text, fp) < 0 || fclose(fp))
        die(path);
    free(text);
    cJSON_Delete(c);
}

/* The routed experts of layer 0, in name order (as safetensors writers lay tensors out). */
static uint64_t write_shard(const char *dir, const struct dsv4_inventory *inv)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    cJSON *h = cJSON_CreateObject();
    uint64_t off = 0;
    for (size_t i = 0; i < inv->n; i++) {
        const struct dsv4_inv_entry *e = &inv->entries[inv->by_name[i]];
        if (e->expert < 0 || e->block != 0)
            continue;
        cJSON *t = cJSON_AddObjectToObject(h, e->name);
        cJSON_AddStringToObject(t, "dtype", dsv4_dtype_name(e->dtype));
        double shape[2] = { (double)e->shape[0], (double)e->shape[1] };
        cJSON_AddItemToObject(t, "shape", cJSON_CreateDoubleArray(shape, (int)e->rank));
        double offs[2] = { (double)off, (double)(off + e->nbytes) };
        cJSON_AddItemToObject(t, "data_offsets", cJSON_CreateDoubleArray(offs, 2));
        off += e->nbytes;
    }
    char *text = cJSON_PrintUnformatted(h);
    cJSON_Delete(h);
    uint64_t hlen = strlen(text), total = 8 + hlen + off;
    struct stat st;
    if (stat(path, &st) == 0 && (uint64_t)st.st_size == total) {
        free(text);
        return total;
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0)
        die(path);
    if (write(fd, &hlen, 8) != 8 || write(fd, text, hlen) != (ssize_t)hlen)
        die(path);
    free(text);
    size_t blk = 8u << 20;
    uint64_t *buf = dsv4_xmalloc(blk), x = 0x9e3779b97f4a7c15ull;
    for (uint64_t done = 0; done < off;) {
        for (size_t i = 0; i < blk / 8; i++) { /* xorshift64: incompressible, cheap */
            x ^= x << 13, x ^= x >> 7, x ^= x << 17;
            buf[i] = x;
        }
        size_t n = (size_t)DSV4_MIN((uint64_t)blk, off - done);
        if (write(fd, buf, n) != (ssize_t)n)
            die(path);
        done += n;
    }
    free(buf);
    if (fsync(fd) < 0 || close(fd) < 0)
        die(path);
    return total;
}

static void drop_cache(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    int fd = open(path, O_RDONLY);
    if (fd >= 0) {
        posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
        close(fd);
    }
}

static double rusage_seconds(const struct rusage *ru)
{
    return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) +
           (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) / 1e6;
}

/*
 * fio: random O_DIRECT reads of `bs` bytes (one expert, rounded up to 4 KiB) over the
 * file, `qd` in flight, io_uring with registered buffers as the fetcher (without them fio
 * pins its pages per read and measured 0.5-0.8 GB/s where it reaches 2 GB/s with them),
 * every bs-aligned span once. Returns GB/s, or 0 when fio is missing or failed (said once
 * on stderr); *cpu_s: the child's user + system CPU seconds.
 */
static double fio_read(const char *dir, uint64_t size, uint64_t bs, uint32_t qd, double *cpu_s)
{
    char path[4200], a_file[4300], a_bs[64], a_qd[64], a_size[64];
    snprintf(path, sizeof(path), "%s/model.safetensors", dir);
    bs = (bs + 4095) / 4096 * 4096;
    snprintf(a_file, sizeof(a_file), "--filename=%s", path);
    snprintf(a_bs, sizeof(a_bs), "--bs=%llu", (unsigned long long)bs);
    snprintf(a_qd, sizeof(a_qd), "--iodepth=%u", qd);
    snprintf(a_size, sizeof(a_size), "--size=%llu", (unsigned long long)(size / bs * bs));
    char *argv[] = { "fio", "--name=dsv4-expert", a_file, "--readonly", "--direct=1",
                     "--ioengine=io_uring", "--fixedbufs", "--rw=randread", a_bs, a_qd, a_size,
                     "--randrepeat=0", "--output-format=json", NULL };
    static int warned;
    int pfd[2];
    if (pipe(pfd) < 0)
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execvp("fio", argv);
        _exit(127);
    }
    close(pfd[1]);
    size_t cap = 1 << 16, len = 0;
    char *out = dsv4_xmalloc(cap);
    for (;;) {
        if (len + 1 == cap)
            out = dsv4_xrealloc(out, cap *= 2);
        ssize_t n = read(pfd[0], out + len, cap - 1 - len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    out[len] = 0;
    close(pfd[0]);
    int st = 0;
    struct rusage ru;
    memset(&ru, 0, sizeof ru);
    while (wait4(pid, &st, 0, &ru) < 0 && errno == EINTR)
        ;
    *cpu_s = rusage_seconds(&ru);
    double gbs = 0;
    /* fio may print notes before the JSON object */
    cJSON *j = WIFEXITED(st) && WEXITSTATUS(st) == 0 && strchr(out, '{') ? cJSON_Parse(strchr(out, '{')) : NULL;
    cJSON *jobs = j ? cJSON_GetObjectItem(j, "jobs") : NULL;
    cJSON *rd = jobs ? cJSON_GetObjectItem(cJSON_GetArrayItem(jobs, 0), "read") : NULL;
    cJSON *bw = rd ? cJSON_GetObjectItem(rd, "bw_bytes") : NULL;
    if (cJSON_IsNumber(bw))
        gbs = bw->valuedouble / 1e9;
    else if (!warned++)
        fprintf(stderr, "bench-fetcher: fio %s (tools/setup-deps.sh installs it): no fio column\n",
                WIFEXITED(st) && WEXITSTATUS(st) == 127 ? "not found" : "failed");
    cJSON_Delete(j);
    free(out);
    return gbs;
}

struct runner {
    dsv4_fetcher *f;
    pthread_t th;
    dsv4_fetcher_client *c;
    char run_dir[64];
};

static void *run_thread(void *arg)
{
    dsv4_fetcher_run(arg);
    return NULL;
}

static void start(struct runner *r, const char *dir, uint32_t slots, uint32_t qd, uint32_t chunk)
{
    snprintf(r->run_dir, sizeof(r->run_dir), "/tmp/dsv4-bf-XXXXXX");
    if (!mkdtemp(r->run_dir))
        die("mkdtemp");
    char id[DSV4_SHM_ID_LEN + 1];
    struct dsv4_err err;
    if (dsv4_shm_id_new(r->run_dir, id, NULL, &err) < 0) { /* what the supervisor does */
        fprintf(stderr, "bench-fetcher: %s\n", err.msg);
        exit(1);
    }
    struct dsv4_fetcher_opts o = { .model_dir = dir, .run_dir = r->run_dir, .n_slots = slots,
                                   .queue_depth = qd, .chunk_bytes = chunk, .numa = true };
    if (dsv4_fetcher_open(&o, &r->f, &err) < 0) {
        fprintf(stderr, "bench-fetcher: %s\n", err.msg);
        exit(1);
    }
    pthread_create(&r->th, NULL, run_thread, r->f);
    if (dsv4_fetcher_client_open(r->run_dir, 10000, &r->c, &err) < 0) {
        fprintf(stderr, "bench-fetcher: %s\n", err.msg);
        exit(1);
    }
}

static void stop(struct runner *r)
{
    dsv4_fetcher_stop(r->f);
    pthread_join(r->th, NULL);
    dsv4_fetcher_free(r->f, true);
    dsv4_fetcher_client_free(r->c);
    char p[128];
    snprintf(p, sizeof(p), "%s/fetcher-hot.json", r->run_dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/fetcher.lock", r->run_dir);
    unlink(p);
    snprintf(p, sizeof(p), "%s/shm-id", r->run_dir);
    unlink(p);
    rmdir(r->run_dir);
}

/* Every expert once, random order, `batch` per acquire; with `ahead` > 0 (batch 1), the
 * client also keeps the next `ahead` experts of the order hinted (prefetch), as the engine's
 * router lookahead does, so the fetcher has its queue depth of loads to work on. Returns
 * seconds. *load_ms: the fetcher's mean time from a load's start to READY; *reads: the most
 * reads it had in flight; *hints_used: hinted loads later leased ÷ hints issued. */
static double fetch_all(struct runner *r, int n_experts, int batch, int ahead, unsigned seed,
                        double *load_ms, uint32_t *reads, double *hints_used)
{
    int *order = dsv4_xmalloc((size_t)n_experts * sizeof(int));
    for (int i = 0; i < n_experts; i++)
        order[i] = i;
    for (int i = n_experts - 1; i > 0; i--) {
        int j = rand_r(&seed) % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    const struct dsv4_fetcher_expert *v[8];
    struct dsv4_err err;
    uint64_t t0 = dsv4_now_ns();
    if (ahead > 0)
        dsv4_fetcher_client_prefetch(r->c, 0, order, DSV4_MIN(ahead, n_experts));
    for (int i = 0; i < n_experts; i += batch) {
        int n = DSV4_MIN(batch, n_experts - i);
        if (dsv4_fetcher_client_acquire(r->c, 0, order + i, n, v, &err) < 0) {
            fprintf(stderr, "bench-fetcher: %s\n", err.msg);
            exit(1);
        }
        dsv4_fetcher_client_release(r->c, 0, order + i, n);
        if (ahead > 0 && i + ahead < n_experts) /* after the release: its slot is free */
            dsv4_fetcher_client_prefetch(r->c, 0, order + i + ahead, 1);
    }
    double s = (double)(dsv4_now_ns() - t0) / 1e9;
    struct dsv4_expert_shm *sh = dsv4_fetcher_shm(r->f); /* a fresh fetcher: counters from 0 */
    *load_ms = (double)atomic_load_explicit(&sh->stats.lat_sum_us, memory_order_relaxed) /
               n_experts / 1000.0;
    *reads = dsv4_fetcher_reads_in_flight_max(r->f);
    uint64_t issued = atomic_load_explicit(&sh->stats.prefetch_issued, memory_order_relaxed);
    *hints_used = issued ? (double)atomic_load_explicit(&sh->stats.prefetch_used,
                                                        memory_order_relaxed) / (double)issued
                         : 0;
    free(order);
    return s;
}

/* User + system CPU seconds of this process (the client and the fetcher's thread). */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return rusage_seconds(&ru);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static void hardware_line(const char *dir)
{
    char model[256];
    dsv4_cpu_model(model, sizeof model);
    struct utsname u;
    uname(&u);
    double load[1] = { -1 };
    getloadavg(load, 1);
    printf("hardware: %s, %ld CPUs, Linux %s, file on %s (shared machine: other jobs run; load "
           "average %.1f at the start)\n", model, sysconf(_SC_NPROCESSORS_ONLN), u.release, dir,
           load[0]);
}

int main(int argc, char **argv)
{
    const char *config = NULL, *dir = "/tmp/dsv4-bench-fetcher";
    int n_experts = 64, runs = 3;
    uint32_t slots = 16, qd = 16, fio_qd = 0, chunks[8] = { 1u << 20 };
    int n_chunk = 1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--config"))
            config = argv[i + 1];
        else if (!strcmp(argv[i], "--dir"))
            dir = argv[i + 1];
        else if (!strcmp(argv[i], "--experts"))
            n_experts = dsv4_parse_int_or_exit("--experts", argv[i + 1], 1, 1 << 20);
        else if (!strcmp(argv[i], "--slots"))
            slots = (uint32_t)dsv4_parse_int_or_exit("--slots", argv[i + 1], 1, 1 << 24);
        else if (!strcmp(argv[i], "--fio-iodepth"))
            fio_qd = (uint32_t)dsv4_parse_int_or_exit("--fio-iodepth", argv[i + 1], 1, 4096);
        else if (!strcmp(argv[i], "--queue-depth"))
            qd = (uint32_t)dsv4_parse_int_or_exit("--queue-depth", argv[i + 1], 1, 4096);
        else if (!strcmp(argv[i], "--chunk-kib")) {
            char *list = dsv4_xstrdup(argv[i + 1]), *save = NULL;
            n_chunk = 0;
            for (char *t = strtok_r(list, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (n_chunk == (int)DSV4_ARRAY_SIZE(chunks)) {
                    fprintf(stderr, "bench-fetcher: at most %zu chunk sizes\n",
                            DSV4_ARRAY_SIZE(chunks));
                    return 64;
                }
                chunks[n_chunk++] =
                    (uint32_t)dsv4_parse_int_or_exit("--chunk-kib", t, 4, 1 << 20) * 1024;
            }
            free(list);
            if (!n_chunk)
                dsv4_parse_int_or_exit("--chunk-kib", "", 4, 1 << 20); /* says why and exits */
        }
        else if (!strcmp(argv[i], "--runs"))
            runs = dsv4_parse_int_or_exit("--runs", argv[i + 1], 1, 1000);
    }
    if (!config) {
        fprintf(stderr, "usage: bench-fetcher --config FLASH_CONFIG.json [--dir D] [--experts N] "
                        "[--slots N] [--queue-depth N] [--chunk-kib N[,N...]] [--runs N] "
                        "[--fio-iodepth N]\n");
        return 64;
    }
    if (!fio_qd)
        fio_qd = qd;
    mkdir(dir, 0755);
    write_config(config, dir, n_experts);
    struct dsv4_config cfg;
    struct dsv4_err cerr;
    if (dsv4_config_load(dir, &cfg, &cerr) < 0) {
        fprintf(stderr, "bench-fetcher: %s\n", cerr.msg);
        return 1;
    }
    struct dsv4_inventory inv;
    dsv4_inventory_build(&cfg, &inv);
    const uint64_t per = inv.expert_bytes;
    uint64_t size = write_shard(dir, &inv);
    dsv4_inventory_free(&inv);
    drop_cache(dir); /* the reads are O_DIRECT; this only frees what writing the file left */
    hardware_line(dir);
    printf("file: %d experts × %llu bytes = %.2f GB; fetcher: %u slots, queue depth %u, chunk",
           n_experts, (unsigned long long)per, (double)size / 1e9, slots, qd);
    for (int c = 0; c < n_chunk; c++)
        printf("%s %u", c ? "," : "", chunks[c] >> 10);
    printf(" KiB\n");
    printf("fio: %llu-byte random O_DIRECT reads (one expert), iodepth %u, io_uring, fixedbufs\n",
           (unsigned long long)((per + 4095) / 4096 * 4096), fio_qd);
    /* Passes: per run and chunk size, fio, fetcher 1/acq, fio, fetcher 6/acq, fio, fetcher
     * pipelined (1/acq, the next `qd` hinted); one fio last. fio[k] is the pass just before
     * fetch pass k, fio[k + 1] the one just after. The pipelined pass gets slots for its
     * hints and the lease on top of --slots, so a hint never evicts a hint not yet used. */
    enum { N_MODE = 3 };
    static const char *const mode_name[N_MODE] = { "1", "6", "1 + hints" };
    const int ahead = (int)qd;
    int n_pass = N_MODE * runs * n_chunk;
    double *fio = dsv4_xcalloc((size_t)n_pass + 1, sizeof(double));
    double *fio_cpu = dsv4_xcalloc((size_t)n_pass + 1, sizeof(double));
    double *gbs = dsv4_xcalloc((size_t)n_pass, sizeof(double));
    double *cpu = dsv4_xcalloc((size_t)n_pass, sizeof(double));
    double *load_ms = dsv4_xcalloc((size_t)n_pass, sizeof(double));
    double *hints = dsv4_xcalloc((size_t)n_pass, sizeof(double));
    uint32_t *reads = dsv4_xcalloc((size_t)n_pass, sizeof(uint32_t));
    for (int k = 0; k < n_pass; k++) {
        int mode = k % N_MODE, batch = mode == 1 ? 6 : 1, pipe = mode == 2 ? ahead : 0;
        struct runner rr;
        start(&rr, dir, pipe ? slots + (uint32_t)pipe + 2 : slots, qd,
              chunks[k / N_MODE % n_chunk]); /* before fio: nothing between */
        if (k < N_MODE * n_chunk && mode == 0)
            printf("fetcher: %s\n", dsv4_fetcher_describe(rr.f));
        fio[k] = fio_read(dir, size, per, fio_qd, &fio_cpu[k]);
        double c0 = cpu_seconds();
        double t = fetch_all(&rr, n_experts, batch, pipe, 11u + (unsigned)k, &load_ms[k],
                             &reads[k], &hints[k]);
        cpu[k] = cpu_seconds() - c0;
        stop(&rr);
        gbs[k] = (double)n_experts * (double)per / 1e9 / t;
    }
    fio[n_pass] = fio_read(dir, size, per, fio_qd, &fio_cpu[n_pass]);
    printf("\n| run | chunk KiB | per acquire | fio before GB/s | fetcher GB/s | fio after GB/s | "
           "fetcher ÷ fio | load ms | reads in flight | hints used | CPU s per GB: fio / "
           "fetcher |\n|---|---|---|---|---|---|---|---|---|---|---|\n");
    /* ratio[(chunk * N_MODE + mode) * runs + run] */
    double *ratio = dsv4_xcalloc((size_t)n_pass, sizeof(double));
    double gb = (double)n_experts * (double)per / 1e9, minfio = fio[0], maxfio = fio[0];
    for (int k = 0; k < n_pass; k++) {
        int mode = k % N_MODE, c = k / N_MODE % n_chunk, run = k / (N_MODE * n_chunk);
        double mean = (fio[k] + fio[k + 1]) / 2;
        double r = fio[k] > 0 && fio[k + 1] > 0 ? gbs[k] / mean : 0;
        ratio[(c * N_MODE + mode) * runs + run] = r;
        printf("| %d | %u | %s | %.2f | %.2f | %.2f | %.2f | %.1f | %u | %.2f | %.2f / %.2f |\n",
               run, chunks[c] >> 10, mode_name[mode], fio[k], gbs[k], fio[k + 1], r,
               load_ms[k], reads[k], hints[k], fio_cpu[k] / gb, cpu[k] / gb);
    }
    for (int k = 0; k <= n_pass; k++)
        minfio = DSV4_MIN(minfio, fio[k]), maxfio = DSV4_MAX(maxfio, fio[k]);
    printf("\nfetcher ÷ fio, each fetcher pass over the mean of the fio passes around it (goal >= "
           "0.9); fio %.2f-%.2f GB/s\n", minfio, maxfio);
    for (int c = 0; c < n_chunk; c++) {
        double med[N_MODE], lo[N_MODE], hi[N_MODE];
        for (int mode = 0; mode < N_MODE; mode++) {
            double *v = ratio + (c * N_MODE + mode) * runs;
            qsort(v, (size_t)runs, sizeof(double), cmp_double);
            med[mode] = runs % 2 ? v[runs / 2] : (v[runs / 2 - 1] + v[runs / 2]) / 2;
            lo[mode] = v[0];
            hi[mode] = v[runs - 1];
        }
        printf("chunk %u KiB: median %.2f one expert per acquire (%.2f-%.2f), %.2f six per "
               "acquire (%.2f-%.2f), %.2f one per acquire with the next %d hinted (%.2f-%.2f)\n",
               chunks[c] >> 10, med[0], lo[0], hi[0], med[1], lo[1], hi[1], med[2], ahead,
               lo[2], hi[2]);
        /* the same passes pooled: all their bytes over all their time (a pass reads the
         * same bytes, so this is the harmonic mean of the pass rates); the fio passes
         * around each fetcher pass count half each, as in the ratios */
        printf("chunk %u KiB, pooled (bytes over time of all passes): fetcher ÷ fio", chunks[c] >> 10);
        for (int mode = 0; mode < N_MODE; mode++) {
            double tf = 0, tio = 0;
            for (int run = 0; run < runs; run++) {
                const int k = (run * n_chunk + c) * N_MODE + mode;
                if (gbs[k] > 0 && fio[k] > 0 && fio[k + 1] > 0) {
                    tf += 1 / gbs[k];
                    tio += (1 / fio[k] + 1 / fio[k + 1]) / 2;
                }
            }
            printf("%s %.2f %s", mode ? "," : "", tf > 0 ? tio / tf : 0,
                   mode == 0 ? "one per acquire" : mode == 1 ? "six per acquire" : "hinted");
        }
        printf("\n");
    }
    free(ratio);
    free(fio);
    free(fio_cpu);
    free(gbs);
    free(cpu);
    free(load_ms);
    free(reads);
    free(hints);

    /* Cache hit: lease + release of a cached expert, no fetcher involvement. */
    struct runner rr;
    start(&rr, dir, slots, qd, chunks[0]);
    int id = 0;
    const struct dsv4_fetcher_expert *v;
    dsv4_fetcher_client_acquire(rr.c, 0, &id, 1, &v, NULL);
    dsv4_fetcher_client_release(rr.c, 0, &id, 1);
    int iters = 1000000;
    uint64_t t0 = dsv4_now_ns();
    for (int i = 0; i < iters; i++) {
        dsv4_fetcher_client_acquire(rr.c, 0, &id, 1, &v, NULL);
        dsv4_fetcher_client_release(rr.c, 0, &id, 1);
    }
    double ns = (double)(dsv4_now_ns() - t0) / iters;
    printf("cache hit (acquire + release of one cached expert): %.0f ns\n", ns);
    stop(&rr);
    return 0;
}
