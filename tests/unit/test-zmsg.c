/* SPDX-License-Identifier: MIT */
/*
 * dsv4_zrecv (daemons/lib/zmsg.c) keeps its contract, 0, -EAGAIN or -EBADMSG, on which
 * every daemon's drain loop `while (dsv4_zrecv(...) != -EAGAIN)` relies: under a storm of
 * signals (each interrupts zmq_msg_recv with EINTR, even a non-blocking one; the fuzz
 * harnesses died of it) non-blocking and blocking, without losing a message, on a message of
 * too many frames, and on a socket whose context was shut down (ETERM).
 */
#include <errno.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <sys/time.h>
#include <zmq.h>

#include <cmocka.h>

#include "zmsg.h"

static volatile sig_atomic_t alarms;

static void on_alarm(int sig)
{
    (void)sig;
    alarms++;
}

/* one "hi" from the dealer, again when a signal interrupted the send */
static void send_hi(void *dealer)
{
    while (zmq_send(dealer, "hi", 2, 0) < 0)
        assert_int_equal(errno, EINTR);
}

static void pair(void **ctx, void **router, void **dealer, const char *ep)
{
    *ctx = dsv4_zctx_new();
    *router = dsv4_zsock(*ctx, ZMQ_ROUTER, NULL);
    *dealer = dsv4_zsock(*ctx, ZMQ_DEALER, "d");
    assert_int_equal(zmq_bind(*router, ep), 0);
    assert_int_equal(zmq_connect(*dealer, ep), 0);
}

static void test_signal_storm(void **state)
{
    (void)state;
    void *ctx, *router, *dealer;
    pair(&ctx, &router, &dealer, "inproc://storm");
    struct sigaction sa, old;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm; /* no SA_RESTART */
    assert_int_equal(sigaction(SIGALRM, &sa, &old), 0);
    struct itimerval on = {{0, 20}, {0, 20}}, off = {{0, 0}, {0, 0}};
    assert_int_equal(setitimer(ITIMER_REAL, &on, NULL), 0);
    struct dsv4_zin in = {0};
    int sent = 0, got = 0;
    for (int i = 0; i < 200000; i++) {
        if (i % 100 == 0) {
            send_hi(dealer);
            sent++;
        }
        int r = dsv4_zrecv(router, &in, 1, 1);
        if (r != 0 && r != -EAGAIN)
            fail_msg("dsv4_zrecv returned %d (%s) under signals", r, strerror(-r));
        if (r == 0) {
            assert_int_equal(in.len, 2);
            assert_memory_equal(in.buf, "hi", 2);
            assert_int_equal(in.rid_len, 1);
            got++;
        }
    }
    /* what is left in the queue, then as many again, by blocking receives, still under
     * the signals: each returns its message (blocking, an interrupted receive was -EINTR) */
    for (int i = 0; i < 2000; i++) {
        send_hi(dealer);
        sent++;
    }
    while (got < sent) {
        int r = dsv4_zrecv(router, &in, 1, 0);
        if (r != 0)
            fail_msg("blocking dsv4_zrecv returned %d (%s) under signals", r, strerror(-r));
        assert_int_equal(in.len, 2);
        assert_memory_equal(in.buf, "hi", 2);
        got++;
    }
    assert_int_equal(setitimer(ITIMER_REAL, &off, NULL), 0);
    assert_int_equal(sigaction(SIGALRM, &old, NULL), 0);
    assert_true(alarms > 0);
    assert_int_equal(dsv4_zrecv(router, &in, 1, 1), -EAGAIN); /* nothing extra either */
    dsv4_zin_free(&in);
    zmq_close(router);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
}

static void test_framing_and_dead_socket(void **state)
{
    (void)state;
    void *ctx, *router, *dealer;
    pair(&ctx, &router, &dealer, "inproc://frames");
    struct dsv4_zin in = {0};
    /* three frames after the routing id: dropped whole, the next message intact */
    assert_int_equal(zmq_send(dealer, "a", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(dealer, "b", 1, ZMQ_SNDMORE), 1);
    assert_int_equal(zmq_send(dealer, "c", 1, 0), 1);
    assert_int_equal(zmq_send(dealer, "next", 4, 0), 4);
    int r;
    while ((r = dsv4_zrecv(router, &in, 1, 1)) == -EAGAIN)
        ;
    assert_int_equal(r, -EBADMSG);
    while ((r = dsv4_zrecv(router, &in, 1, 1)) == -EAGAIN)
        ;
    assert_int_equal(r, 0);
    assert_int_equal(in.len, 4);
    assert_memory_equal(in.buf, "next", 4);
    /* a context shut down under the socket: ETERM from zmq, -EAGAIN from a non-blocking
     * dsv4_zrecv (a drain loop ends), the error itself from a blocking one */
    assert_int_equal(zmq_ctx_shutdown(ctx), 0);
    assert_int_equal(dsv4_zrecv(router, &in, 1, 1), -EAGAIN);
    assert_int_equal(dsv4_zrecv(router, &in, 1, 0), -ETERM);
    dsv4_zin_free(&in);
    zmq_close(router);
    zmq_close(dealer);
    zmq_ctx_term(ctx);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_signal_storm),
        cmocka_unit_test(test_framing_and_dead_socket),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
