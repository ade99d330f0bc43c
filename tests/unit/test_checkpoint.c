/* test_checkpoint.c — the checkpoint folder: save with pruning to the newest K after the pointer moved,
 * `latest` naming the newest, TW_END with no checkpoint, leftover temporaries removed (and only ours),
 * a malformed or dangling pointer and a corrupt checkpoint reported (no silent fallback), uncommitted
 * files above the saved step pruned, steps past the 10-digit padding ordered by number, failed saves
 * (RLIMIT_FSIZE, read-only folder, a NaN or Inf parameter) leaving the previous checkpoint and pointer
 * intact, a failed pointer switch pruning nothing, and the reader: F32 only, tensors by name with shape
 * checks, metadata by key. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "checkpoint.h"
#include "child.h"

enum { W_ROWS = 3, W_COLS = 4 };

typedef struct {
    char root[512]; /* scratch folder */
    char dir[600];  /* root/ckpt: the checkpoint folder, created by the first save */
} fixture;

/* ---- helpers ---- */

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    if (tw_test_mkdtemp(f->root, sizeof f->root, "checkpoint") != 0)
        return -1;
    snprintf(f->dir, sizeof f->dir, "%s/ckpt", f->root);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    chmod(f->dir, 0755);
    tw_test_rmdir(f->root);
    free(f);
    return 0;
}

/* The files of dir, sorted, joined by spaces. */
static void listing(const char *dir, char *out, size_t size)
{
    struct dirent **names;
    int n = scandir(dir, &names, NULL, alphasort);
    assert_true(n >= 0);
    out[0] = 0;
    for (int i = 0; i < n; i++) {
        if (names[i]->d_name[0] != '.')
            snprintf(out + strlen(out), size - strlen(out), "%s%s", out[0] ? " " : "",
                     names[i]->d_name);
        free(names[i]);
    }
    free(names);
}

static void expect_listing(const char *dir, const char *want)
{
    char got[4096];
    listing(dir, got, sizeof got);
    assert_string_equal(got, want);
}

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[2304];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    fputs(text, fp);
    fclose(fp);
}

/* Saves a checkpoint whose values encode step: w[i] = step + i / 16, b = -step. */
static tw_status save(const char *dir, int64_t step, int keep, tw_error *err)
{
    float w[W_ROWS * W_COLS], b = -(float)step;
    for (int i = 0; i < W_ROWS * W_COLS; i++)
        w[i] = (float)step + (float)i / 16.0f;
    char step_text[32];
    snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    tw_ckpt_tensor t[] = {{.name = "layer0/w", .data = w, .rank = 2, .shape = {W_ROWS, W_COLS}},
                          {.name = "layer0/b", .data = &b, .rank = 0}};
    tw_ckpt_meta m[] = {{"format", TW_CHECKPOINT_FORMAT}, {"step", step_text}};
    return tw_checkpoint_save(dir, step, keep, t, 2, m, 2, err);
}

static void save_ok(const char *dir, int64_t step, int keep)
{
    tw_error err;
    if (save(dir, step, keep, &err) != TW_OK)
        fail_msg("save %lld: %s", (long long)step, err.message);
}

/* Opens the latest checkpoint of dir and checks it holds step's values. */
static void expect_latest(const char *dir, int64_t step)
{
    tw_checkpoint *c;
    tw_error err;
    if (tw_checkpoint_open_latest(dir, &c, &err) != TW_OK)
        fail_msg("open_latest: %s", err.message);
    char want_path[1024], step_text[32];
    snprintf(want_path, sizeof want_path, "%s/ckpt-%010lld.safetensors", dir, (long long)step);
    assert_string_equal(tw_checkpoint_path(c), want_path);
    snprintf(step_text, sizeof step_text, "%lld", (long long)step);
    assert_string_equal(tw_checkpoint_meta(c, "step"), step_text);
    assert_string_equal(tw_checkpoint_meta(c, "format"), TW_CHECKPOINT_FORMAT);
    size_t count = 0;
    const float *b = tw_checkpoint_tensor(c, "layer0/b", &count);
    assert_non_null(b);
    assert_int_equal(count, 1);
    assert_true(b[0] == -(float)step);
    tw_checkpoint_free(c);
}

