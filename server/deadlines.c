/* deadlines.c — connection deadlines and the sharing of places (deadlines.h). */
#define _GNU_SOURCE
#include "deadlines.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "logtext.h"
#include "server.h"

static const double MIN_BODY_S = 1.0; /* a body younger than this has no rate yet: never cut for room */
static const double TICK_S = 0.25; /* the watchdog's look at the deadlines */

struct tw_conn {
    int fd;
    tw_conn_phase phase;
    double since;        /* monotonic start of the phase */
    double deadline;     /* > 0 while headers or a body are due */
    size_t bytes;        /* body bytes received in TW_CONN_BODY */
    int dying;           /* shut down: closing, no longer a place taken */
    char addr[INET6_ADDRSTRLEN];
    struct tw_conn *prev, *next;
};

struct tw_deadlines {
    double header_s, min_rate;
    unsigned capacity, open, dying; /* open - dying: the places taken */
    pthread_mutex_t mu;  /* guards everything below */
    pthread_cond_t cv;   /* wakes the watchdog to stop */
    pthread_t thread;
    int stopping;
    tw_conn conns;       /* list head */
    unsigned cut_late, cut_for_room; /* since the watchdog's last log line */
    char last_cut[160];  /* what the last of them was, for that line */
};

static void arm(tw_deadlines *d, tw_conn *c, tw_conn_phase phase, double now)
{
    c->phase = phase;
    c->since = now;
    c->bytes = 0;
    c->deadline = phase == TW_CONN_IDLE ? 0 : now + d->header_s;
}

/* Shuts c's socket down; why says what it was doing. Caller holds the mutex. */
static void cut(tw_deadlines *d, tw_conn *c, double now, int for_room)
{
    if (c->phase == TW_CONN_HEADERS)
        snprintf(d->last_cut, sizeof d->last_cut, "%s: no complete headers in %.0f s", c->addr, now - c->since);
    else
        snprintf(d->last_cut, sizeof d->last_cut, "%s: a body at %.0f bytes/s for %.0f s", c->addr,
                 (double)c->bytes / (now - c->since > 0 ? now - c->since : 1), now - c->since);
    shutdown(c->fd, SHUT_RDWR);
    arm(d, c, TW_CONN_IDLE, now);
    if (!c->dying)
        d->dying++;
    c->dying = 1;
    if (for_room)
        d->cut_for_room++;
    else
        d->cut_late++;
}

/* The connection making the least progress: the one waiting longest for its headers (a client that sends
 * its request at once is never waiting long), else the body with the lowest average rate among those
 * received for MIN_BODY_S or more; NULL when none. */
static tw_conn *slowest(tw_deadlines *d, double now)
{
    tw_conn *waiting = NULL, *body = NULL;
    double body_rate = 0;
    for (tw_conn *c = d->conns.next; c != &d->conns; c = c->next) {
        if (c->phase == TW_CONN_HEADERS && (!waiting || c->since < waiting->since))
            waiting = c;
        double age = now - c->since, rate = age > 0 ? (double)c->bytes / age : 0;
        if (c->phase == TW_CONN_BODY && age >= MIN_BODY_S && (!body || rate < body_rate)) {
            body = c;
            body_rate = rate;
        }
    }
    return waiting ? waiting : body;
}

static void *watchdog(void *arg)
{
    tw_deadlines *d = arg;
    pthread_mutex_lock(&d->mu);
    while (!d->stopping) {
        double now = tw_now_mono();
        for (tw_conn *c = d->conns.next; c != &d->conns; c = c->next)
            if (c->deadline > 0 && now > c->deadline)
                cut(d, c, now, 0);
        if (d->cut_late + d->cut_for_room) {
            tw_log("tower serve: http: cut %u connection(s) past their deadline and %u slow one(s) to make room "
                   "(the last, %s)", d->cut_late, d->cut_for_room, d->last_cut);
            d->cut_late = d->cut_for_room = 0;
        }
        struct timespec until = tw_mono_after(TICK_S);
        pthread_cond_timedwait(&d->cv, &d->mu, &until);
    }
    pthread_mutex_unlock(&d->mu);
    return NULL;
}

