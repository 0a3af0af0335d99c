/* mql_producer_queued counts records sent with mql_produce until their
 * delivery callback ran (lingering, waiting for the acks = -1 flush, or in
 * the callback itself); mql_send* never count. A flush that times out says
 * in its error text how many are still queued. */
#include <pthread.h>

#include "check.h"

#define N 20

struct seen {
    pthread_mutex_t lock;
    mql_producer *producer;
    size_t calls;
    size_t queued_in_call[N];
    int failed;
};

static void on_delivery(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)error_message;
    struct seen *s = user_data;
    pthread_mutex_lock(&s->lock);
    size_t q = 0;
    if (status != MQL_OK || md == NULL || mql_producer_queued(s->producer, &q) != MQL_OK) s->failed = 1;
    if (s->calls < N) s->queued_in_call[s->calls] = q;
    s->calls++;
    pthread_mutex_unlock(&s->lock);
}

static size_t queued(mql_producer *p) {
    size_t q = 12345;
    CHECK_OK(mql_producer_queued(p, &q));
    return q;
}

static size_t calls(struct seen *s) {
    pthread_mutex_lock(&s->lock);
    size_t n = s->calls;
    pthread_mutex_unlock(&s->lock);
    return n;
}

static mql_producer *lingering(mql_broker *mq, int32_t acks) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_acks(pc, acks));
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 60000));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

static void produce(mql_producer *p, uint32_t partition, struct seen *s) {
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.partition = partition;
    rec.value = "v";
    rec.value_len = 1;
    CHECK_OK(mql_produce(p, &rec, on_delivery, s));
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 2);

    /* Lingering records count until flushed and reported. */
    struct seen s = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, {0}, 0};
    mql_producer *p = lingering(mq, 1);
    s.producer = p;
    CHECK(queued(p) == 0);
    for (size_t i = 0; i < N; i++) {
        produce(p, 0, &s);
        CHECK(queued(p) == i + 1);
    }
    /* A synchronous send (to the other partition) neither counts nor
     * flushes the lingering batch. */
    send_to(p, "t", 1, "sync");
    CHECK(queued(p) == N && calls(&s) == 0);
    CHECK_OK(mql_producer_flush(p));
    CHECK(queued(p) == 0 && calls(&s) == N && !s.failed);
    /* Each callback counted itself and those after it. */
    for (size_t i = 0; i < N; i++) CHECK(s.queued_in_call[i] == N - i);

    /* acks = -1: a flush with no time left times out and says how many are
     * left; each record is queued or delivered. */
    struct seen a = {PTHREAD_MUTEX_INITIALIZER, NULL, 0, {0}, 0};
    mql_producer *all = lingering(mq, -1);
    a.producer = all;
    for (size_t i = 0; i < N; i++) produce(all, 0, &a);
    CHECK(queued(all) == N);
    CHECK_FAIL(mql_producer_flush_timeout(all, 0), MQL_TIMEOUT, "records still queued");
    size_t left = queued(all);
    CHECK(left + calls(&a) == N);
    /* The text gives the count read right after the timeout (at least the
     * count now: the background thread may have delivered more since). */
    const char *text = strstr(mql_last_error(), "ms: ");
    CHECK(text != NULL);
    CHECK((size_t)strtoul(text + 4, NULL, 10) >= left);
    CHECK_OK(mql_producer_flush_timeout(all, 30000));
    CHECK(queued(all) == 0 && calls(&a) == N && !a.failed);

    /* Closing delivers everything; the count still reads afterwards. */
    produce(all, 1, &a);
    CHECK(queued(all) == 1);
    CHECK_OK(mql_producer_close(all));
    CHECK(queued(all) == 0 && calls(&a) == N + 1);

    /* NULL arguments. */
    size_t q = 777;
    CHECK_FAIL(mql_producer_queued(NULL, &q), MQL_NULL_ARGUMENT, "`producer` is NULL");
    CHECK_FAIL(mql_producer_queued(p, NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    CHECK(q == 777);

    /* After the broker is closed the count still reads (0). */
    CHECK_OK(mql_close(mq));
    CHECK(queued(p) == 0);
    mql_producer_free(all);
    mql_producer_free(p);
    return 0;
}