/* ---- the folder ---- */

static void test_save_seven_keep_three(void **state)
{
    fixture *f = *state;
    for (int64_t step = 1; step <= 7; step++)
        save_ok(f->dir, step, 3);
    expect_listing(f->dir, "ckpt-0000000005.safetensors ckpt-0000000006.safetensors "
                           "ckpt-0000000007.safetensors latest");
    char path[1024], want[1024];
    tw_error err;
    assert_int_equal(tw_checkpoint_latest(f->dir, path, sizeof path, &err), TW_OK);
    snprintf(want, sizeof want, "%s/ckpt-0000000007.safetensors", f->dir);
    assert_string_equal(path, want);
    snprintf(path, sizeof path, "%s/latest", f->dir);
    FILE *fp = fopen(path, "rb");
    char line[128] = {0};
    assert_int_equal(fread(line, 1, sizeof line - 1, fp), strlen("ckpt-0000000007.safetensors\n"));
    fclose(fp);
    assert_string_equal(line, "ckpt-0000000007.safetensors\n");
    expect_latest(f->dir, 7);
    assert_int_equal(tw_checkpoint_latest(f->dir, path, 10, &err), TW_ERR_INVALID);
}

static void test_no_checkpoint_is_end(void **state)
{
    fixture *f = *state;
    char path[1024];
    tw_error err;
    tw_checkpoint *c = (tw_checkpoint *)1;
    assert_int_equal(tw_checkpoint_latest(f->dir, path, sizeof path, &err), TW_END); /* no dir */
    assert_int_equal(tw_checkpoint_open_latest(f->dir, &c, &err), TW_END);
    assert_null(c);
    assert_int_equal(mkdir(f->dir, 0755), 0);
    assert_int_equal(tw_checkpoint_latest(f->dir, path, sizeof path, &err), TW_END); /* empty */
    /* a checkpoint without a pointer was never committed: still nothing to resume from */
    save_ok(f->dir, 3, 2);
    snprintf(path, sizeof path, "%s/latest", f->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(tw_checkpoint_latest(f->dir, path, sizeof path, &err), TW_END);
}

static void test_latest_removes_leftover_temporaries(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 1, 2);
    write_text(f->dir, "ckpt-0000000002.safetensors.tmp.Ab12Cd", "half a checkpoint");
    write_text(f->dir, "latest.tmp.XyZ123", "ckpt-0000000002.safetensors\n");
    write_text(f->dir, "notes.tmp.1", "not ours");
    write_text(f->dir, "ckpt-notes.txt", "not ours either");
    char path[1024];
    tw_error err;
    assert_int_equal(tw_checkpoint_latest(f->dir, path, sizeof path, &err), TW_OK);
    expect_listing(f->dir, "ckpt-0000000001.safetensors ckpt-notes.txt latest notes.tmp.1");
    expect_latest(f->dir, 1);
}

