/* Every compression codec round-trips through a consumer (blocking,
 * batch and asynchronous sends), compressible data takes fewer bytes,
 * and codec names are checked. */
#include "check.h"

#define N 30
#define PAD 200

static const char *codecs[] = {"none", "gzip", "snappy", "lz4", "zstd"};

static void value_of(char *buf, size_t size, const char *codec, int i) {
    /* Compressible: the tag repeated. */
    int n = snprintf(buf, size, "%s-%d:", codec, i);
    for (; (size_t)n + 1 < size && n < PAD; n++) buf[n] = "abcd"[n % 4];
    buf[n] = '\0';
}

static void delivered(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)error_message;
    int *count = user_data;
    CHECK(status == MQL_OK && md != NULL);
    (*count)++; /* acks 1, linger 0: runs on this thread */
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    mql_broker *mq = open_data(dir, "data");

    /* Names: case-insensitive; unknown ones are refused. */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_FAIL(mql_producer_config_set_compression(pc, "brotli"), MQL_INVALID_ARGUMENT, "brotli");
    CHECK_FAIL(mql_producer_config_set_compression(pc, ""), MQL_INVALID_ARGUMENT, "compression");
    CHECK_FAIL(mql_producer_config_set_compression(pc, "gz\xff"), MQL_INVALID_UTF8, "codec");
    CHECK_OK(mql_producer_config_set_compression(pc, "GZIP"));
    mql_producer_config_free(pc);

    uint64_t bytes_none = 0;
    for (size_t c = 0; c < sizeof codecs / sizeof codecs[0]; c++) {
        const char *codec = codecs[c];
        make_topic(mq, codec, 1);
        CHECK_OK(mql_producer_config_new(&pc));
        CHECK_OK(mql_producer_config_set_compression(pc, codec));
        mql_producer *p;
        CHECK_OK(mql_producer_new(mq, pc, &p));
        mql_producer_config_free(pc);

        static char values[N][PAD + 1];
        for (int i = 0; i < N; i++) value_of(values[i], sizeof values[i], codec, i);
        /* 0..9 one by one, 10..19 as one batch, 20..29 asynchronously. */
        for (int i = 0; i < 10; i++) {
            mql_metadata md;
            CHECK_OK(mql_send(p, codec, "k", 1, values[i], strlen(values[i]), &md));
            CHECK(md.offset == (uint64_t)i);
        }
        mql_record recs[10];
        for (int i = 0; i < 10; i++) {
            recs[i] = (mql_record)MQL_RECORD_INIT;
            recs[i].topic = codec;
            recs[i].value = values[10 + i];
            recs[i].value_len = strlen(values[10 + i]);
        }
        mql_metadata mds[10];
        CHECK_OK(mql_send_batch(p, recs, 10, mds));
        for (int i = 0; i < 10; i++) CHECK(mds[i].offset == (uint64_t)(10 + i));
        int delivered_count = 0;
        for (int i = 0; i < 10; i++) {
            recs[i].value = values[20 + i];
            recs[i].value_len = strlen(values[20 + i]);
            CHECK_OK(mql_produce(p, &recs[i], delivered, &delivered_count));
        }
        CHECK_OK(mql_producer_flush(p));
        CHECK(delivered_count == 10);

        mql_producer_stats st;
        CHECK_OK(mql_producer_get_stats(p, &st));
        CHECK(st.records == N);
        if (c == 0)
            bytes_none = st.bytes;
        else if (st.bytes >= bytes_none)
            FAIL_AT("%s: %llu bytes, not fewer than %llu uncompressed", codec, (unsigned long long)st.bytes,
                    (unsigned long long)bytes_none);
        mql_producer_free(p);

        /* Read back everything, in order. */
        mql_consumer *cons;
        CHECK_OK(mql_consumer_new(mq, NULL, NULL, &cons));
        CHECK_OK(mql_assign(cons, codec, 0));
        for (int i = 0; i < N; i++) {
            mql_message *m;
            CHECK_OK(mql_poll(cons, 1000, &m));
            CHECK(mql_message_offset(m) == (uint64_t)i);
            if (!value_is(m, values[i])) FAIL_AT("%s: record %d differs", codec, i);
            if (i < 10) CHECK(key_is(m, "k"));
            mql_message_free(m);
        }
        mql_message *none;
        CHECK_STATUS(mql_poll(cons, 0, &none), MQL_TIMEOUT);
        mql_consumer_free(cons);
    }

    /* Compressed data survives reopening the directory. */
    CHECK_OK(mql_close(mq));
    mq = open_data(dir, "data");
    char expect[PAD + 1];
    value_of(expect, sizeof expect, "zstd", 17);
    CHECK(value_at(mq, "zstd", 0, 17, expect));
    CHECK_OK(mql_close(mq));
    puts("producer_compression: ok");
    return 0;
}
