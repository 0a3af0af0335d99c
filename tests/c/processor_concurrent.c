/* Processor, concurrently: a handler failing one message a few times gets
 * it retried (counted), everything is processed and committed = end; with
 * max_retries a message always failing is given up on (counted in failed)
 * and committed past; a stop from another thread ends an idle run; a
 * processor runs again after a run. */
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>

#include "check.h"

#define PARTS 2
#define PER_PART 50

typedef struct {
    uint32_t bad_partition;
    uint64_t bad_offset;
    int fail_times; /* -1: always */
    atomic_int bad_calls;
    atomic_int ok;
    atomic_int seen[PARTS][PER_PART];
} state;

static bool handle(void *user_data, const mql_message *m) {
    state *s = user_data;
    uint32_t p = mql_message_partition(m);
    uint64_t o = mql_message_offset(m);
    CHECK(p < PARTS && o < PER_PART);
    if (p == s->bad_partition && o == s->bad_offset) {
        int n = atomic_fetch_add(&s->bad_calls, 1);
        if (s->fail_times < 0 || n < s->fail_times) return false;
    }
    atomic_fetch_add(&s->seen[p][o], 1);
    atomic_fetch_add(&s->ok, 1);
    return true;
}

typedef struct {
    state *s;
    int ok, bad_calls;
    mql_stopper *stopper;
} stop_when;

/* Waits until the handler saw what it should, then stops the run from this
 * thread (the processor is idle by then: polling and finding nothing). */
static void *stop_later(void *arg) {
    stop_when *w = arg;
    for (int i = 0; i < 20000; i++) {
        if (atomic_load(&w->s->ok) >= w->ok && atomic_load(&w->s->bad_calls) >= w->bad_calls) break;
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    struct timespec idle = {0, 20000000};
    nanosleep(&idle, NULL);
    CHECK_OK(mql_stopper_stop(w->stopper));
    return NULL;
}

static void reset(state *s, int fail_times) {
    s->bad_partition = 1;
    s->bad_offset = 7;
    s->fail_times = fail_times;
    atomic_init(&s->bad_calls, 0);
    atomic_init(&s->ok, 0);
    for (int p = 0; p < PARTS; p++)
        for (int o = 0; o < PER_PART; o++) atomic_init(&s->seen[p][o], 0);
}

/* Runs a processor of group `group` over "t" until the handler saw `ok`
 * successes and `bad_calls` calls for the bad message; returns the stats. */
static mql_processor_stats run(mql_broker *mq, const char *group, state *s, int64_t max_retries,
                               int ok, int bad_calls) {
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_enable_auto_commit(cc, false));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, group, cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "t"));

    mql_processor_config pc = MQL_PROCESSOR_CONFIG_INIT;
    pc.mode = MQL_PROCESSING_MODE_CONCURRENTLY;
    pc.threads = 4;
    pc.retry_backoff_ms = 1;
    pc.commit_interval_ms = 20;
    pc.max_retries = max_retries;
    mql_processor *proc;
    CHECK_OK(mql_processor_new(c, &pc, &proc));
    stop_when w = {s, ok, bad_calls, NULL};
    CHECK_OK(mql_processor_stopper(proc, &w.stopper));
    pthread_t t;
    CHECK(pthread_create(&t, NULL, stop_later, &w) == 0);
    mql_processor_stats st;
    CHECK_OK(mql_processor_run(proc, handle, s, &st));
    CHECK(pthread_join(t, NULL) == 0);

    /* Runs again: nothing new, stopped from another thread once more. */
    mql_processor_stats st2 = {9, 9, 9, 9, 9};
    CHECK(pthread_create(&t, NULL, stop_later, &w) == 0);
    CHECK_OK(mql_processor_run(proc, handle, s, &st2));
    CHECK(pthread_join(t, NULL) == 0);
    CHECK(st2.processed == 0 && st2.retries == 0 && st2.failed == 0 && st2.commits == 0);

    mql_stopper_free(w.stopper);
    mql_processor_free(proc);
    for (uint32_t p = 0; p < PARTS; p++) {
        uint64_t off = 0;
        CHECK_OK(mql_committed(c, "t", p, &off, NULL, 0, NULL));
        CHECK(off == end_of(mq, "t", p));
    }
    mql_consumer_free(c);
    return st;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", PARTS);
    fill(mq, "t", PARTS, PER_PART);
    static state s;

    /* Fails three times, then succeeds: retried, all processed once. */
    reset(&s, 3);
    mql_processor_stats st = run(mq, "g", &s, -1, PARTS * PER_PART, 4);
    CHECK(st.processed == PARTS * PER_PART && st.retries == 3 && st.failed == 0 && st.commits >= 1);
    CHECK(atomic_load(&s.bad_calls) == 4);
    for (int p = 0; p < PARTS; p++)
        for (int o = 0; o < PER_PART; o++) CHECK(atomic_load(&s.seen[p][o]) == 1);

    /* Always fails, max_retries 2: given up on after three calls, and
     * committed past like a processed one. */
    reset(&s, -1);
    st = run(mq, "h", &s, 2, PARTS * PER_PART - 1, 3);
    CHECK(st.processed == PARTS * PER_PART - 1 && st.retries == 2 && st.failed == 1);
    CHECK(atomic_load(&s.bad_calls) == 3);
    CHECK(atomic_load(&s.seen[1][7]) == 0);

    CHECK_OK(mql_close(mq));
    puts("processor_concurrent: ok");
    return 0;
}
