/* mql_waker_wakeup from another thread ends a blocked mql_poll at once
 * (MQL_TIMEOUT, "woken up"), also one waiting forever; a wakeup before the
 * poll ends the next one; a waker outlives its consumer harmlessly. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "check.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *wake_later(void *arg) {
    struct timespec ts = {0, 150 * 1000000L};
    nanosleep(&ts, NULL);
    CHECK_OK(mql_waker_wakeup(arg));
    return NULL;
}

static void blocked_poll_is_woken(mql_consumer *c, mql_waker *w, int timeout_ms) {
    pthread_t t;
    CHECK(pthread_create(&t, NULL, wake_later, w) == 0);
    mql_message *m = (mql_message *)&m;
    double t0 = now_ms();
    CHECK_FAIL(mql_poll(c, timeout_ms, &m), MQL_TIMEOUT, "woken up");
    double waited = now_ms() - t0;
    printf("poll(%d) woken after %.1f ms\n", timeout_ms, waited);
    CHECK(waited >= 100 && waited < 10000);
    CHECK(m == (mql_message *)&m);
    CHECK(pthread_join(t, NULL) == 0);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 2);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    mql_waker *w;
    CHECK_OK(mql_consumer_waker(c, &w));

    blocked_poll_is_woken(c, w, 60000);
    blocked_poll_is_woken(c, w, -1); /* waiting forever */

    /* A wakeup before the poll ends the next one at once. */
    CHECK_OK(mql_waker_wakeup(w));
    double t0 = now_ms();
    mql_message *m;
    CHECK_FAIL(mql_poll(c, 60000, &m), MQL_TIMEOUT, "woken up");
    CHECK(now_ms() - t0 < 5000);
    /* ...and only that one: a later poll times out normally. */
    CHECK_FAIL(mql_poll(c, 50, &m), MQL_TIMEOUT, "timed out");

    /* Data still arrives after wakeups. */
    fill(mq, "t", 2, 1);
    CHECK_OK(mql_poll(c, 1000, &m));
    mql_message_free(m);

    mql_consumer_free(c);
    CHECK_OK(mql_waker_wakeup(w)); /* the consumer is gone: nothing happens */
    mql_waker_free(w);
    mql_waker_free(NULL);
    CHECK_OK(mql_close(mq));
    puts("consumer_wakeup: ok");
    return 0;
}
