/* tw_bench.c — micro-benchmarks behind tests/bench/ (not a test; prints one JSON line per run).
 *
 *   tw_bench crc [MiB]          CRC32C throughput of the SSE4.2 and portable paths over one buffer
 *   tw_bench read FILE [LABEL]  reads every record of a TFRecord file and parses it as an Example,
 *                               touching the label and every byte of image_raw, as a trainer would
 *   tw_bench gemm M N K [TA TB] OpenBLAS sgemm throughput on that shape (row-major, optional
 *                               transposes), and the OpenBLAS core it ran on
 *   tw_bench engine-gemm M N K TA TB THREADS
 *                               the same through the CPU backend's own GEMM (cpu_gemm.h: oneDNN's where
 *                               the build has it) with that thread share */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cblas.h>

#include "cpu_gemm.h"
#include "crc32c.h"
#include "example.h"
#include "tfrecord.h"

static double now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double crc_rate(uint32_t (*f)(uint32_t, const void *, size_t), const uint8_t *buf, size_t n,
                       int reps)
{
    uint32_t acc = 0;
    double t0 = now();
    for (int i = 0; i < reps; i++)
        acc ^= f(acc & 1, buf, n); /* each pass depends on the last, so none is optimised away */
    double dt = now() - t0;
    return acc == 0x12345678u ? 0 : (double)n * reps / dt / 1e9;
}

static int bench_crc(size_t mib)
{
    size_t n = mib << 20;
    uint8_t *buf = malloc(n);
    if (!buf)
        return 1;
    for (size_t i = 0; i < n; i++)
        buf[i] = (uint8_t)(i * 2654435761u >> 24);
    int hw_ok = tw_crc32c_have_hw();
    double hw = hw_ok ? crc_rate(tw_crc32c_extend_hw, buf, n, 20) : 0;
    double port = crc_rate(tw_crc32c_extend_portable, buf, n, 4);
    int agree = !hw_ok || tw_crc32c_extend_hw(0, buf, n) == tw_crc32c_extend_portable(0, buf, n);
    printf("{\"bench\":\"crc32c\",\"buffer_mib\":%zu,\"sse42_gb_per_s\":%.2f,"
           "\"portable_gb_per_s\":%.2f,\"paths_agree\":%s}\n",
           mib, hw, port, agree ? "true" : "false");
    free(buf);
    return 0;
}

static int bench_read(const char *path, const char *label_name)
{
    tw_tfrecord_reader *r;
    tw_error err;
    double t0 = now();
    if (tw_tfrecord_reader_open(path, NULL, &r, &err) != TW_OK) {
        fprintf(stderr, "tw_bench: %s: %s\n", path, err.message);
        return 1;
    }
    const uint8_t *data;
    size_t len;
    uint64_t records = 0, bytes = 0, checksum = 0;
    tw_status s;
    while ((s = tw_tfrecord_read(r, &data, &len, &err)) == TW_OK) {
        tw_example *ex;
        if (tw_example_parse(data, len, path, -1, &ex, &err) != TW_OK)
            break;
        tw_feature f;
        if (tw_example_find(ex, label_name, &f) && f.kind == TW_FEATURE_INT64 && f.count)
            checksum += (uint64_t)f.int64s[0];
        if (tw_example_find(ex, "image_raw", &f) && f.kind == TW_FEATURE_BYTES && f.count) {
            size_t n;
            const uint8_t *p = tw_feature_bytes_at(&f, 0, &n);
            for (size_t i = 0; i < n; i++)
                checksum += p[i];
        }
        tw_example_destroy(ex);
        records++;
        bytes += len + 16;
    }
    tw_tfrecord_reader_close(r);
    if (s != TW_END) {
        fprintf(stderr, "tw_bench: %s: %s\n", path, err.message);
        return 1;
    }
    double dt = now() - t0;
    printf("{\"bench\":\"read_parse\",\"records\":%llu,\"seconds\":%.4f,\"records_per_s\":%.0f,"
           "\"mb_per_s\":%.1f,\"checksum\":%llu}\n",
           (unsigned long long)records, dt, (double)records / dt, (double)bytes / dt / 1e6,
           (unsigned long long)checksum);
    return 0;
}

