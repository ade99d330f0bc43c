/* logtext.c — control characters made visible in log text (see logtext.h). */
#include "logtext.h"

#include <stdio.h>
#include <string.h>

enum { LOG_MESSAGE_MAX = 2000 };

size_t tw_log_escape(const char *text, size_t n, char *out, size_t size)
{
    static const char HEX[] = "0123456789abcdef";
    size_t w = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)text[i];
        char e[TW_LOG_ESCAPE_MAX];
        size_t k = 1;
        e[0] = (char)c;
        if (c == '\n' || c == '\r' || c == '\t') {
            e[0] = '\\';
            e[1] = c == '\n' ? 'n' : c == '\r' ? 'r' : 't';
            k = 2;
        } else if (c < 0x20 || c == 0x7f) {
            memcpy(e, "\\x", 2);
            e[2] = HEX[c >> 4];
            e[3] = HEX[c & 15];
            k = 4;
        }
        if (w + k >= size)
            break;
        memcpy(out + w, e, k);
        w += k;
    }
    if (size > 0)
        out[w] = 0;
    return w;
}

void tw_logv(const char *fmt, va_list ap)
{
    char msg[LOG_MESSAGE_MAX + 1], line[TW_LOG_ESCAPE_MAX * LOG_MESSAGE_MAX + 2];
    int n = vsnprintf(msg, sizeof msg, fmt, ap);
    size_t len = n < 0 ? 0 : (size_t)n < sizeof msg ? (size_t)n : sizeof msg - 1;
    if (len && msg[len - 1] == '\n')
        len--;
    size_t w = tw_log_escape(msg, len, line, sizeof line - 1);
    line[w++] = '\n';
    fwrite(line, 1, w, stderr); /* one call: lines from several threads do not interleave */
}

void tw_log(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    tw_logv(fmt, ap);
    va_end(ap);
}
