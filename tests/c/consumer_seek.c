/* mql_seek_to_beginning, mql_seek_to_end and mql_offsets_for_times; a seek
 * drops what was fetched of that partition and not yet handed out. */
#include "check.h"

static uint64_t next_offset(mql_consumer *c) {
    mql_message *m;
    CHECK_OK(mql_poll(c, 1000, &m));
    uint64_t o = mql_message_offset(m);
    mql_message_free(m);
    return o;
}

int main(int argc, char **argv) {
    mql_broker *mq = open_data(scratch_dir(argc, argv), "data");
    make_topic(mq, "t", 1);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    mql_record rec = MQL_RECORD_INIT;
    rec.topic = "t";
    rec.partition = 0;
    rec.value = "v";
    rec.value_len = 1;
    mql_metadata md;
    for (int i = 0; i < 5; i++) {
        rec.timestamp = 1000 + 100 * i; /* 1000, 1100, ..., 1400 */
        CHECK_OK(mql_send_record(p, &rec, &md));
    }
    mql_producer_free(p);

    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    CHECK(next_offset(c) == 0);
    CHECK(next_offset(c) == 1);
    CHECK_OK(mql_seek_to_end(c, "t", 0));
    uint64_t pos;
    CHECK_OK(mql_position(c, "t", 0, &pos));
    CHECK(pos == 5);
    mql_message *m;
    CHECK_STATUS(mql_poll(c, 0, &m), MQL_TIMEOUT); /* buffered 2..4 were dropped */
    CHECK_OK(mql_seek_to_beginning(c, "t", 0));
    CHECK(next_offset(c) == 0);
    CHECK_FAIL(mql_seek_to_end(c, "t", 1), MQL_UNKNOWN_PARTITION, "partition 1");
    CHECK_FAIL(mql_seek_to_beginning(c, "nope", 0), MQL_UNKNOWN_TOPIC, "nope");

    mql_partition_timestamp q[4] = {{"t", 0, 0}, {"t", 0, 1150}, {"t", 0, 1400}, {"t", 0, 5000}};
    uint64_t offs[4] = {0};
    CHECK_OK(mql_offsets_for_times(c, q, 4, offs));
    CHECK(offs[0] == 0 && offs[1] == 2 && offs[2] == 4 && offs[3] == MQL_OFFSET_UNKNOWN);
    CHECK_OK(mql_seek(c, "t", 0, offs[1]));
    CHECK(next_offset(c) == 2);
    /* A seek that fails changes nothing: 3 and 4 are still fetched and
     * not handed out, and come next. */
    CHECK_FAIL(mql_seek(c, "t", 0, 1000), MQL_OFFSET_OUT_OF_RANGE, "1000");
    CHECK_OK(mql_position(c, "t", 0, &pos));
    CHECK(pos == 3);
    CHECK(next_offset(c) == 3);
    CHECK(next_offset(c) == 4);
    CHECK_OK(mql_seek(c, "t", 0, 2));
    q[1].partition = 3;
    uint64_t before[4];
    memcpy(before, offs, sizeof offs);
    CHECK_FAIL(mql_offsets_for_times(c, q, 4, offs), MQL_UNKNOWN_PARTITION, "partition 3");
    CHECK(memcmp(before, offs, sizeof offs) == 0); /* untouched */

    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    puts("consumer_seek: ok");
    return 0;
}
