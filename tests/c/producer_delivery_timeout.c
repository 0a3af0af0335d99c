/* The delivery timeout: records queued (linger) longer than
 * delivery_timeout_ms are not appended and their callbacks get
 * MQL_TIMEOUT; with no limit (0) or within it they are appended. */
#include <time.h>

#include "check.h"

struct report {
    int calls;
    mql_status status;
    char error[256];
};

static void on_delivery(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    struct report *r = user_data;
    r->calls++;
    r->status = status;
    if (status == MQL_OK) {
        CHECK(md != NULL);
    } else {
        CHECK(md == NULL && error_message != NULL);
        snprintf(r->error, sizeof r->error, "%s", error_message);
    }
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

/* A producer whose batches linger a minute (written at flush). */
static mql_producer *lingering(mql_broker *mq, uint64_t delivery_timeout_ms) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 60000));
    CHECK_OK(mql_producer_config_set_delivery_timeout_ms(pc, delivery_timeout_ms));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

static void produce(mql_producer *p, const char *value, struct report *r) {
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.partition = 0;
    rec.value = value;
    rec.value_len = strlen(value);
    CHECK_OK(mql_produce(p, &rec, on_delivery, r));
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);

    /* Queued past its deadline: never appended. */
    mql_producer *p = lingering(mq, 50);
    struct report late = {0, MQL_PANIC, ""};
    produce(p, "late", &late);
    sleep_ms(200);
    CHECK_OK(mql_producer_flush(p));
    CHECK(late.calls == 1);
    CHECK(late.status == MQL_TIMEOUT);
    CHECK(strstr(late.error, "50 ms") != NULL);
    CHECK(end_of(mq, "t", 0) == 0);
    mql_producer_stats stats;
    CHECK_OK(mql_producer_get_stats(p, &stats));
    CHECK(stats.errors == 1 && stats.records == 0);

    /* Within the deadline: appended. */
    struct report in_time = {0, MQL_PANIC, ""};
    produce(p, "in time", &in_time);
    CHECK_OK(mql_producer_flush(p));
    CHECK(in_time.calls == 1 && in_time.status == MQL_OK);
    mql_producer_free(p);

    /* No limit. */
    p = lingering(mq, 0);
    struct report patient = {0, MQL_PANIC, ""};
    produce(p, "patient", &patient);
    sleep_ms(200);
    CHECK_OK(mql_producer_flush(p));
    CHECK(patient.calls == 1 && patient.status == MQL_OK);
    mql_producer_free(p);

    CHECK(end_of(mq, "t", 0) == 2);
    mql_message *m = read_at(mq, "t", 0, 0);
    CHECK(value_is(m, "in time"));
    mql_message_free(m);
    m = read_at(mq, "t", 0, 1);
    CHECK(value_is(m, "patient"));
    mql_message_free(m);
    CHECK_OK(mql_close(mq));
    return 0;
}
