/* Mirrors from C: a directory's topic copied to a Kafka cluster once
 * (mql_mirror_run), the lag read without copying (mql_mirror_status), and
 * the cluster's topic copied into a second directory by a continuous copy
 * on another thread, watched with mql_mirror_get_stats and ended with
 * mql_mirror_stop; the records arrive whole and once. Wrong arguments fail
 * with their statuses. The cluster is the broker run.sh starts
 * (MQLITE_KAFKA_URL); without one the test says so and passes. */
#include "check.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

struct run_args {
    mql_mirror *mirror;
    mql_broker *source;
    mql_broker *destination;
    mql_status status;
    mql_mirror_stats stats;
};

static void *run_thread(void *arg) {
    struct run_args *a = arg;
    a->status = mql_mirror_run(a->mirror, a->source, a->destination, &a->stats);
    return NULL;
}

static void sleep_ms(long ms) {
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

static mql_broker *open_dir(const char *base, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", base, name);
    mql_broker *mq;
    CHECK_OK(mql_open(path, NULL, &mq));
    return mq;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    const char *url = getenv("MQLITE_KAFKA_URL");
    if (url == NULL || *url == '\0') {
        printf("skipped: no MQLITE_KAFKA_URL (run.sh sets it when tansu is installed)\n");
        return 0;
    }
    mql_broker *cluster;
    CHECK_OK(mql_open(url, NULL, &cluster));
    mql_broker *a = open_dir(dir, "a");
    mql_broker *b = open_dir(dir, "b");

    char topic[64];
    snprintf(topic, sizeof topic, "c-mirror-%d", (int)getpid());
    make_topic(a, topic, 2);
    mql_producer *p;
    CHECK_OK(mql_producer_new(a, NULL, &p));
    for (int i = 0; i < 20; i++) send_to(p, topic, (uint32_t)(i % 2), "record");

    /* Once, to the cluster. */
    mql_mirror *once;
    CHECK_OK(mql_mirror_new(topic, 0, 7, &once));
    mql_mirror_stats st;
    CHECK_OK(mql_mirror_run(once, a, cluster, &st));
    CHECK(st.copied == 20 && st.lag == 0 && st.partitions == 2 && st.errors == 0);
    CHECK(st.batches >= 3); /* at most 7 records a write */
    mql_mirror_free(once);

    /* The lag, without copying. */
    for (int i = 0; i < 5; i++) send_to(p, topic, 0, "more");
    CHECK_OK(mql_mirror_status(a, cluster, topic, &st));
    CHECK(st.lag == 5 && st.copied == 0 && st.partitions == 2);
    CHECK_OK(mql_mirror_new(topic, 0, 0, &once));
    CHECK_OK(mql_mirror_run(once, a, cluster, NULL));
    CHECK_OK(mql_mirror_get_stats(once, &st));
    CHECK(st.copied == 5);
    mql_mirror_free(once);

    /* Continuously, from the cluster into b, on another thread. */
    mql_mirror *follow;
    CHECK_OK(mql_mirror_new(topic, 1, 0, &follow));
    struct run_args args = {follow, cluster, b, MQL_OK, {0}};
    pthread_t t;
    CHECK(pthread_create(&t, NULL, run_thread, &args) == 0);
    for (int i = 0; i < 3000; i++) { /* 60 s under valgrind */
        CHECK_OK(mql_mirror_get_stats(follow, &st));
        if (st.copied == 25) break;
        sleep_ms(20);
    }
    CHECK(st.copied == 25);
    CHECK_OK(mql_mirror_stop(follow));
    CHECK(pthread_join(t, NULL) == 0);
    CHECK_OK(args.status);
    CHECK(args.stats.copied == 25 && args.stats.errors == 0);
    size_t len = 99;
    char text[64];
    CHECK_OK(mql_mirror_last_error(follow, text, sizeof text, &len));
    CHECK(len == 0 && text[0] == '\0');
    mql_mirror_free(follow);
    mql_topic_info *info;
    CHECK_OK(mql_topic_describe(b, topic, &info));
    uint64_t total = 0;
    for (uint32_t part = 0; part < mql_topic_info_partition_count(info); part++) {
        mql_partition_info pi;
        CHECK_OK(mql_topic_info_partition(info, part, &pi));
        total += pi.end_offset;
    }
    mql_topic_info_free(info);
    CHECK(total == 25);

    /* Wrong arguments. */
    mql_mirror *m;
    CHECK_FAIL(mql_mirror_new(NULL, 0, 0, &m), MQL_NULL_ARGUMENT, "topic");
    CHECK_FAIL(mql_mirror_new("bad/name", 0, 0, &m), MQL_INVALID_TOPIC_NAME, "bad/name");
    CHECK_OK(mql_mirror_new(topic, 0, 0, &m));
    CHECK_FAIL(mql_mirror_run(m, a, b, NULL), MQL_INVALID_ARGUMENT, "directory and a Kafka cluster");
    CHECK_FAIL(mql_mirror_run(m, NULL, b, NULL), MQL_NULL_ARGUMENT, "source");
    CHECK_FAIL(mql_mirror_get_stats(m, NULL), MQL_NULL_ARGUMENT, "out");
    CHECK_FAIL(mql_mirror_status(a, b, topic, &st), MQL_INVALID_ARGUMENT, "Kafka cluster");
    CHECK_FAIL(mql_mirror_status(a, cluster, "nowhere-c", &st), MQL_UNKNOWN_TOPIC, "nowhere-c");
    CHECK_FAIL(mql_mirror_last_error(m, NULL, 4, NULL), MQL_NULL_ARGUMENT, "buf");
    CHECK_FAIL(mql_mirror_stop(NULL), MQL_NULL_ARGUMENT, "mirror");
    mql_mirror_free(m);
    mql_mirror_free(NULL);

    mql_producer_free(p);
    CHECK_OK(mql_close(a));
    CHECK_OK(mql_close(b));
    CHECK_OK(mql_close(cluster));
    printf("ok\n");
    return 0;
}
