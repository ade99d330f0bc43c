/* progress.h — the one progress line a person sees in a terminal: `tower train` on a terminal (engine/child.c)
 * and `tower submit --follow` (client/) draw it alike, so the client needs nothing of the engine for it.
 * Owns: the line's text and its "\r" rewriting. */
#ifndef TW_PROGRESS_H
#define TW_PROGRESS_H

#include <stdint.h>
#include <stdio.h>

/* The progress line "\rstep K/N  E ex/s  loss X  ETA T" (clearing the rest of the line; total 0: no "/N";
 * eps or eta_s <= 0: left out), flushed. */
void tw_progress_line(FILE *out, int64_t step, int64_t total, double eps, double loss, double eta_s);

/* Ends a progress line before other text: "\r" and clear to the end of the line. */
void tw_progress_clear(FILE *out);

#endif
