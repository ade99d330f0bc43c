/* logtext.h — the server's one rule for text it writes to a log: every control byte is made visible.
 *
 * Owns: the escaping of control characters (0x00-0x1f and 0x7f: "\n", "\r", "\t", else "\xHH") in text
 * that goes to the server's stderr and to a run's `log` file, so a config value, a name, a path or a
 * child's message can never start a forged line or drive the reader's terminal. Backslashes and bytes
 * >= 0x80 pass unchanged (a child's JSON lines stay JSON). Does not own where logs go (the callers). */
#ifndef TW_LOGTEXT_H
#define TW_LOGTEXT_H

#include <stdarg.h>
#include <stddef.h>

/* The most bytes one input byte becomes ("\xHH"). */
enum { TW_LOG_ESCAPE_MAX = 4 };

/* Copies text[0..n) into out[size] with each control byte escaped, cut at the last whole character that
 * fits; out is NUL-terminated when size > 0. Returns the length written (without the NUL). */
size_t tw_log_escape(const char *text, size_t n, char *out, size_t size);

/* Writes one line to stderr: the printf-formatted message (up to 2000 bytes), escaped, then "\n". A
 * trailing newline of the message is dropped first (libmicrohttpd's messages end in one). */
void tw_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void tw_logv(const char *fmt, va_list ap) __attribute__((format(printf, 1, 0)));

#endif
