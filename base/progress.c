/* progress.c — the terminal's progress line (progress.h). */
#include "progress.h"

/* "1h02m", "3m05s", "42s". */
static void format_duration(double s, char *buf, size_t size)
{
    long t = (long)(s + 0.5);
    if (t >= 3600)
        snprintf(buf, size, "%ldh%02ldm", t / 3600, t / 60 % 60);
    else if (t >= 60)
        snprintf(buf, size, "%ldm%02lds", t / 60, t % 60);
    else
        snprintf(buf, size, "%lds", t);
}

void tw_progress_clear(FILE *out) { fputs("\r\033[K", out); }

void tw_progress_line(FILE *out, int64_t step, int64_t total, double eps, double loss, double eta_s)
{
    tw_progress_clear(out);
    fprintf(out, "step %lld", (long long)step);
    if (total > 0)
        fprintf(out, "/%lld", (long long)total);
    if (eps > 0)
        fprintf(out, "  %.0f ex/s", eps);
    fprintf(out, "  loss %.4f", loss);
    char eta[32];
    format_duration(eta_s, eta, sizeof eta);
    if (eta_s > 0)
        fprintf(out, "  ETA %s", eta);
    fflush(out);
}
