/* deadlines.h — every open connection's deadline, kept by a watchdog thread, and the sharing of the
 * connection places among clients.
 *
 * libmicrohttpd's own timeout counts silence only, which a client sending a byte now and then never meets,
 * so each request gets a total deadline by its phase (as Apache's mod_reqtimeout and nginx do):
 *   headers  within header_s of the connection opening or of the previous reply;
 *   body     within header_s of the headers, plus a second per min_rate bytes received: a body must keep
 *            min_rate bytes/s on average after a grace of header_s, whatever its size;
 *   idle     none while a handler works or a reply streams (the idle timeout covers those).
 * A socket past its deadline is shut down; libmicrohttpd then closes it as a client hang-up.
 *
 * The places are shared: when a new connection leaves fewer than a reserve free (an eighth of the
 * capacity, at least 2), the connection making the least progress is cut to make room: the longest
 * waiting for its headers, else the slowest body received for a second or more. Slow clients from any
 * number of addresses then keep one another out, never a client that sends its requests at once. A new
 * connection finding every place busy with work in progress is itself closed. libmicrohttpd's own limit is
 * set above the capacity (http.c), so that the choice is made here and not by a refusal before it.
 *
 * Owns: the list of watched connections, their deadlines, the watchdog thread. Does not own the sockets
 * (libmicrohttpd's: a connection is closed from the list before its socket is closed). */
#ifndef TW_DEADLINES_H
#define TW_DEADLINES_H

#include <stddef.h>
#include <sys/socket.h>

#include "status.h"

typedef struct tw_deadlines tw_deadlines;
typedef struct tw_conn tw_conn;

typedef enum { TW_CONN_IDLE, TW_CONN_HEADERS, TW_CONN_BODY } tw_conn_phase;

/* Starts the watchdog for at most capacity connections. */
tw_status tw_deadlines_start(double header_s, double min_rate, unsigned capacity, tw_deadlines **out,
                             tw_error *err);
/* Stops the watchdog and frees the list (every connection closed first). NULL is a no-op. */
void tw_deadlines_stop(tw_deadlines *d);

/* A new connection on socket fd from addr, awaiting its headers; may cut another to make room. NULL when
 * out of memory (the connection is then not watched). */
tw_conn *tw_deadlines_open(tw_deadlines *d, int fd, const struct sockaddr *addr);
/* Forgets c (before libmicrohttpd closes its socket). */
void tw_deadlines_close(tw_deadlines *d, tw_conn *c);

/* c enters phase (its deadline starts now); n more body bytes arrived on c. NULL c: no-ops. */
void tw_deadlines_phase(tw_deadlines *d, tw_conn *c, tw_conn_phase phase);
void tw_deadlines_body(tw_deadlines *d, tw_conn *c, size_t n);

#endif
