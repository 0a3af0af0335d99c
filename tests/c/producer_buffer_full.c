/* buffer_memory and max_block_ms: while the producer's background thread
 * is held inside a delivery callback, acks=-1 batches are not flushed and
 * their bytes stay held, so asynchronous sends fill the buffer and fail
 * with MQL_BUFFER_FULL after max_block_ms. Once released, every accepted
 * record is delivered and the producer works again. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"

#define LIMIT 1000
#define VALUE 100

struct hold {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t main;
    int started;  /* the callback is holding the background thread */
    int on_main;  /* the callback ran on the main thread instead: retry */
    int release;
};

static struct hold hold = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER};

static void holder(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)md;
    (void)error_message;
    struct hold *h = user_data;
    CHECK(status == MQL_OK);
    pthread_mutex_lock(&h->mu);
    if (pthread_equal(pthread_self(), h->main)) {
        h->on_main = 1;
    } else {
        h->started = 1;
        pthread_cond_broadcast(&h->cv);
        while (!h->release) pthread_cond_wait(&h->cv, &h->mu);
    }
    pthread_mutex_unlock(&h->mu);
}

static atomic_int delivered;
static void count(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)user_data;
    (void)md;
    (void)error_message;
    CHECK(status == MQL_OK);
    atomic_fetch_add(&delivered, 1);
}

/* Waits (up to 10 s) until the holder callback ran somewhere; returns
 * whether it holds the background thread. */
static int wait_for_holder(void) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += 10;
    pthread_mutex_lock(&hold.mu);
    while (!hold.started && !hold.on_main) {
        if (pthread_cond_timedwait(&hold.cv, &hold.mu, &until) != 0) FAIL_AT("the holder callback never ran");
    }
    int started = hold.started;
    hold.on_main = 0;
    pthread_mutex_unlock(&hold.mu);
    return started;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", 1);
    hold.main = pthread_self();

    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_buffer_memory(pc, 0), MQL_INVALID_ARGUMENT, "buffer_memory");
    CHECK_OK(mql_producer_config_set_buffer_memory(pc, LIMIT));
    CHECK_OK(mql_producer_config_set_max_block_ms(pc, 50));
    CHECK_OK(mql_producer_config_set_acks(pc, -1));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);

    static char value[VALUE];
    memset(value, 'v', sizeof value);
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.value = value;
    rec.value_len = sizeof value;

    /* Hold the background thread in a delivery callback. (Rarely the first
     * callback runs on this thread instead, inside mql_produce: then try
     * again.) */
    int tries = 0;
    do {
        CHECK(++tries <= 20);
        CHECK_OK(mql_produce(p, &rec, holder, &hold));
    } while (!wait_for_holder());

    /* Fill the buffer. */
    mql_status st = MQL_OK;
    int accepted = 0;
    for (int i = 0; i < 100 && st == MQL_OK; i++) {
        st = mql_produce(p, &rec, count, NULL);
        if (st == MQL_OK) accepted++;
    }
    CHECK_STATUS(st, MQL_BUFFER_FULL);
    CHECK(strstr(mql_last_error(), "buffer full") != NULL);
    CHECK(accepted > 0 && accepted < 20);
    mql_producer_stats stats;
    CHECK_OK(mql_producer_get_stats(p, &stats));
    CHECK(stats.buffered_bytes > 0 && stats.buffered_bytes <= LIMIT);
    uint64_t held = 0;
    CHECK_OK(mql_producer_buffered_bytes(p, &held));
    CHECK(held == stats.buffered_bytes);
    CHECK(stats.peak_buffered_bytes >= stats.buffered_bytes && stats.peak_buffered_bytes <= LIMIT);
    CHECK(stats.errors >= 1);
    /* Blocking sends with acks=-1 do not use the buffer. */
    mql_metadata md;
    CHECK_OK(mql_send(p, "t", NULL, 0, "sync", 4, &md));

    /* Release: every accepted record is delivered. */
    pthread_mutex_lock(&hold.mu);
    hold.release = 1;
    pthread_cond_broadcast(&hold.cv);
    pthread_mutex_unlock(&hold.mu);
    CHECK_OK(mql_producer_flush(p));
    CHECK(atomic_load(&delivered) == accepted);
    CHECK_OK(mql_producer_get_stats(p, &stats));
    CHECK(stats.buffered_bytes == 0);
    CHECK_OK(mql_producer_buffered_bytes(p, &held));
    CHECK(held == 0);
    CHECK(end_of(mq, "t", 0) == (uint64_t)(tries + accepted + 1));
    /* And the producer works again. */
    CHECK_OK(mql_produce(p, &rec, count, NULL));
    CHECK_OK(mql_producer_flush(p));
    CHECK(atomic_load(&delivered) == accepted + 1);

    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    puts("producer_buffer_full: ok");
    return 0;
}
