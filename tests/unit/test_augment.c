/* test_augment.c — engine/augment.c: each operation does what it says on a known image (a flip mirrors, a
 * padded crop shifts in zeros, an erased rectangle is zero and within its area range, a full-image resized
 * crop is the identity and a half-scale one samples bilinearly), and the draws depend on (seed, epoch,
 * index) alone. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <string.h>

#include "augment.h"

enum { H = 8, W = 8, C = 2, N = H * W * C }; /* square: a whole-image crop at ratio 1 is all of it */

static const tw_augment_shape SHAPE = {H, W, C};

/* Pixel (i, j) channel ch = 100 i + 10 j + ch: every value says where it came from. */
static void image(float *x)
{
    for (int i = 0; i < H; i++)
        for (int j = 0; j < W; j++)
            for (int ch = 0; ch < C; ch++)
                x[(i * W + j) * C + ch] = (float)(100 * i + 10 * j + ch);
}

static void apply(const tw_augment *a, uint64_t epoch, uint64_t index, float *x)
{
    float work[N];
    tw_augment_apply(a, &SHAPE, 7, epoch, index, x, work);
}

static void test_flip_mirrors_half_the_time(void **state)
{
    (void)state;
    tw_augment a = {.horizontal_flip = 1};
    int flipped = 0;
    for (uint64_t k = 0; k < 200; k++) {
        float x[N], orig[N];
        image(x);
        image(orig);
        apply(&a, 0, k, x);
        int is_flip = memcmp(x, orig, sizeof x) != 0;
        flipped += is_flip;
        for (int i = 0; i < H && is_flip; i++)
            for (int j = 0; j < W; j++)
                assert_true(x[(i * W + j) * C + 1] == orig[(i * W + (W - 1 - j)) * C + 1]);
    }
    assert_in_range(flipped, 70, 130);
}

/* Every output pixel is the input moved by one (dy, dx) in [-p, p], or zero where that falls outside. */
static void test_padded_crop_shifts_in_zeros(void **state)
{
    (void)state;
    tw_augment a = {.crop_padding = 2};
    int moved = 0;
    for (uint64_t k = 0; k < 50; k++) {
        float x[N];
        image(x);
        apply(&a, 1, k, x);
        int found = 0;
        for (int dy = -2; dy <= 2 && !found; dy++)
            for (int dx = -2; dx <= 2 && !found; dx++) {
                int ok = 1;
                for (int i = 0; i < H && ok; i++)
                    for (int j = 0; j < W && ok; j++) {
                        int si = i + dy, sj = j + dx;
                        float want = si < 0 || si >= H || sj < 0 || sj >= W ? 0.0f : (float)(100 * si + 10 * sj);
                        ok = x[(i * W + j) * C] == want;
                    }
                found = ok;
                moved += ok && (dy || dx);
            }
        assert_true(found);
    }
    assert_true(moved > 30);
}

static void test_erasing_zeroes_a_rectangle(void **state)
{
    (void)state;
    tw_augment a = {.erasing_probability = 1.0f, .erasing_max_area = 0.4f};
    for (uint64_t k = 0; k < 100; k++) {
        float x[N];
        image(x);
        x[0] = 1.0f; /* no pixel of the original is zero */
        apply(&a, 2, k, x);
        int zeros = 0, i0 = H, i1 = -1, j0 = W, j1 = -1;
        for (int i = 0; i < H; i++)
            for (int j = 0; j < W; j++)
                if (x[(i * W + j) * C] == 0.0f) {
                    zeros++;
                    i0 = i < i0 ? i : i0, i1 = i > i1 ? i : i1, j0 = j < j0 ? j : j0, j1 = j > j1 ? j : j1;
                    assert_true(x[(i * W + j) * C + 1] == 0.0f); /* every channel */
                }
        assert_true(zeros >= 1 && zeros == (i1 - i0 + 1) * (j1 - j0 + 1)); /* one rectangle */
        assert_true(zeros <= (int)ceilf(0.4f * H * W) + W);                /* about the area drawn */
    }
}

/* A resized crop of the whole image at ratio 1 is the image; the result is otherwise TF's bilinear sample
 * of some rectangle: every value lies between the image's smallest and largest. */
static void test_resized_crop(void **state)
{
    (void)state;
    tw_augment whole = {.resized_crop_min_scale = 1.0f, .resized_crop_max_ratio = 1.0f};
    float x[N], orig[N];
    image(x);
    image(orig);
    apply(&whole, 0, 3, x);
    assert_memory_equal(x, orig, sizeof x);
    tw_augment part = {.resized_crop_min_scale = 0.25f, .resized_crop_max_ratio = 4.0f / 3.0f};
    int changed = 0;
    for (uint64_t k = 0; k < 20; k++) {
        image(x);
        apply(&part, 0, k, x);
        changed += memcmp(x, orig, sizeof x) != 0;
        for (int v = 0; v < N; v += C)
            assert_true(x[v] >= 0.0f && x[v] <= 100.0f * (H - 1) + 10.0f * (W - 1));
    }
    assert_true(changed > 15);
}

/* The same (seed, epoch, index) gives the same image; another index or epoch another one. */
static void test_draws_are_keyed(void **state)
{
    (void)state;
    tw_augment a = {.crop_padding = 3, .horizontal_flip = 1, .erasing_probability = 0.5f, .erasing_max_area = 0.3f,
                    .resized_crop_min_scale = 0.5f, .resized_crop_max_ratio = 1.5f};
    float x[N], y[N], z[N];
    image(x);
    image(y);
    image(z);
    apply(&a, 4, 9, x);
    apply(&a, 4, 9, y);
    assert_memory_equal(x, y, sizeof x);
    apply(&a, 5, 9, z);
    assert_memory_not_equal(x, z, sizeof x);
    assert_false(tw_augment_any(&(tw_augment){.resized_crop_max_ratio = 1.3f, .erasing_max_area = 0.3f}));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_flip_mirrors_half_the_time),
        cmocka_unit_test(test_padded_crop_shifts_in_zeros),
        cmocka_unit_test(test_erasing_zeroes_a_rectangle),
        cmocka_unit_test(test_resized_crop),
        cmocka_unit_test(test_draws_are_keyed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
