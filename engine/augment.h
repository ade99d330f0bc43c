/* augment.h — data augmentation of training examples, on the fly: random resized crop, random crop with
 * zero padding, horizontal flip and random erasing of an image [h, w, c] (fp32, channels last), each draw a
 * pure function of (seed, epoch, the example's place in its epoch), so a resumed run and a world of
 * processes see the very examples an uninterrupted single process would. The input pipeline applies it to
 * the training input only: evaluation and prediction never see it. */
#ifndef TW_AUGMENT_H
#define TW_AUGMENT_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* What to do, in this order (each off at its zero value). */
typedef struct {
    float resized_crop_min_scale; /* > 0: crop an area of [min, 1] of the image with an aspect ratio in
                                     [1 / max_ratio, max_ratio] (Inception's crop) and resize it back to
                                     [h, w] bilinearly */
    float resized_crop_max_ratio; /* >= 1 */
    int crop_padding;             /* > 0: pad with zeros on every side, crop [h, w] at a random place */
    int horizontal_flip;          /* 1: mirror left-right with probability 1/2 */
    float erasing_probability;    /* > 0: zero a random rectangle of [0.02, erasing_max_area] of the image
                                     with an aspect ratio in [0.3, 3.3] (random erasing) */
    float erasing_max_area;
} tw_augment;

/* The image's layout. */
typedef struct {
    int h, w, c;
} tw_augment_shape;

/* 1 when a does something. */
int tw_augment_any(const tw_augment *a);

/* Scratch an augmenter of images of shape s needs: floats for tw_augment_apply's work buffer. */
size_t tw_augment_scratch(const tw_augment_shape *s, const tw_augment *a);

/* Augments x [h * w * c] in place, its draws keyed by (seed, epoch, index): the index of the example in
 * its epoch's order. work: tw_augment_scratch floats. */
void tw_augment_apply(const tw_augment *a, const tw_augment_shape *s, uint64_t seed, uint64_t epoch,
                      uint64_t index, float *x, float *work);

#endif
