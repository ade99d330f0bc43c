/* test_datafs.c — confinement to the data folder (base/datafs.h): a symlinked file, a symlinked
 * intermediate folder, an absolute symlink and a ".." escape are refused for open (read, create, append),
 * opendir, mkdir, unlink, stat, the atomic file and remove-tree, and the outside target's bytes stay as
 * they were; paths outside the root and every path while nothing is confined follow links as before.
 * Each test runs twice: with openat2 and with the O_NOFOLLOW walk that replaces it on kernels without. */
#define _GNU_SOURCE
#include <errno.h>
#include <limits.h>
#include <fcntl.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include "testutil.h"

#include "atomic_file.h"
#include "datafs.h"

static const char SECRET[] = "outside bytes\n";

/* base/root (the confinement root) and base/outside (what links in root point at):
 *   root/file            "inside\n"
 *   root/sub/            a folder
 *   root/rel_link     -> ../outside/secret   (relative symlink to a file)
 *   root/abs_link     -> BASE/outside/secret (absolute symlink to a file)
 *   root/dir_link     -> BASE/outside        (symlink to a folder holding secret and x.tmp.1)
 *   outside/secret       SECRET
 *   outside/x.tmp.1      SECRET */
typedef struct {
    char base[PATH_MAX], root[PATH_MAX + 8], outside[PATH_MAX + 8];
} fixture;