/* GFLOP/s of m x n x k products through cblas_sgemm (engine 0) or tw_cpu_sgemm (engine 1, on `pool`:
 * a tower's threads, as the CPU backend gives them), repeated for half a second. */
static double gemm_rate(int engine, tw_tower_pool *pool, int m, int n, int k, int ta, int tb)
{
    float *a = calloc((size_t)m * k, sizeof(float)), *b = calloc((size_t)k * n, sizeof(float));
    float *c = calloc((size_t)m * n, sizeof(float));
    double rate = -1;
    if (!a || !b || !c)
        goto out;
    for (size_t i = 0; i < (size_t)m * k; i++)
        a[i] = (float)(i % 7) * 0.1f;
    for (size_t i = 0; i < (size_t)k * n; i++)
        b[i] = (float)(i % 5) * 0.1f;
    int reps = 0;
    double t0 = now(), dt;
    tw_error err;
    do {
        if (!engine)
            cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans,
                        m, n, k, 1.0f, a, ta ? m : k, b, tb ? k : n, 0.0f, c, n);
        else if (tw_cpu_sgemm(pool, ta, tb, m, n, k, 1.0f, a, b, 0.0f, c, &err) != TW_OK)
            goto out;
        reps++;
    } while ((dt = now() - t0) < 0.5);
    rate = 2.0 * m * n * k * reps / dt / 1e9;
out:
    free(a);
    free(b);
    free(c);
    return rate;
}

static int bench_gemm(int m, int n, int k, int ta, int tb)
{
    double rate = gemm_rate(0, NULL, m, n, k, ta, tb);
    if (rate < 0)
        return 1;
    printf("{\"bench\":\"sgemm\",\"m\":%d,\"n\":%d,\"k\":%d,\"ta\":%d,\"tb\":%d,"
           "\"gflops\":%.2f,\"openblas_core\":\"%s\",\"threads\":%d}\n",
           m, n, k, ta, tb, rate, openblas_get_corename(), openblas_get_num_threads());
    return 0;
}

static int bench_engine_gemm(int m, int n, int k, int ta, int tb, int threads)
{
    tw_cpu_gemm_threads(threads);
    tw_tower_pool *pool = NULL;
    tw_error err;
    if (threads > 1 && tw_tower_pool_create(threads, &pool, &err) != TW_OK) {
        fprintf(stderr, "tw_bench: %s\n", err.message);
        return 1;
    }
    double rate = gemm_rate(1, pool, m, n, k, ta, tb);
    tw_tower_pool_destroy(pool);
    if (rate < 0)
        return 1;
    printf("{\"bench\":\"engine_sgemm\",\"m\":%d,\"n\":%d,\"k\":%d,\"ta\":%d,\"tb\":%d,"
           "\"gflops\":%.2f,\"threads\":%d}\n",
           m, n, k, ta, tb, rate, threads);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 5 && !strcmp(argv[1], "gemm"))
        return bench_gemm(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), argc > 5 && atoi(argv[5]),
                          argc > 6 && atoi(argv[6]));
    if (argc >= 8 && !strcmp(argv[1], "engine-gemm"))
        return bench_engine_gemm(atoi(argv[2]), atoi(argv[3]), atoi(argv[4]), atoi(argv[5]),
                                 atoi(argv[6]), atoi(argv[7]));
    if (argc >= 2 && !strcmp(argv[1], "crc"))
        return bench_crc(argc > 2 ? (size_t)atoi(argv[2]) : 64);
    if (argc >= 3 && !strcmp(argv[1], "read"))
        return bench_read(argv[2], argc > 3 ? argv[3] : "label");
    fprintf(stderr, "usage: tw_bench crc [MiB] | tw_bench read FILE [LABEL] | "
                    "tw_bench gemm M N K [TA TB] | tw_bench engine-gemm M N K TA TB THREADS\n");
    return 2;
}