/* The server's listing: steps oldest first, names, sizes, the step `latest` names; nothing touched. */
static void test_listing_reads_the_folder_and_touches_nothing(void **state)
{
    fixture *f = *state;
    tw_ckpt_listing l;
    tw_error err;
    assert_int_equal(tw_checkpoint_list(f->dir, &l, &err), TW_OK); /* no folder: empty */
    assert_int_equal(l.n, 0);
    assert_int_equal(l.latest, -1);
    tw_checkpoint_listing_free(&l);
    for (int64_t step = 10; step <= 30; step += 10)
        save_ok(f->dir, step, 3);
    write_text(f->dir, "ckpt-0000000040.safetensors.tmp.Ab12Cd", "a save in progress");
    write_text(f->dir, "ckpt-notes.txt", "not ours");
    assert_int_equal(tw_checkpoint_list(f->dir, &l, &err), TW_OK);
    assert_int_equal(l.n, 3);
    for (size_t i = 0; i < l.n; i++) {
        char want[64], path[1024];
        struct stat sb;
        snprintf(want, sizeof want, "ckpt-%010d.safetensors", 10 * (int)(i + 1));
        assert_int_equal(l.entries[i].step, 10 * (int64_t)(i + 1));
        assert_string_equal(l.entries[i].file, want);
        snprintf(path, sizeof path, "%s/%s", f->dir, want);
        assert_int_equal(stat(path, &sb), 0);
        assert_int_equal(l.entries[i].bytes, (uint64_t)sb.st_size);
    }
    assert_int_equal(l.latest, 30);
    assert_string_equal(l.latest_file, "ckpt-0000000030.safetensors");
    tw_checkpoint_listing_free(&l);
    expect_listing(f->dir, "ckpt-0000000010.safetensors ckpt-0000000020.safetensors "
                           "ckpt-0000000030.safetensors ckpt-0000000040.safetensors.tmp.Ab12Cd "
                           "ckpt-notes.txt latest");
    char name[TW_CKPT_NAME_BYTES];
    assert_int_equal(tw_checkpoint_latest_name(f->dir, name, &err), TW_OK);
    assert_string_equal(name, "ckpt-0000000030.safetensors");
    write_text(f->dir, "latest", "../../etc/passwd\n"); /* a malformed pointer: no latest, no error */
    assert_int_equal(tw_checkpoint_latest_name(f->dir, name, &err), TW_END);
    assert_int_equal(tw_checkpoint_list(f->dir, &l, &err), TW_OK);
    assert_int_equal(l.n, 3);
    assert_int_equal(l.latest, -1);
    tw_checkpoint_listing_free(&l);
}

/* The server's cleanup before a trainer starts: only the temporaries of a save. */
static void test_remove_temporaries_removes_only_ours(void **state)
{
    fixture *f = *state;
    tw_error err;
    assert_int_equal(tw_checkpoint_remove_temporaries(f->dir, &err), TW_OK); /* no folder */
    save_ok(f->dir, 1, 2);
    write_text(f->dir, "ckpt-0000000002.safetensors.tmp.Ab12Cd", "half a checkpoint");
    write_text(f->dir, "latest.tmp.XyZ123", "ckpt-0000000002.safetensors\n");
    write_text(f->dir, "notes.tmp.1", "not ours");
    assert_int_equal(tw_checkpoint_remove_temporaries(f->dir, &err), TW_OK);
    expect_listing(f->dir, "ckpt-0000000001.safetensors latest notes.tmp.1");
    char dir[32];
    assert_int_equal(tw_checkpoint_dir_of("run", dir, sizeof dir), 0);
    assert_string_equal(dir, "run/checkpoints");
    assert_int_equal(tw_checkpoint_dir_of("a-run-folder-with-a-long-name", dir, sizeof dir), -1);
}

/* Writes `text` as dir/latest and expects latest() to fail with TW_ERR_CORRUPT about it. */
static void expect_bad_pointer(const char *dir, const char *text, const char *want)
{
    write_text(dir, "latest", text);
    char path[1024], lpath[1024];
    tw_error err;
    assert_int_equal(tw_checkpoint_latest(dir, path, sizeof path, &err), TW_ERR_CORRUPT);
    snprintf(lpath, sizeof lpath, "%s/latest", dir);
    assert_string_equal(err.file, lpath);
    if (!strstr(err.message, want))
        fail_msg("message '%s' lacks '%s'", err.message, want);
    tw_checkpoint *c;
    assert_int_equal(tw_checkpoint_open_latest(dir, &c, &err), TW_ERR_CORRUPT);
}

static void test_bad_pointer_is_an_error(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 4, 2);
    expect_bad_pointer(f->dir, "ckpt-0000000009.safetensors\n", "names ckpt-0000000009.safetensors, "
                                                                "which does not exist");
    expect_bad_pointer(f->dir, "ckpt-0000000004.safetensors", "one line");
    expect_bad_pointer(f->dir, "", "one line");
    expect_bad_pointer(f->dir, "../../etc/passwd\n", "one line");
    expect_bad_pointer(f->dir, "ckpt-4.safetensors\n", "one line");
    expect_bad_pointer(f->dir, "ckpt-0000000004.safetensors\nextra\n", "one line");
    char longer[200];
    memset(longer, 'x', sizeof longer - 1);
    longer[sizeof longer - 1] = 0;
    expect_bad_pointer(f->dir, longer, "longer than 64 bytes");
}

