/* mql_processor_run_batches: the handler gets runs of one partition's
 * messages in offset order (more than one at a time); returning k < n
 * retries messages[k] and hands the handler the batch from it on, so no
 * message before it is handled twice; the committed offsets are then the
 * end offsets. */
#include <pthread.h>

#include "check.h"

#define PARTS 2
#define PER_PART 300

typedef struct {
    pthread_mutex_t lock;
    unsigned char handled[PARTS][PER_PART]; /* times each was processed */
    uint64_t next[PARTS];                   /* orderly: the next offset due */
    int total, out_of_order, twice, bad_batch, failures;
    size_t longest;
    mql_stopper *stopper;
} state;

static size_t handle(void *user_data, const mql_message *const *messages, size_t n) {
    state *s = user_data;
    pthread_mutex_lock(&s->lock);
    if (n > s->longest) s->longest = n;
    uint32_t p = mql_message_partition(messages[0]);
    uint64_t first = mql_message_offset(messages[0]);
    size_t done = n;
    for (size_t i = 0; i < n; i++) {
        uint32_t mp = mql_message_partition(messages[i]);
        uint64_t o = mql_message_offset(messages[i]);
        if (mp != p || o != first + i || mp >= PARTS || o >= PER_PART) {
            s->bad_batch++;
            continue;
        }
        if (mp == 0 && o == 10 && s->failures < 2) {
            s->failures++;
            done = i; /* the first i processed; offset 10 failed */
            break;
        }
        if (s->handled[mp][o]++ > 0) s->twice++;
        if (o != s->next[mp]) s->out_of_order++;
        s->next[mp] = o + 1;
        if (++s->total == PARTS * PER_PART) CHECK_OK(mql_stopper_stop(s->stopper));
    }
    pthread_mutex_unlock(&s->lock);
    return done;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    make_topic(mq, "t", PARTS);
    fill(mq, "t", PARTS, PER_PART);

    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_consumer_config_set_max_poll_records(cc, 100));
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    CHECK_OK(mql_subscribe(c, "t"));

    mql_processor_config pc = MQL_PROCESSOR_CONFIG_INIT;
    pc.threads = 3;
    pc.retry_backoff_ms = 1;
    mql_processor *proc;
    CHECK_OK(mql_processor_new(c, &pc, &proc));
    static state s;
    CHECK(pthread_mutex_init(&s.lock, NULL) == 0);
    CHECK_OK(mql_processor_stopper(proc, &s.stopper));

    CHECK_FAIL(mql_processor_run_batches(proc, NULL, &s, NULL), MQL_NULL_ARGUMENT, "handler");
    mql_processor_stats st = {99, 99, 99, 99, 99};
    CHECK_OK(mql_processor_run_batches(proc, handle, &s, &st));
    printf("processed %lu, retries %lu, longest batch %zu\n", (unsigned long)st.processed,
           (unsigned long)st.retries, s.longest);
    CHECK(s.bad_batch == 0 && s.twice == 0 && s.out_of_order == 0);
    CHECK(s.total == PARTS * PER_PART && s.longest > 1);
    CHECK(st.processed == PARTS * PER_PART && st.retries == 2 && st.failed == 0);

    mql_processor_free(proc);
    mql_stopper_free(s.stopper);
    pthread_mutex_destroy(&s.lock);
    for (uint32_t p = 0; p < PARTS; p++) {
        uint64_t off = 0;
        CHECK_OK(mql_committed(c, "t", p, &off, NULL, 0, NULL));
        CHECK(off == PER_PART);
    }
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    puts("processor_batches: ok");
    return 0;
}
