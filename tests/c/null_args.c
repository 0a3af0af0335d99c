/* NULL for every pointer argument of every function: MQL_NULL_ARGUMENT (or
 * a documented no-op / neutral value), and nothing written or changed. */
#include "check.h"

static char dummy;
#define SENTINEL ((void *)&dummy)

#define CHECK_NULL(call)                                                  \
    do {                                                                  \
        CHECK_STATUS(call, MQL_NULL_ARGUMENT);                            \
        CHECK(mql_last_error_code() == MQL_NULL_ARGUMENT);                \
        CHECK(strstr(mql_last_error(), "NULL") != NULL);                  \
    } while (0)

static uint32_t select_zero(void *user_data, const mql_record_view *rec, uint32_t partitions) {
    (void)user_data;
    (void)rec;
    (void)partitions;
    return 0;
}

static void ignore_report(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)user_data;
    (void)md;
    (void)status;
    (void)error_message;
}

static uint64_t end_offset(mql_broker *mq, const char *topic) {
    uint64_t start, end;
    CHECK_OK(mql_topic_offsets(mq, topic, 0, &start, &end));
    return end;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char data[4096], other[4096], lock[4200];
    join_path(data, sizeof data, dir, "data");
    join_path(other, sizeof other, dir, "other");
    join_path(lock, sizeof lock, other, "LOCK");

    /* --- data directory --- */
    mql_broker *mq = SENTINEL;
    CHECK_NULL(mql_open(NULL, NULL, &mq));
    CHECK(mq == SENTINEL);
    CHECK_NULL(mql_open(other, NULL, NULL));
    CHECK(fopen(lock, "r") == NULL); /* nothing was created or locked */
    CHECK_OK(mql_close(NULL));

    mql_config *cfg = SENTINEL;
    CHECK_NULL(mql_config_new(NULL));
    mql_config_free(NULL);
    CHECK_NULL(mql_config_set_prefault(NULL, true));
    CHECK_NULL(mql_config_set_file_mode(NULL, 0600));
    CHECK_NULL(mql_config_set_retention_check_interval_ms(NULL, 1));
    CHECK_NULL(mql_config_set_max_commit_metadata_bytes(NULL, 1));
    CHECK_OK(mql_config_new(&cfg));
    CHECK(cfg != SENTINEL);
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    CHECK_OK(mql_config_set_max_commit_metadata_bytes(cfg, 4096));
    CHECK_OK(mql_open(data, cfg, &mq));
    mql_config_free(cfg);

    /* --- topics --- */
    mql_topic_config *tc = SENTINEL;
    CHECK_NULL(mql_topic_config_new(1, NULL));
    mql_topic_config_free(NULL);
    CHECK_NULL(mql_topic_config_set_segment_bytes(NULL, 1 << 20));
    CHECK_NULL(mql_topic_config_set_retention_ms(NULL, 1000));
    CHECK_NULL(mql_topic_config_set_retention_bytes(NULL, 1000));
    CHECK_NULL(mql_topic_config_set_max_message_bytes(NULL, 1000));
    CHECK_NULL(mql_topic_config_set_log_append_time(NULL, true));
    CHECK_NULL(mql_topic_config_set_retention_respects_groups(NULL, true));
    CHECK_OK(mql_topic_config_new(1, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 1 << 20));
    CHECK_NULL(mql_topic_create(NULL, "t", tc));
    CHECK_NULL(mql_topic_create(mq, NULL, tc));
    CHECK_OK(mql_topic_create(mq, "t", tc)); /* NULL config is allowed, see roundtrip */
    mql_topic_config_free(tc);

    CHECK_NULL(mql_topic_delete(NULL, "t"));
    CHECK_NULL(mql_topic_delete(mq, NULL));
    CHECK_NULL(mql_topic_add_partitions(NULL, "t", 2));
    CHECK_NULL(mql_topic_add_partitions(mq, NULL, 2));
    uint32_t count = 777;
    CHECK_NULL(mql_topic_partition_count(NULL, "t", &count));
    CHECK_NULL(mql_topic_partition_count(mq, NULL, &count));
    CHECK_NULL(mql_topic_partition_count(mq, "t", NULL));
    CHECK(count == 777);
    CHECK_OK(mql_topic_partition_count(mq, "t", &count));
    CHECK(count == 1); /* the failed add_partitions changed nothing */
    uint64_t start = 777, end = 777;
    CHECK_NULL(mql_topic_offsets(NULL, "t", 0, &start, &end));
    CHECK_NULL(mql_topic_offsets(mq, NULL, 0, &start, &end));
    CHECK_NULL(mql_topic_offsets(mq, "t", 0, NULL, &end));
    CHECK_NULL(mql_topic_offsets(mq, "t", 0, &start, NULL));
    CHECK(start == 777 && end == 777);
    mql_recovery_stats rs;
    memset(&rs, 0x5A, sizeof rs);
    CHECK_NULL(mql_partition_recovery(NULL, "t", 0, &rs));
    CHECK_NULL(mql_partition_recovery(mq, NULL, 0, &rs));
    CHECK_NULL(mql_partition_recovery(mq, "t", 0, NULL));
    CHECK(rs.truncated_bytes == 0x5A5A5A5A5A5A5A5AULL && rs.quarantined_bytes == 0x5A5A5A5A5A5A5A5AULL);

    /* --- producers --- */
    mql_producer_config *pc = SENTINEL;
    CHECK_NULL(mql_producer_config_new(NULL));
    mql_producer_config_free(NULL);
    CHECK_NULL(mql_producer_config_set_acks(NULL, 1));
    CHECK_NULL(mql_producer_config_set_idempotent(NULL, true));
    CHECK_NULL(mql_producer_config_set_name(NULL, "n"));
    CHECK_NULL(mql_producer_config_set_linger_ms(NULL, 1));
    CHECK_NULL(mql_producer_config_set_batch_size(NULL, 1));
    CHECK_NULL(mql_producer_config_set_buffer_memory(NULL, 1));
    CHECK_NULL(mql_producer_config_set_max_block_ms(NULL, 1));
    CHECK_NULL(mql_producer_config_set_compression(NULL, "gzip"));
    CHECK_NULL(mql_producer_config_set_partitioner(NULL, "sticky"));
    CHECK_NULL(mql_producer_config_set_partitioner_fn(NULL, select_zero, NULL));
    CHECK_NULL(mql_producer_config_set_dedup_window(NULL, 5));
    CHECK_NULL(mql_producer_config_set_strict_sequences(NULL, true));
    mql_interceptor ic = {NULL, ignore_report, NULL};
    CHECK_NULL(mql_producer_config_add_interceptor(NULL, &ic));
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_NULL(mql_producer_config_set_compression(pc, NULL));
    CHECK_NULL(mql_producer_config_set_partitioner(pc, NULL));
    CHECK_NULL(mql_producer_config_set_partitioner_fn(pc, NULL, SENTINEL)); /* select is required */
    CHECK_NULL(mql_producer_config_add_interceptor(pc, NULL));
    CHECK_OK(mql_producer_config_set_name(pc, NULL)); /* NULL: no name (the default) */
    mql_producer *p = SENTINEL;
    CHECK_NULL(mql_producer_new(NULL, pc, &p));
    CHECK(p == SENTINEL);
    CHECK_NULL(mql_producer_new(mq, pc, NULL));
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    mql_producer_free(NULL);

    mql_metadata md;
    memset(&md, 0x5A, sizeof md);
    mql_metadata md_before = md;
    CHECK_NULL(mql_send(NULL, "t", "k", 1, "v", 1, &md));
    CHECK_NULL(mql_send(p, NULL, "k", 1, "v", 1, &md));
    CHECK_NULL(mql_send(p, "t", NULL, 1, "v", 1, &md)); /* NULL key needs length 0 */
    CHECK_NULL(mql_send(p, "t", "k", 1, NULL, 1, &md)); /* NULL value needs length 0 */
    CHECK(memcmp(&md, &md_before, sizeof md) == 0);

    mql_header good = {"h", 1, "v", 1};
    mql_header no_name = {NULL, 0, "v", 1};
    mql_header no_value = {"h", 1, NULL, 1};
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.value = "v";
    rec.value_len = 1;
    CHECK_NULL(mql_send_record(NULL, &rec, &md));
    CHECK_NULL(mql_send_record(p, NULL, &md));
    rec.topic = NULL;
    CHECK_NULL(mql_send_record(p, &rec, &md));
    rec.topic = "t";
    rec.key_len = 1; /* key NULL */
    CHECK_NULL(mql_send_record(p, &rec, &md));
    rec.key_len = 0;
    rec.value = NULL; /* value_len 1 */
    CHECK_NULL(mql_send_record(p, &rec, &md));
    rec.value = "v";
    rec.header_count = 1; /* headers NULL */
    CHECK_NULL(mql_send_record(p, &rec, &md));
    mql_header hs[2] = {good, no_name};
    rec.headers = hs;
    rec.header_count = 2;
    CHECK_NULL(mql_send_record(p, &rec, &md));
    hs[1] = no_value;
    CHECK_NULL(mql_send_record(p, &rec, &md));
    CHECK(memcmp(&md, &md_before, sizeof md) == 0);
    CHECK(end_offset(mq, "t") == 0); /* no failed send wrote anything */
    CHECK_NULL(mql_producer_flush(NULL));

    /* Asynchronous and batch sends. */
    rec.headers = NULL;
    rec.header_count = 0;
    CHECK_NULL(mql_produce(NULL, &rec, ignore_report, NULL));
    CHECK_NULL(mql_produce(p, NULL, ignore_report, NULL));
    rec.topic = NULL;
    CHECK_NULL(mql_produce(p, &rec, ignore_report, NULL));
    rec.topic = "t";
    rec.value = NULL; /* value_len 1 */
    CHECK_NULL(mql_produce(p, &rec, ignore_report, NULL));
    rec.value = "v";
    mql_metadata mds[2];
    memset(mds, 0x5A, sizeof mds);
    mql_metadata mds_before[2];
    memcpy(mds_before, mds, sizeof mds);
    mql_record recs[2] = {rec, rec};
    CHECK_NULL(mql_send_batch(NULL, recs, 2, mds));
    CHECK_NULL(mql_send_batch(p, NULL, 2, mds));
    recs[1].topic = NULL;
    CHECK_NULL(mql_send_batch(p, recs, 2, mds));
    CHECK(strstr(mql_last_error(), "records[1].topic") != NULL);
    CHECK(memcmp(mds, mds_before, sizeof mds) == 0);
    CHECK_OK(mql_send_batch(p, NULL, 0, NULL)); /* an empty batch needs no array */
    CHECK(end_offset(mq, "t") == 0);              /* none of them wrote anything */
    CHECK_NULL(mql_producer_flush_timeout(NULL, 10));
    CHECK_NULL(mql_producer_close(NULL));

    /* Queries. */
    int64_t i64 = 777;
    int16_t i16 = 777;
    mql_producer_stats stats;
    memset(&stats, 0x5A, sizeof stats);
    mql_producer_stats stats_before = stats;
    CHECK_NULL(mql_producer_last_sequence(NULL, &i64));
    CHECK_NULL(mql_producer_last_sequence(p, NULL));
    CHECK_NULL(mql_producer_next_sequence(NULL, &i64));
    CHECK_NULL(mql_producer_next_sequence(p, NULL));
    CHECK_NULL(mql_producer_get_stats(NULL, &stats));
    CHECK_NULL(mql_producer_get_stats(p, NULL));
    CHECK_NULL(mql_producer_id(NULL, &i64));
    CHECK_NULL(mql_producer_id(p, NULL));
    CHECK_NULL(mql_producer_epoch(NULL, &i16));
    CHECK_NULL(mql_producer_epoch(p, NULL));
    uint64_t u64 = 777;
    CHECK_NULL(mql_producer_buffered_bytes(NULL, &u64));
    CHECK_NULL(mql_producer_buffered_bytes(p, NULL));
    CHECK(i64 == 777 && i16 == 777 && u64 == 777);
    CHECK(memcmp(&stats, &stats_before, sizeof stats) == 0);
    rec.headers = hs;
    rec.header_count = 2;

    /* One real record for the consumer part. */
    hs[1] = good;
    CHECK_OK(mql_send_record(p, &rec, &md));
    CHECK(md.offset == 0);

    /* --- consumers --- */
    mql_consumer_config *cc = SENTINEL;
    CHECK_NULL(mql_consumer_config_new(NULL));
    mql_consumer_config_free(NULL);
    CHECK_NULL(mql_consumer_config_set_auto_offset_reset(NULL, MQL_OFFSET_RESET_LATEST));
    CHECK_NULL(mql_consumer_config_set_max_poll_records(NULL, 10));
    CHECK_OK(mql_consumer_config_new(&cc));
    mql_consumer *c = SENTINEL;
    CHECK_NULL(mql_consumer_new(NULL, "g", cc, &c));
    CHECK(c == SENTINEL);
    CHECK_NULL(mql_consumer_new(mq, "g", cc, NULL));
    CHECK_OK(mql_consumer_new(mq, NULL, cc, &c)); /* NULL group is allowed */
    mql_consumer_config_free(cc);
    mql_consumer_free(NULL);

    CHECK_NULL(mql_subscribe(NULL, "t"));
    CHECK_NULL(mql_subscribe(c, NULL));
    const char *one_null[1] = {NULL};
    const char *second_null[2] = {"t", NULL};
    const char *good_list[1] = {"t"};
    CHECK_NULL(mql_subscribe_many(NULL, good_list, 1));
    CHECK_NULL(mql_subscribe_many(c, NULL, 1));
    CHECK_NULL(mql_subscribe_many(c, one_null, 1));
    CHECK_NULL(mql_subscribe_many(c, second_null, 2));
    mql_message *m = SENTINEL;
    /* Still nothing subscribed: the failed calls changed nothing. */
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_INVALID_ARGUMENT);
    CHECK(m == SENTINEL);
    CHECK_OK(mql_subscribe_many(c, NULL, 0)); /* an empty list is fine */
    CHECK_NULL(mql_assign(NULL, "t", 0));
    CHECK_NULL(mql_assign(c, NULL, 0));
    CHECK_NULL(mql_unsubscribe(NULL));
    CHECK_OK(mql_assign(c, "t", 0));
    CHECK_NULL(mql_seek(NULL, "t", 0, 0));
    CHECK_NULL(mql_seek(c, NULL, 0, 0));
    uint64_t pos = 777;
    CHECK_NULL(mql_position(NULL, "t", 0, &pos));
    CHECK_NULL(mql_position(c, NULL, 0, &pos));
    CHECK_NULL(mql_position(c, "t", 0, NULL));
    CHECK(pos == 777);
    CHECK_NULL(mql_poll(NULL, 0, &m));
    CHECK_NULL(mql_poll(c, 0, NULL));
    CHECK(m == SENTINEL);
    /* The failed poll consumed nothing. */
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK(mql_message_offset(m) == 0);

    /* --- messages --- */
    size_t len = 777;
    CHECK(mql_message_topic(NULL) == NULL);
    CHECK(mql_message_partition(NULL) == 0);
    CHECK(mql_message_offset(NULL) == 0);
    CHECK(mql_message_timestamp(NULL) == -1);
    CHECK(mql_message_key(NULL, &len) == NULL);
    CHECK(mql_message_value(NULL, &len) == NULL);
    CHECK(len == 777);
    CHECK(mql_message_header_count(NULL) == 0);
    /* The length out-parameter of key/value is optional. */
    CHECK(mql_message_key(m, NULL) == NULL); /* no key */
    CHECK(mql_message_value(m, NULL) != NULL);
    const char *name = SENTINEL;
    const void *hv = SENTINEL;
    size_t name_len = 777, hv_len = 777;
    CHECK_NULL(mql_message_header(NULL, 0, &name, &name_len, &hv, &hv_len));
    CHECK_NULL(mql_message_header(m, 0, NULL, &name_len, &hv, &hv_len));
    CHECK_NULL(mql_message_header(m, 0, &name, NULL, &hv, &hv_len));
    CHECK_NULL(mql_message_header(m, 0, &name, &name_len, NULL, &hv_len));
    CHECK_NULL(mql_message_header(m, 0, &name, &name_len, &hv, NULL));
    CHECK((const void *)name == SENTINEL && hv == SENTINEL && name_len == 777 && hv_len == 777);
    CHECK_OK(mql_message_header(m, 1, &name, &name_len, &hv, &hv_len));
    CHECK(bytes_eq(name, name_len, "h") && bytes_eq(hv, hv_len, "v"));
    mql_message_free(NULL);
    mql_message_free(m);

    mql_consumer_free(c);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    puts("null_args: ok");
    return 0;
}