static void test_corrupt_checkpoint_is_an_error(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 1, 3);
    save_ok(f->dir, 2, 3);
    char path[1024];
    snprintf(path, sizeof path, "%s/ckpt-0000000002.safetensors", f->dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 1), 0);
    tw_checkpoint *c;
    tw_error err;
    assert_int_equal(tw_checkpoint_open_latest(f->dir, &c, &err), TW_ERR_CORRUPT);
    assert_string_equal(err.file, path);
    assert_int_equal(err.offset, sb.st_size - 1);
    assert_non_null(strstr(err.message, "truncated"));
}

static void test_uncommitted_files_above_the_step_are_pruned(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 10, 2);
    save_ok(f->dir, 20, 2);
    /* a run resumed from 10: step 20's file is from an abandoned future */
    char path[1024];
    snprintf(path, sizeof path, "%s/latest", f->dir);
    write_text(f->dir, "latest", "ckpt-0000000010.safetensors\n");
    expect_latest(f->dir, 10);
    save_ok(f->dir, 15, 2);
    expect_listing(f->dir, "ckpt-0000000010.safetensors ckpt-0000000015.safetensors latest");
    expect_latest(f->dir, 15);
}

static void test_steps_past_the_padding_order_by_number(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 9999999999, 1);
    save_ok(f->dir, 10000000000, 1);
    expect_listing(f->dir, "ckpt-10000000000.safetensors latest");
    tw_checkpoint *c;
    tw_error err;
    assert_int_equal(tw_checkpoint_open_latest(f->dir, &c, &err), TW_OK);
    assert_string_equal(tw_checkpoint_meta(c, "step"), "10000000000");
    tw_checkpoint_free(c);
    save_ok(f->dir, INT64_MAX, 2);
    expect_listing(f->dir, "ckpt-10000000000.safetensors ckpt-9223372036854775807.safetensors latest");
}

static void test_invalid_arguments_write_nothing(void **state)
{
    fixture *f = *state;
    tw_error err;
    assert_int_equal(save(f->dir, -1, 3, &err), TW_ERR_INVALID);
    assert_int_equal(save(f->dir, 1, 0, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "keep (0) >= 1"));
    struct stat sb;
    assert_int_equal(stat(f->dir, &sb), -1);
    char longdir[5000];
    memset(longdir, 'd', sizeof longdir - 1);
    longdir[sizeof longdir - 1] = 0;
    assert_int_equal(save(longdir, 1, 1, &err), TW_ERR_INVALID);
    assert_non_null(strstr(err.message, "too long"));
}

/* ---- failed saves ---- */

static void test_failed_write_keeps_previous_checkpoint(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 1, 3);
    char before[4096];
    listing(f->dir, before, sizeof before);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*old_handler)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = 64; /* the header alone is longer */
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    tw_error err;
    tw_status s = save(f->dir, 2, 3, &err);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, old_handler);

    assert_int_equal(s, TW_ERR_IO);
    assert_int_equal(err.errno_value, EFBIG);
    assert_non_null(strstr(err.file, "ckpt-0000000002.safetensors"));
    expect_listing(f->dir, before); /* no new file, no temporary, same pointer */
    expect_latest(f->dir, 1);
    save_ok(f->dir, 2, 3); /* a new save succeeds once there is room */
    expect_latest(f->dir, 2);
}

/* A NaN or Inf anywhere in the parameters: refused naming the tensor and the element (EDOM, the
 * trainer's diverged exit), nothing new in the folder, the previous checkpoint still `latest`. */
