/* mql_poll waits about the requested time and returns MQL_TIMEOUT with the
 * out-parameter untouched; a record produced meanwhile wakes it early; a
 * negative timeout waits until a record arrives. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>
#include <time.h>

#include "check.h"

static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static mql_producer *producer;

static void *send_later(void *arg) {
    sleep_ms(*(long *)arg);
    CHECK_OK(mql_send(producer, "events", NULL, 0, "late", 4, NULL));
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq;
    CHECK_OK(mql_open(dir, NULL, &mq));
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(2, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 1 << 20));
    CHECK_OK(mql_topic_create(mq, "events", tc));
    mql_topic_config_free(tc);
    CHECK_OK(mql_producer_new(mq, NULL, &producer));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_subscribe(c, "events"));

    /* Nothing there: times out after about the requested time. */
    mql_message *m = (mql_message *)&m;
    double t0 = now_ms();
    CHECK_STATUS(mql_poll(c, 300, &m), MQL_TIMEOUT);
    double waited = now_ms() - t0;
    printf("poll(300) timed out after %.1f ms\n", waited);
    CHECK(waited >= 295);
    CHECK(waited < 3000); /* generous: valgrind and a shared machine are slow */
    CHECK(m == (mql_message *)&m);
    CHECK(strstr(mql_last_error(), "timed out") != NULL);

    t0 = now_ms();
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT);
    CHECK(now_ms() - t0 < 1000);
    CHECK(m == (mql_message *)&m);

    /* A record sent while polling wakes the poll long before its timeout. */
    pthread_t t;
    long delay = 100;
    CHECK(pthread_create(&t, NULL, send_later, &delay) == 0);
    t0 = now_ms();
    CHECK_OK(mql_poll(c, 20000, &m));
    waited = now_ms() - t0;
    printf("poll(20000) woke after %.1f ms\n", waited);
    CHECK(waited < 10000);
    CHECK(value_is(m, "late"));
    mql_message_free(m);
    CHECK(pthread_join(t, NULL) == 0);

    /* A negative timeout waits as long as it takes. */
    delay = 300;
    CHECK(pthread_create(&t, NULL, send_later, &delay) == 0);
    t0 = now_ms();
    CHECK_OK(mql_poll(c, -1, &m));
    waited = now_ms() - t0;
    printf("poll(-1) woke after %.1f ms\n", waited);
    CHECK(waited >= 250);
    CHECK(value_is(m, "late"));
    mql_message_free(m);
    CHECK(pthread_join(t, NULL) == 0);

    mql_consumer_free(c);
    mql_producer_free(producer);
    CHECK_OK(mql_close(mq));
    puts("poll_timeout: ok");
    return 0;
}
