/* Invalid inputs and error statuses: topic names, unknown topics and
 * partitions, oversized messages, bad config values, a locked data
 * directory, and handles used after their broker was closed. */
#include "check.h"

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char data[4096];
    join_path(data, sizeof data, dir, "data");

    mql_broker *mq;
    CHECK_OK(open_exclusive(data, &mq));

    /* A second open of the same directory in exclusive mode: MQL_LOCKED,
     * naming the holder (a shared directory's second open in one process
     * shares the engine). */
    mql_broker *second = NULL;
    CHECK_FAIL(open_exclusive(data, &second), MQL_LOCKED, "locked by");
    CHECK(strstr(mql_last_error(), "pid") != NULL || strstr(mql_last_error(), "process") != NULL);
    CHECK(second == NULL);

    /* Topic names. */
    char long_name[300];
    memset(long_name, 'a', 250);
    long_name[250] = '\0';
    const char *bad_names[] = {"", ".", "..", "a/b", "has space", "__internal", long_name, "tab\t"};
    for (size_t i = 0; i < sizeof bad_names / sizeof bad_names[0]; i++)
        CHECK_FAIL(mql_topic_create(mq, bad_names[i], NULL), MQL_INVALID_TOPIC_NAME, "invalid topic name");
    CHECK_FAIL(mql_topic_create(mq, "caf\xc3", NULL), MQL_INVALID_UTF8, "UTF-8");
    long_name[249] = '\0';
    CHECK_OK(mql_topic_create(mq, long_name, NULL)); /* 249 characters is the limit */
    CHECK_OK(mql_topic_create(mq, "Valid.name_1-x", NULL));
    CHECK_FAIL(mql_topic_create(mq, "Valid.name_1-x", NULL), MQL_TOPIC_EXISTS, "already exists");

    /* Topic configuration. */
    mql_topic_config *tc = NULL;
    CHECK_FAIL(mql_topic_config_new(0, &tc), MQL_INVALID_CONFIG, "partitions");
    CHECK(tc == NULL);
    CHECK_FAIL(mql_topic_config_new(100001, &tc), MQL_INVALID_CONFIG, "partitions");
    CHECK_OK(mql_topic_config_new(2, &tc));
    CHECK_FAIL(mql_topic_config_set_retention_ms(tc, -2), MQL_INVALID_ARGUMENT, "retention_ms");
    CHECK_FAIL(mql_topic_config_set_retention_bytes(tc, -5), MQL_INVALID_ARGUMENT, "retention_bytes");
    CHECK_OK(mql_topic_config_set_retention_ms(tc, -1));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 100)); /* too small: checked at create */
    CHECK_FAIL(mql_topic_create(mq, "small", tc), MQL_INVALID_CONFIG, "segment_bytes");
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 64 * 1024));
    CHECK_OK(mql_topic_config_set_max_message_bytes(tc, 1024));
    CHECK_OK(mql_topic_create(mq, "small", tc));
    mql_topic_config_free(tc);

    /* Config values. */
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_FAIL(mql_config_set_file_mode(cfg, 010000), MQL_INVALID_ARGUMENT, "file mode");
    mql_config_free(cfg);
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_acks(pc, 2), MQL_INVALID_ARGUMENT, "acks");
    CHECK_OK(mql_producer_config_set_acks(pc, -1));
    /* One record per partition below (the default, sticky, may put both in one). */
    CHECK_OK(mql_producer_config_set_partitioner(pc, "round_robin"));
    mql_consumer_config *cc;
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_FAIL(mql_consumer_config_set_auto_offset_reset(cc, 7), MQL_INVALID_ARGUMENT, "auto_offset_reset");
    CHECK_FAIL(mql_consumer_config_set_max_poll_records(cc, 0), MQL_INVALID_ARGUMENT, "max_poll_records");
    CHECK_OK(mql_consumer_config_set_auto_offset_reset(cc, MQL_OFFSET_RESET_ERROR));

    /* Unknown topics. */
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    mql_metadata md;
    uint32_t count = 777;
    uint64_t start = 777, end = 777;
    CHECK_FAIL(mql_send(p, "nope", NULL, 0, "v", 1, &md), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_topic_delete(mq, "nope"), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_topic_add_partitions(mq, "nope", 3), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_topic_partition_count(mq, "nope", &count), MQL_UNKNOWN_TOPIC, "nope");
    CHECK_FAIL(mql_topic_offsets(mq, "nope", 0, &start, &end), MQL_UNKNOWN_TOPIC, "nope");
    CHECK(count == 777 && start == 777 && end == 777);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, "g", cc, &c));
    mql_consumer_config_free(cc);
    /* A topic that does not exist yet is waited for; an invalid name is
     * refused. */
    CHECK_FAIL(mql_subscribe(c, "bad/name"), MQL_INVALID_TOPIC_NAME, "bad/name");
    const char *mixed[2] = {"small", "bad/name"};
    CHECK_FAIL(mql_subscribe_many(c, mixed, 2), MQL_INVALID_TOPIC_NAME, "bad/name");
    CHECK_FAIL(mql_assign(c, "nope", 0), MQL_UNKNOWN_TOPIC, "nope");

    /* Unknown partitions. */
    CHECK_FAIL(mql_topic_offsets(mq, "small", 2, &start, &end), MQL_UNKNOWN_PARTITION, "partition 2");
    CHECK_FAIL(mql_assign(c, "small", 9), MQL_UNKNOWN_PARTITION, "partition 9");
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "small";
    rec.partition = 5;
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_UNKNOWN_PARTITION, "partition 5");
    rec.partition = -2;
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_INVALID_ARGUMENT, "partition");
    rec.partition = 4294967296LL;
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_INVALID_ARGUMENT, "partition");
    rec.partition = MQL_PARTITION_ANY;
    rec.timestamp = -7;
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_INVALID_ARGUMENT, "timestamp");
    rec.timestamp = MQL_TIMESTAMP_NOW;
    /* Header names must be UTF-8. */
    mql_header bad_header = {"\xff\xfe", 2, "v", 1};
    rec.headers = &bad_header;
    rec.header_count = 1;
    CHECK_FAIL(mql_send_record(p, &rec, &md), MQL_INVALID_UTF8, "UTF-8");
    rec.headers = NULL;
    rec.header_count = 0;
    CHECK_FAIL(mql_send(p, "sm\xe9ll", NULL, 0, NULL, 0, &md), MQL_INVALID_UTF8, "topic");

    /* Message too large for the topic's 1024-byte limit. */
    static char big[2048];
    memset(big, 'x', sizeof big);
    CHECK_FAIL(mql_send(p, "small", NULL, 0, big, sizeof big, &md), MQL_MESSAGE_TOO_LARGE, "exceeds");
    CHECK_OK(mql_send(p, "small", NULL, 0, big, 900, &md));
    CHECK_OK(mql_send(p, "small", NULL, 0, big, 10, &md));
    CHECK_OK(mql_topic_offsets(mq, "small", 0, &start, &end));
    uint64_t end0 = end;
    CHECK_OK(mql_topic_offsets(mq, "small", 1, &start, &end));
    CHECK(end0 + end == 2); /* the oversized one was not written */

    /* Offsets out of range, and the ERROR reset policy. */
    CHECK_OK(mql_assign(c, "small", 0));
    CHECK_FAIL(mql_seek(c, "small", 0, 99), MQL_OFFSET_OUT_OF_RANGE, "out of range");
    CHECK_FAIL(mql_seek(c, "small", 1, 0), MQL_INVALID_ARGUMENT, "not assigned");
    mql_message *m = NULL;
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_OFFSET_OUT_OF_RANGE, "out of range");
    CHECK(m == NULL);
    CHECK_OK(mql_seek(c, "small", 0, 0));
    CHECK_OK(mql_poll(c, 1000, &m));
    CHECK_FAIL(mql_message_header(m, 0, &(const char *){NULL}, &(size_t){0}, &(const void *){NULL}, &(size_t){0}),
               MQL_INVALID_ARGUMENT, "out of range");
    mql_message_free(m);

    /* Status names. */
    CHECK(strcmp(mql_status_str(MQL_OK), "MQL_OK") == 0);
    CHECK(strcmp(mql_status_str(MQL_NULL_ARGUMENT), "MQL_NULL_ARGUMENT") == 0);
    CHECK(strcmp(mql_status_str(MQL_MESSAGE_TOO_LARGE), "MQL_MESSAGE_TOO_LARGE") == 0);
    CHECK(strcmp(mql_status_str(-1), "MQL_UNKNOWN_STATUS") == 0);
    CHECK(strcmp(mql_status_str(99999), "MQL_UNKNOWN_STATUS") == 0);
    CHECK(MQL_IO == 1 && MQL_DISK_FULL == 2 && MQL_LOCKED == 3 && MQL_INVALID_ARGUMENT == 4);
    CHECK(MQL_CLOSED == 5 && MQL_TIMEOUT == 6 && MQL_NULL_ARGUMENT == 10 && MQL_INVALID_UTF8 == 11);
    CHECK(MQL_PANIC == 12 && MQL_INVALID_TOPIC_NAME == 100 && MQL_TOPIC_EXISTS == 101);
    CHECK(MQL_UNKNOWN_TOPIC == 102 && MQL_INVALID_CONFIG == 103 && MQL_UNKNOWN_PARTITION == 200);
    CHECK(MQL_OFFSET_OUT_OF_RANGE == 201 && MQL_POISONED == 202 && MQL_CORRUPT == 300);
    CHECK(MQL_UNSUPPORTED_VERSION == 301 && MQL_MESSAGE_TOO_LARGE == 400);
    CHECK(MQL_BUFFER_FULL == 401 && MQL_OUT_OF_ORDER_SEQUENCE == 402 && MQL_PRODUCER_FENCED == 403);
    CHECK(MQL_PRODUCER_BUSY == 404);
    CHECK(strcmp(mql_status_str(MQL_BUFFER_FULL), "MQL_BUFFER_FULL") == 0);
    CHECK(strcmp(mql_status_str(MQL_OUT_OF_ORDER_SEQUENCE), "MQL_OUT_OF_ORDER_SEQUENCE") == 0);
    CHECK(strcmp(mql_status_str(MQL_PRODUCER_FENCED), "MQL_PRODUCER_FENCED") == 0);
    CHECK(MQL_TRANSACTION_TOO_LARGE == 410);
    CHECK(strcmp(mql_status_str(MQL_TRANSACTION_TOO_LARGE), "MQL_TRANSACTION_TOO_LARGE") == 0);

    /* A success does not clear the last error (like errno). */
    CHECK_FAIL(mql_topic_delete(mq, "gone"), MQL_UNKNOWN_TOPIC, "gone");
    CHECK_OK(mql_producer_flush(p));
    CHECK(mql_last_error_code() == MQL_UNKNOWN_TOPIC);

    /* After mql_close, handles made from the broker report MQL_CLOSED. */
    CHECK_OK(mql_close(mq));
    CHECK_FAIL(mql_send(p, "small", NULL, 0, "v", 1, &md), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_producer_flush(p), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_poll(c, 0, &m), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_subscribe(c, "small"), MQL_CLOSED, "closed");
    CHECK_FAIL(mql_seek(c, "small", 0, 0), MQL_CLOSED, "closed");
    mql_producer_free(p);
    mql_consumer_free(c);

    /* The lock is released: the directory opens again. */
    CHECK_OK(mql_open(data, NULL, &mq));
    CHECK_OK(mql_topic_partition_count(mq, "small", &count));
    CHECK(count == 2);
    CHECK_OK(mql_close(mq));
    puts("errors: ok");
    return 0;
}