static void test_nonfinite_value_writes_nothing(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 1, 3);
    char before[4096];
    listing(f->dir, before, sizeof before);
    float w[W_ROWS * W_COLS] = {0}, b = 0.0f;
    tw_ckpt_tensor t[] = {{.name = "layer0/w", .data = w, .rank = 2, .shape = {W_ROWS, W_COLS}},
                          {.name = "layer0/b", .data = &b, .rank = 0}};
    static const struct {
        int tensor, element;
        float value;
        const char *want;
    } cases[] = {
        {0, 7, NAN, "tensor 'layer0/w' element 7 is NaN"},
        {0, W_ROWS * W_COLS - 1, -INFINITY, "tensor 'layer0/w' element 11 is -Inf"},
        {1, 0, INFINITY, "tensor 'layer0/b' element 0 is +Inf"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        float *slot = cases[i].tensor ? &b : &w[cases[i].element];
        *slot = cases[i].value;
        tw_error err;
        assert_int_equal(tw_checkpoint_save(f->dir, 2, 3, t, 2, NULL, 0, &err), TW_ERR_INVALID);
        assert_int_equal(err.errno_value, EDOM);
        assert_int_equal(tw_child_exit_code(&err), TW_EXIT_DIVERGED);
        if (!strstr(err.message, cases[i].want))
            fail_msg("case %zu: '%s' lacks '%s'", i, err.message, cases[i].want);
        assert_non_null(strstr(err.file, "ckpt-0000000002.safetensors"));
        expect_listing(f->dir, before); /* no new file, no temporary, same pointer */
        expect_latest(f->dir, 1);
        *slot = 0.0f;
    }
    assert_int_equal(tw_checkpoint_save(f->dir, 2, 3, t, 2, NULL, 0, NULL), TW_OK);
}

static void test_failed_pointer_switch_prunes_nothing(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 1, 1);
    /* `latest` replaced by a non-empty folder: renaming the new pointer over it fails */
    char path[1024];
    snprintf(path, sizeof path, "%s/latest", f->dir);
    assert_int_equal(unlink(path), 0);
    assert_int_equal(mkdir(path, 0755), 0);
    write_text(path, "x", "");
    tw_error err;
    assert_int_equal(save(f->dir, 2, 1, &err), TW_ERR_IO);
    assert_string_equal(err.file, path);
    /* the checkpoint is durable but uncommitted, and the old one was not pruned */
    expect_listing(f->dir, "ckpt-0000000001.safetensors ckpt-0000000002.safetensors latest");
}

static void test_read_only_folder_keeps_previous_checkpoint(void **state)
{
    fixture *f = *state;
    if (geteuid() == 0)
        skip(); /* root writes into a read-only folder anyway */
    save_ok(f->dir, 1, 3);
    assert_int_equal(chmod(f->dir, 0555), 0);
    tw_error err;
    assert_int_equal(save(f->dir, 2, 3, &err), TW_ERR_IO);
    assert_int_equal(err.errno_value, EACCES);
    assert_int_equal(chmod(f->dir, 0755), 0);
    expect_listing(f->dir, "ckpt-0000000001.safetensors latest");
    expect_latest(f->dir, 1);
}

/* ---- the reader ---- */

static void test_fetch_checks_names_and_shapes(void **state)
{
    fixture *f = *state;
    save_ok(f->dir, 5, 1);
    tw_checkpoint *c;
    tw_error err;
    assert_int_equal(tw_checkpoint_open_latest(f->dir, &c, &err), TW_OK);
    float w[W_ROWS * W_COLS], b = 0;
    const int64_t shape[] = {W_ROWS, W_COLS}, transposed[] = {W_COLS, W_ROWS};
    assert_int_equal(tw_checkpoint_fetch(c, "layer0/w", 2, shape, w, &err), TW_OK);
    for (int i = 0; i < W_ROWS * W_COLS; i++)
        assert_true(w[i] == 5.0f + (float)i / 16.0f);
    assert_int_equal(tw_checkpoint_fetch(c, "layer0/b", 0, NULL, &b, &err), TW_OK);
    assert_true(b == -5.0f);
    assert_int_equal(tw_checkpoint_fetch(c, "layer0/w", 2, transposed, w, &err), TW_ERR_CORRUPT);
    assert_string_equal(err.file, tw_checkpoint_path(c));
    assert_non_null(strstr(err.message, "tensor 'layer0/w' has shape [3, 4] but the model expects "
                                        "[4, 3]"));
    assert_int_equal(tw_checkpoint_fetch(c, "layer0/w", 1, shape, w, &err), TW_ERR_CORRUPT);
    assert_int_equal(tw_checkpoint_fetch(c, "layer1/w", 2, shape, w, &err), TW_ERR_CORRUPT);
    assert_non_null(strstr(err.message, "no tensor 'layer1/w'"));
    assert_null(tw_checkpoint_tensor(c, "layer1/w", NULL));
    assert_null(tw_checkpoint_meta(c, "nope"));
    tw_checkpoint_free(c);
    tw_checkpoint_free(NULL);
}

