/* Delayed delivery from C: a record sent with the header
 * MQL_DELIVER_AT_HEADER (a time to come, ms since the epoch, in decimal)
 * waits in the internal topic "__delayed" and reaches its topic when due;
 * records arrive in the order of their delivery times; a bad header value
 * is refused with MQL_INVALID_ARGUMENT. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <time.h>

#include "check.h"

static int64_t now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static double mono_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Sends `value` to t/0, to be delivered at `at` (ms since the epoch). */
static mql_status send_at(mql_producer *p, const char *value, const char *at) {
    mql_header h = {MQL_DELIVER_AT_HEADER, strlen(MQL_DELIVER_AT_HEADER), at, strlen(at)};
    mql_record r = MQL_RECORD_INIT;
    r.topic = "t";
    r.partition = 0;
    r.value = value;
    r.value_len = strlen(value);
    r.headers = &h;
    r.header_count = 1;
    return mql_send_record(p, &r, NULL);
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 1);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));

    char later[32], sooner[32];
    int64_t now = now_ms();
    /* Far enough ahead that the checks below come first under valgrind. */
    snprintf(later, sizeof later, "%lld", (long long)(now + 2500));
    snprintf(sooner, sizeof sooner, "%lld", (long long)(now + 1500));
    double sent = mono_s();
    CHECK_OK(send_at(p, "later", later));
    CHECK_OK(send_at(p, "sooner", sooner));
    CHECK_STATUS(send_at(p, "bad", "soon"), MQL_INVALID_ARGUMENT);
    /* Nothing is in t yet: both wait in __delayed. */
    CHECK(end_of(mq, "t", 0) == 0);
    CHECK(end_of(mq, "__delayed", 0) == 2);

    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &c));
    CHECK_OK(mql_subscribe(c, "t"));
    const char *want[2] = {"sooner", "later"};
    for (int i = 0; i < 2; i++) {
        mql_message *m = NULL;
        double until = mono_s() + 10.0;
        mql_status st = MQL_TIMEOUT;
        while (mono_s() < until && (st = mql_poll(c, 50, &m)) == MQL_TIMEOUT) {
        }
        CHECK_OK(st);
        CHECK(value_is(m, want[i]));
        mql_message_free(m);
    }
    CHECK(mono_s() - sent >= 2.45);
    mql_consumer_free(c);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    printf("delayed: ok\n");
    return 0;
}
