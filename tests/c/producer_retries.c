/* Retries and fault avoidance: with one partition full (a file-size limit,
 * SIGXFSZ ignored so writes fail with EFBIG), key-less records go to the
 * other partitions and all land; keyed and explicit-partition records fail
 * with MQL_DISK_FULL; the stats count the retry and the avoided partition.
 * Also the settings' setters. */
#include <signal.h>
#include <sys/resource.h>

#include "check.h"

#define PARTITIONS 3

static void set_file_size_limit(rlim_t bytes) {
    struct rlimit lim;
    signal(SIGXFSZ, SIG_IGN);
    CHECK(getrlimit(RLIMIT_FSIZE, &lim) == 0);
    lim.rlim_cur = bytes == RLIM_INFINITY ? lim.rlim_max : bytes;
    CHECK(setrlimit(RLIMIT_FSIZE, &lim) == 0);
}

static mql_status send_rec(mql_producer *p, int64_t partition, const char *key, const char *value,
                          mql_metadata *md) {
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.partition = partition;
    if (key) {
        rec.key = key;
        rec.key_len = strlen(key);
    }
    rec.value = value;
    rec.value_len = strlen(value);
    return mql_send_record(p, &rec, md);
}

/* A key whose partition among PARTITIONS is `want`. */
static void key_for(uint32_t want, char *key, size_t size) {
    for (int i = 0;; i++) {
        snprintf(key, size, "key-%d", i);
        uint32_t p;
        CHECK_OK(mql_partition_for_key(key, strlen(key), PARTITIONS, &p));
        if (p == want) return;
    }
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(PARTITIONS, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 64 * 1024));
    CHECK_OK(mql_topic_create(mq, "t", tc));
    mql_topic_config_free(tc);

    /* --- setters --- */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_retries(pc, 0));
    CHECK_OK(mql_producer_config_set_fault_backoff_ms(pc, 60000));
    CHECK_OK(mql_producer_config_set_delivery_timeout_ms(pc, 0));
    CHECK_OK(mql_producer_config_set_retries(pc, 2));
    CHECK_OK(mql_producer_config_set_partitioner(pc, "round_robin"));
    mql_producer *rr;
    CHECK_OK(mql_producer_new(mq, pc, &rr));
    mql_producer_config_free(pc);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));

    /* --- partition 1 fills up --- */
    char filler[1001];
    memset(filler, 'f', 1000);
    filler[1000] = '\0';
    mql_metadata md;
    for (int i = 0; i < 50; i++) CHECK_OK(send_rec(p, 1, NULL, filler, &md));
    set_file_size_limit(1024);
    mql_status st = MQL_OK;
    for (int i = 0; i < 200 && st == MQL_OK; i++) st = send_rec(p, 1, NULL, filler, &md);
    CHECK(st == MQL_DISK_FULL);
    int small = 0;
    while (send_rec(p, 1, NULL, "small-0000", &md) == MQL_OK) CHECK(++small < 10000);
    CHECK(mql_last_error_code() == MQL_DISK_FULL);

    /* Records that may not move fail with the typed error. */
    char key[32];
    key_for(1, key, sizeof key);
    CHECK_STATUS(send_rec(p, MQL_PARTITION_ANY, key, "keyed", &md), MQL_DISK_FULL);
    CHECK_STATUS(send_rec(p, 1, NULL, "explicit", &md), MQL_DISK_FULL);

    /* Key-less records (round robin: every third is due in partition 1)
     * all land elsewhere. */
    uint64_t end0 = end_of(mq, "t", 0), end1 = end_of(mq, "t", 1), end2 = end_of(mq, "t", 2);
    for (int i = 0; i < 30; i++) {
        char value[32];
        snprintf(value, sizeof value, "full-%05d", i);
        CHECK_OK(send_rec(rr, MQL_PARTITION_ANY, NULL, value, &md));
        CHECK(md.partition != 1);
    }
    mql_producer_stats stats;
    CHECK_OK(mql_producer_get_stats(rr, &stats));
    set_file_size_limit(RLIM_INFINITY);
    CHECK(stats.retries == 1);
    CHECK(stats.avoided_partitions == 1);
    CHECK(stats.records == 30);
    CHECK(stats.errors == 0);
    CHECK(end_of(mq, "t", 1) == end1);
    CHECK((end_of(mq, "t", 0) - end0) + (end_of(mq, "t", 2) - end2) == 30);

    mql_producer_free(rr);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    return 0;
}