tw_status tw_deadlines_start(double header_s, double min_rate, unsigned capacity, tw_deadlines **out,
                             tw_error *err)
{
    tw_deadlines *d = calloc(1, sizeof *d);
    if (!d)
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "out of memory");
    d->header_s = header_s;
    d->min_rate = min_rate;
    d->capacity = capacity;
    d->conns.next = d->conns.prev = &d->conns;
    pthread_mutex_init(&d->mu, NULL);
    tw_cond_init_mono(&d->cv);
    if (pthread_create(&d->thread, NULL, watchdog, d) != 0) {
        pthread_cond_destroy(&d->cv);
        pthread_mutex_destroy(&d->mu);
        free(d);
        return tw_error_set(err, TW_ERR_NOMEM, NULL, -1, "cannot start the connection watchdog thread");
    }
    *out = d;
    return TW_OK;
}

void tw_deadlines_stop(tw_deadlines *d)
{
    if (!d)
        return;
    pthread_mutex_lock(&d->mu);
    d->stopping = 1;
    pthread_cond_signal(&d->cv);
    pthread_mutex_unlock(&d->mu);
    pthread_join(d->thread, NULL);
    pthread_cond_destroy(&d->cv);
    pthread_mutex_destroy(&d->mu);
    free(d);
}

static void format_addr(const struct sockaddr *addr, char *out, size_t size)
{
    snprintf(out, size, "?");
    if (addr && addr->sa_family == AF_INET)
        inet_ntop(AF_INET, &((const struct sockaddr_in *)addr)->sin_addr, out, (socklen_t)size);
    else if (addr && addr->sa_family == AF_INET6)
        inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)addr)->sin6_addr, out, (socklen_t)size);
}

tw_conn *tw_deadlines_open(tw_deadlines *d, int fd, const struct sockaddr *addr)
{
    tw_conn *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->fd = fd;
    format_addr(addr, c->addr, sizeof c->addr);
    unsigned reserve = d->capacity / 8 > 2 ? d->capacity / 8 : 2;
    pthread_mutex_lock(&d->mu);
    double now = tw_now_mono();
    arm(d, c, TW_CONN_HEADERS, now);
    unsigned taken = d->open - d->dying;
    tw_conn *victim = taken + reserve >= d->capacity ? slowest(d, now) : NULL;
    if (victim)
        cut(d, victim, now, 1);
    else if (taken >= d->capacity) { /* every place busy with work in progress: this one waits its turn */
        snprintf(d->last_cut, sizeof d->last_cut, "%s: no place free", c->addr);
        shutdown(fd, SHUT_RDWR);
        c->dying = 1;
        d->dying++;
        d->cut_for_room++;
    }
    c->prev = &d->conns;
    c->next = d->conns.next;
    c->next->prev = c;
    d->conns.next = c;
    d->open++;
    pthread_mutex_unlock(&d->mu);
    return c;
}

void tw_deadlines_close(tw_deadlines *d, tw_conn *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&d->mu);
    c->prev->next = c->next;
    c->next->prev = c->prev;
    d->open--;
    d->dying -= c->dying;
    pthread_mutex_unlock(&d->mu);
    free(c);
}

void tw_deadlines_phase(tw_deadlines *d, tw_conn *c, tw_conn_phase phase)
{
    if (!c)
        return;
    pthread_mutex_lock(&d->mu);
    arm(d, c, phase, tw_now_mono());
    pthread_mutex_unlock(&d->mu);
}

void tw_deadlines_body(tw_deadlines *d, tw_conn *c, size_t n)
{
    if (!c)
        return;
    pthread_mutex_lock(&d->mu);
    if (c->phase == TW_CONN_BODY) {
        c->bytes += n;
        c->deadline = c->since + d->header_s + (double)c->bytes / d->min_rate;
    }
    pthread_mutex_unlock(&d->mu);
}