static void test_read_refuses_other_dtypes(void **state)
{
    fixture *f = *state;
    static const char header[] = "{\"q\":{\"dtype\":\"U8\",\"shape\":[4],\"data_offsets\":[0,4]}}";
    char path[1024];
    snprintf(path, sizeof path, "%s/u8.safetensors", f->root);
    FILE *fp = fopen(path, "wb");
    uint8_t len[8] = {sizeof header - 1};
    fwrite(len, 1, 8, fp);
    fwrite(header, 1, sizeof header - 1, fp);
    fwrite("abcd", 1, 4, fp);
    fclose(fp);
    tw_checkpoint *c;
    tw_error err;
    assert_int_equal(tw_checkpoint_read(path, &c, &err), TW_ERR_UNSUPPORTED);
    assert_null(c);
    assert_string_equal(err.file, path);
    assert_int_equal(err.offset, 8 + sizeof header - 1);
    assert_non_null(strstr(err.message, "tensor 'q' is U8; checkpoints hold F32 only"));
}

/* A checkpoint of another format (a newer Tower's) is refused by name; one without "format" (another tool's
 * safetensors) is read for its tensors. */
static void test_read_refuses_an_unknown_format(void **state)
{
    fixture *f = *state;
    float w = 1.0f;
    tw_ckpt_tensor t[] = {{.name = "w", .data = &w, .rank = 0}};
    tw_ckpt_meta newer[] = {{"format", "tower-checkpoint-2"}, {"step", "1"}};
    tw_error err;
    assert_int_equal(tw_checkpoint_save(f->dir, 1, 3, t, 1, newer, 2, &err), TW_OK);
    tw_checkpoint *c = NULL;
    assert_int_equal(tw_checkpoint_open_latest(f->dir, &c, &err), TW_ERR_UNSUPPORTED);
    assert_null(c);
    assert_non_null(strstr(err.message, "format 'tower-checkpoint-2'"));
    assert_non_null(strstr(err.message, TW_CHECKPOINT_FORMAT));
    tw_ckpt_meta plain[] = {{"step", "2"}};
    assert_int_equal(tw_checkpoint_save(f->dir, 2, 3, t, 1, plain, 1, &err), TW_OK);
    assert_int_equal(tw_checkpoint_open_latest(f->dir, &c, &err), TW_OK);
    tw_checkpoint_free(c);
}

#define TEST(fn) cmocka_unit_test_setup_teardown(fn, setup, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        TEST(test_save_seven_keep_three),
        TEST(test_no_checkpoint_is_end),
        TEST(test_latest_removes_leftover_temporaries),
        TEST(test_bad_pointer_is_an_error),
        TEST(test_listing_reads_the_folder_and_touches_nothing),
        TEST(test_remove_temporaries_removes_only_ours),
        TEST(test_corrupt_checkpoint_is_an_error),
        TEST(test_uncommitted_files_above_the_step_are_pruned),
        TEST(test_steps_past_the_padding_order_by_number),
        TEST(test_invalid_arguments_write_nothing),
        TEST(test_failed_write_keeps_previous_checkpoint),
        TEST(test_nonfinite_value_writes_nothing),
        TEST(test_failed_pointer_switch_prunes_nothing),
        TEST(test_read_only_folder_keeps_previous_checkpoint),
        TEST(test_fetch_checks_names_and_shapes),
        TEST(test_read_refuses_other_dtypes),
        TEST(test_read_refuses_an_unknown_format),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