static void put(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

/* The whole content of path (static buffer; "" when it cannot be read). */
static const char *content(const char *path)
{
    static char buf[256];
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    return buf;
}

/* dir/name in one of four rotating static buffers. */
static char *at(const char *dir, const char *name)
{
    static char bufs[4][2 * PATH_MAX + 32];
    static int next;
    char *b = bufs[next++ % 4];
    snprintf(b, sizeof bufs[0], "%s/%s", dir, name);
    return b;
}

static int setup(void **state, tw_fs_mode mode)
{
    fixture *x = calloc(1, sizeof *x);
    char made[512];
    assert_int_equal(tw_test_mkdtemp(made, sizeof made, "datafs"), 0);
    assert_non_null(realpath(made, x->base)); /* the root is compared resolved */
    snprintf(x->root, sizeof x->root, "%s/root", x->base);
    snprintf(x->outside, sizeof x->outside, "%s/outside", x->base);
    assert_int_equal(mkdir(x->root, 0755), 0);
    assert_int_equal(mkdir(x->outside, 0755), 0);
    assert_int_equal(mkdir(at(x->root, "sub"), 0755), 0);
    put(at(x->root, "file"), "inside\n");
    put(at(x->outside, "secret"), SECRET);
    put(at(x->outside, "x.tmp.1"), SECRET);
    assert_int_equal(symlink("../outside/secret", at(x->root, "rel_link")), 0);
    assert_int_equal(symlink(at(x->outside, "secret"), at(x->root, "abs_link")), 0);
    assert_int_equal(symlink(x->outside, at(x->root, "dir_link")), 0);
    tw_error err;
    assert_int_equal(tw_fs_confine(x->root, &err), TW_OK);
    tw_fs_set_mode(mode);
    *state = x;
    return 0;
}

static int setup_openat2(void **state) { return setup(state, TW_FS_OPENAT2); }
static int setup_walk(void **state) { return setup(state, TW_FS_WALK); }

static int teardown(void **state)
{
    fixture *x = *state;
    tw_error err;
    assert_int_equal(tw_fs_confine(NULL, &err), TW_OK);
    tw_fs_set_mode(TW_FS_OPENAT2);
    assert_int_equal(tw_fs_remove_tree(x->base), 0);
    free(x);
    return 0;
}

/* The outside target is exactly as the fixture made it. */
static void outside_intact(const fixture *x)
{
    assert_string_equal(content(at(x->outside, "secret")), SECRET);
    assert_string_equal(content(at(x->outside, "x.tmp.1")), SECRET);
    struct stat st;
    assert_int_equal(lstat(x->outside, &st), 0);
    assert_true(S_ISDIR(st.st_mode));
}

static void expect_errno(int rc, int e)
{
    assert_int_equal(rc, -1);
    assert_int_equal(errno, e);
}

static void test_plain_files_inside(void **state)
{
    fixture *x = *state;
    int fd = tw_fs_open(at(x->root, "file"), O_RDONLY, 0);
    assert_true(fd >= 0);
    char buf[16] = {0};
    assert_int_equal(read(fd, buf, sizeof buf - 1), 7);
    assert_string_equal(buf, "inside\n");
    close(fd);
    fd = tw_fs_open(at(x->root, "sub/new"), O_WRONLY | O_CREAT | O_EXCL, 0644);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(tw_fs_mkdir(at(x->root, "sub/d"), 0755), 0);
    expect_errno(tw_fs_mkdir(at(x->root, "sub/d"), 0755), EEXIST);
    struct stat st;
    assert_int_equal(tw_fs_stat(at(x->root, "sub/d"), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(tw_fs_stat(x->root, &st), 0); /* the root itself */
    expect_errno(tw_fs_stat(at(x->root, "missing"), &st), ENOENT);
    assert_int_equal(tw_fs_unlink(at(x->root, "sub/new")), 0);
    DIR *d = tw_fs_opendir(at(x->root, "sub"));
    assert_non_null(d);
    closedir(d);
    /* a relative path is taken from the working folder */
    char cwd[1024];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(x->root), 0);
    fd = tw_fs_open("file", O_RDONLY, 0);
    assert_true(fd >= 0);
    close(fd);
    expect_errno(tw_fs_open("rel_link", O_RDONLY, 0), ELOOP);
    assert_int_equal(chdir(cwd), 0);
}

static void test_symlinked_file(void **state)
{
    fixture *x = *state;
    static const char *const links[] = {"rel_link", "abs_link"}; /* relative and absolute targets */
    for (int i = 0; i < 2; i++) {
        const char *p = at(x->root, links[i]);
        expect_errno(tw_fs_open(p, O_RDONLY, 0), ELOOP);
        expect_errno(tw_fs_open(p, O_WRONLY | O_APPEND | O_CREAT, 0644), ELOOP);
        expect_errno(tw_fs_open(p, O_WRONLY | O_TRUNC, 0), ELOOP);
        struct stat st;
        expect_errno(tw_fs_stat(p, &st), ELOOP);
        outside_intact(x);
    }
    assert_int_equal(tw_fs_unlink(at(x->root, "abs_link")), 0); /* the link goes, never its target */
    outside_intact(x);
}

static void test_symlinked_folder(void **state)
{
    fixture *x = *state;
    expect_errno(tw_fs_open(at(x->root, "dir_link/secret"), O_RDONLY, 0), ELOOP);
    expect_errno(tw_fs_open(at(x->root, "dir_link/secret"), O_WRONLY | O_APPEND, 0), ELOOP);
    expect_errno(tw_fs_open(at(x->root, "dir_link/new"), O_WRONLY | O_CREAT, 0644), ELOOP);
    assert_null(tw_fs_opendir(at(x->root, "dir_link")));
    assert_int_equal(errno, ELOOP);
    expect_errno(tw_fs_mkdir(at(x->root, "dir_link/d"), 0755), ELOOP);
    expect_errno(tw_fs_unlink(at(x->root, "dir_link/x.tmp.1")), ELOOP);
    struct stat st;
    expect_errno(tw_fs_stat(at(x->root, "dir_link/secret"), &st), ELOOP);
    const char *name;
    expect_errno(tw_fs_open_dir_of(at(x->root, "dir_link/secret"), &name), ELOOP);
    tw_atomic_file *f;
    tw_error err;
    assert_int_equal(tw_atomic_file_create(at(x->root, "dir_link/secret"), &f, &err), TW_ERR_IO);
    assert_int_equal(err.errno_value, ELOOP);
    assert_non_null(strstr(err.message, "symbolic link"));
    assert_non_null(strstr(err.file, "dir_link/secret"));
    assert_int_equal(tw_atomic_write_file(at(x->root, "dir_link/secret"), "x", 1, &err), TW_ERR_IO);
    assert_int_equal(access(at(x->outside, "new"), F_OK), -1);
    outside_intact(x);
}

/* mkdir -p: each missing folder made, those there kept; under the root a symlink on the way is refused,
 * named, and nothing is made past it. */
static void test_mkdirs(void **state)
{
    fixture *x = *state;
    tw_error err;
    assert_int_equal(tw_fs_mkdirs(at(x->root, "sub/a/b/c"), "cannot make it", &err), TW_OK);
    struct stat st;
    assert_int_equal(tw_fs_stat(at(x->root, "sub/a/b/c"), &st), 0);
    assert_true(S_ISDIR(st.st_mode));
    assert_int_equal(tw_fs_mkdirs(at(x->root, "sub/a/b/c"), "cannot make it", &err), TW_OK);
    assert_int_equal(tw_fs_mkdirs(at(x->root, "dir_link/d/e"), "cannot make it", &err), TW_ERR_IO);
    assert_int_equal(err.errno_value, ELOOP);
    assert_non_null(strstr(err.file, "dir_link/d"));
    assert_non_null(strstr(err.message, "cannot make it"));
    assert_int_equal(access(at(x->outside, "d"), F_OK), -1);
    outside_intact(x);
    assert_int_equal(tw_fs_mkdirs("", "cannot make it", &err), TW_ERR_INVALID);
}

static void test_dotdot_escape(void **state)
{
    fixture *x = *state;
    expect_errno(tw_fs_open(at(x->root, "../outside/secret"), O_RDONLY, 0), EXDEV);
    expect_errno(tw_fs_open(at(x->root, "sub/../../outside/secret"), O_WRONLY | O_APPEND, 0), EXDEV);
    expect_errno(tw_fs_unlink(at(x->root, "sub/../../outside/x.tmp.1")), EXDEV);
    expect_errno(tw_fs_mkdir(at(x->root, "../outside/d"), 0755), EXDEV);
    tw_error err;
    errno = EXDEV;
    tw_fs_error(&err, "p", "cannot open");
    assert_non_null(strstr(err.message, "out of the data folder"));
    outside_intact(x);
}

/* Removal follows nothing: a link inside goes, its target stays; a path through a link is refused. */
static void test_remove_tree(void **state)
{
    fixture *x = *state;
    assert_int_equal(mkdir(at(x->root, "sub/deep"), 0755), 0);
    assert_int_equal(symlink(x->outside, at(x->root, "sub/deep/link")), 0);
    put(at(x->root, "sub/deep/f"), "f");
    expect_errno(tw_fs_remove_tree(at(x->root, "dir_link/x.tmp.1")), ELOOP);
    assert_int_equal(tw_fs_remove_tree(at(x->root, "sub")), 0);
    assert_int_equal(access(at(x->root, "sub"), F_OK), -1);
    assert_int_equal(tw_fs_remove_tree(at(x->root, "dir_link")), 0);
    assert_int_equal(tw_fs_remove_tree(at(x->root, "missing")), 0);
    outside_intact(x);
}

/* Outside the root, and with nothing confined, links are followed as before. */
static void test_outside_and_unconfined(void **state)
{
    fixture *x = *state;
    char link[PATH_MAX + 16];
    snprintf(link, sizeof link, "%s/out_link", x->base);
    assert_int_equal(symlink(at(x->outside, "secret"), link), 0);
    int fd = tw_fs_open(link, O_RDONLY, 0);
    assert_true(fd >= 0);
    close(fd);
    tw_error err;
    assert_int_equal(tw_fs_confine(NULL, &err), TW_OK);
    fd = tw_fs_open(at(x->root, "dir_link/secret"), O_RDONLY, 0);
    assert_true(fd >= 0);
    close(fd);
    struct stat st;
    assert_int_equal(tw_fs_stat(at(x->root, "abs_link"), &st), 0);
    assert_true(S_ISREG(st.st_mode));
    assert_int_equal(tw_fs_confine("/nonexistent/tower-datafs", &err), TW_ERR_IO);
}

#define BOTH(t) cmocka_unit_test_setup_teardown(t, setup_openat2, teardown), \
                cmocka_unit_test_setup_teardown(t, setup_walk, teardown)

int main(void)
{
    const struct CMUnitTest tests[] = {
        BOTH(test_plain_files_inside), BOTH(test_symlinked_file),   BOTH(test_symlinked_folder),
        BOTH(test_dotdot_escape),      BOTH(test_remove_tree),      BOTH(test_outside_and_unconfined),
        BOTH(test_mkdirs),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
