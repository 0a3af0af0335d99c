/* Every status code the library knows, provoked through real calls from C:
 * each failure must return its status, set mql_last_error_code() to it and
 * explain itself in mql_last_error(). The list of codes is not copied from
 * the header: the test asks the library (mql_status_str() of every value
 * from 0 to 999) and fails if one it knows was not provoked here, so a new
 * status cannot be added without a test of it.
 *
 * One status cannot be provoked, on purpose: MQL_PANIC means a bug of the
 * library itself (an internal panic caught at the C boundary); no correct
 * or incorrect use of the API is meant to reach it, so a test that did
 * would be a bug report. The boundary is tested in Rust instead
 * (ffi/src/error.rs, guard_catches_panics_and_keeps_text_per_thread).
 *
 * Each case also checks that the handles stay usable afterwards, or (for
 * the disk cases) that the data directory recovers: after space returns,
 * after a poisoned partition is reopened. */
#include <signal.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include "check.h"

#define MAX_CODE 1000

static int provoked[MAX_CODE];

/* A call that must fail with `want`, its text mentioning `text`. */
#define PROVOKE(call, want, text)                                            \
    do {                                                                     \
        CHECK_FAIL(call, want, text);                                        \
        provoked[want] = 1;                                                  \
    } while (0)

static void write_file(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    if (f == NULL) FAIL_AT("cannot write %s", path);
    fputs(text, f);
    fclose(f);
}

/* The contents of `path` (NUL-terminated; free it). */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f == NULL) FAIL_AT("cannot read %s", path);
    char *buf = malloc(1 << 16);
    CHECK(buf != NULL);
    size_t n = fread(buf, 1, (1 << 16) - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

/* Rewrites the "version" number of the JSON file at `path` to `version`. */
static void set_json_version(const char *path, int version) {
    char *text = read_file(path);
    char *key = strstr(text, "\"version\"");
    CHECK(key != NULL);
    char *digits = key + strlen("\"version\"");
    while (*digits == ' ' || *digits == ':') digits++;
    char *rest = digits;
    while (*rest >= '0' && *rest <= '9') rest++;
    CHECK(rest > digits);
    char *out = malloc(strlen(text) + 32);
    CHECK(out != NULL);
    snprintf(out, strlen(text) + 32, "%.*s%d%s", (int)(digits - text), text, version, rest);
    write_file(path, out);
    free(out);
    free(text);
}

static int delivered;
static void count_delivery(void *user_data, const mql_metadata *md, mql_status status, const char *error_message) {
    (void)user_data;
    (void)md;
    (void)error_message;
    CHECK(status == MQL_OK);
    delivered++;
}

/* A producer named `name` with strict sequences. */
static mql_producer *named_producer(mql_broker *mq, const char *name) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_name(pc, name));
    CHECK_OK(mql_producer_config_set_strict_sequences(pc, true));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

static mql_record seq_record(const char *topic, int64_t sequence) {
    mql_record r = MQL_RECORD_INIT;
    r.topic = topic;
    r.partition = 0;
    r.value = "v";
    r.value_len = 1;
    r.sequence = sequence;
    r.has_sequence = true;
    return r;
}

/* MQL_DISK_FULL: a file-size limit (SIGXFSZ ignored, so writes past it
 * fail with EFBIG) makes a segment file's growth fail. Segment files start
 * small and grow ahead of the writer, so the topic is created under the
 * limit and the send that needs the file to grow past it fails; nothing of
 * that send is written. Once the limit is lifted, writing goes on. */
static void disk_full(mql_broker *mq) {
    struct rlimit before;
    CHECK(getrlimit(RLIMIT_FSIZE, &before) == 0);
    CHECK(signal(SIGXFSZ, SIG_IGN) != SIG_ERR);
    struct rlimit small = before;
    small.rlim_cur = 64 * 1024;
    CHECK(setrlimit(RLIMIT_FSIZE, &small) == 0);
    mql_topic_config *tc;
    CHECK_OK(mql_topic_config_new(1, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 1 << 20));
    mql_status st = mql_topic_create(mq, "big", tc);
    int created = st == MQL_OK;
    int sent = 0;
    if (created) {
        mql_producer *p;
        CHECK_OK(mql_producer_new(mq, NULL, &p));
        static char value[1024];
        memset(value, 'v', sizeof value);
        while (sent < 1000 && (st = mql_send(p, "big", NULL, 0, value, sizeof value, NULL)) == MQL_OK)
            sent++;
        mql_producer_free(p);
    }
    CHECK(setrlimit(RLIMIT_FSIZE, &before) == 0);
    CHECK_STATUS(st, MQL_DISK_FULL);
    CHECK(mql_last_error_code() == MQL_DISK_FULL);
    CHECK(strstr(mql_last_error(), "no space") != NULL);
    provoked[MQL_DISK_FULL] = 1;
    /* Space is back: the topic is there (or can be created), the failed
     * send left nothing behind, and writing to it works. */
    if (!created)
        CHECK_OK(mql_topic_create(mq, "big", tc));
    mql_topic_config_free(tc);
    CHECK(end_of(mq, "big", 0) == (uint64_t)sent);
    fill(mq, "big", 1, 3);
    CHECK(end_of(mq, "big", 0) == (uint64_t)sent + 3);
}

/* MQL_POISONED: the partition's directory disappears (renamed away) after
 * its first append and before its first flush to disk, so the acks=-1
 * send's flush fails (an I/O error syncing the directory) and the
 * partition refuses later writes. A reopen, with the directory back,
 * clears it. This relies on the first flush of a segment syncing its
 * directory; should that move elsewhere, the first send here succeeds and
 * the test says so at that line. (Before its first append a partition
 * rewrites its recovery point by path: with the directory gone that
 * append fails with MQL_IO and changes nothing.) */
static void poisoned(const char *dir) {
    mql_broker *mq = open_data(dir, "poison");
    make_topic(mq, "p", 1);
    fill(mq, "p", 1, 1); /* the first append, not flushed (acks=1) */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_acks(pc, -1));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    char part[4300], moved[4300];
    snprintf(part, sizeof part, "%s/poison/topics/p/0", dir);
    snprintf(moved, sizeof moved, "%s/poison/topics/p/0.away", dir);
    CHECK(rename(part, moved) == 0);
    mql_metadata md;
    PROVOKE(mql_send(p, "p", NULL, 0, "lost?", 5, &md), MQL_IO, "I/O error");
    PROVOKE(mql_send(p, "p", NULL, 0, "refused", 7, &md), MQL_POISONED, "poisoned");
    mql_producer_free(p);
    /* The close's final flush fails too; the broker is released anyway. */
    CHECK(mql_close(mq) != MQL_OK);
    CHECK(rename(moved, part) == 0);
    mq = open_data(dir, "poison");
    fill(mq, "p", 1, 1);
    uint64_t end = end_of(mq, "p", 0);
    /* The record whose flush failed was written to the map before the
     * flush; the refused one was not. */
    CHECK(end == 3);
    CHECK(value_at(mq, "p", 0, 0, "0:0"));
    CHECK(value_at(mq, "p", 0, 1, "lost?"));
    CHECK_OK(mql_close(mq));
}

/* MQL_CORRUPT and MQL_UNSUPPORTED_VERSION: a topic's metadata file that is
 * not JSON, or says a format version this library does not know, makes
 * that topic unavailable (the directory still opens); the error names the
 * file. */
static void bad_metadata(const char *dir, const char *name, int corrupt) {
    mql_broker *mq = open_data(dir, name);
    make_topic(mq, "m", 1);
    CHECK_OK(mql_close(mq));
    char path[4300], data[4300];
    snprintf(path, sizeof path, "%s/%s/topics/m/topic.json", dir, name);
    join_path(data, sizeof data, dir, name);
    char *original = read_file(path);
    uint32_t count = 0;
    if (corrupt) {
        write_file(path, "{ this is not json");
        CHECK_OK(mql_open(data, NULL, &mq));
        PROVOKE(mql_topic_partition_count(mq, "m", &count), MQL_CORRUPT, "topic.json");
    } else {
        set_json_version(path, 99);
        CHECK_OK(mql_open(data, NULL, &mq));
        PROVOKE(mql_topic_partition_count(mq, "m", &count), MQL_UNSUPPORTED_VERSION, "topic.json");
    }
    CHECK_OK(mql_close(mq));
    /* Nothing stays locked: with the file repaired, the directory opens. */
    write_file(path, original);
    free(original);
    mq = open_data(dir, name);
    uint32_t n = 0;
    CHECK_OK(mql_topic_partition_count(mq, "m", &n));
    CHECK(n == 1);
    CHECK_OK(mql_close(mq));
}

/* MQL_READ_ONLY: a producer of a handle opened read-only, on a directory
 * nobody else holds; nothing is written, and the handle still reads. */
static void read_only(const char *dir) {
    mql_broker *mq = open_data(dir, "ro");
    make_topic(mq, "t", 1);
    CHECK_OK(mql_close(mq));
    char path[4096];
    join_path(path, sizeof path, dir, "ro");
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_readonly(cfg, true));
    CHECK_OK(mql_open(path, cfg, &mq));
    mql_config_free(cfg);
    mql_producer *p = NULL;
    PROVOKE(mql_producer_new(mq, NULL, &p), MQL_READ_ONLY, "read-only");
    CHECK(p == NULL);
    uint32_t n = 0;
    CHECK_OK(mql_topic_partition_count(mq, "t", &n));
    CHECK(n == 1);
    CHECK_OK(mql_close(mq));
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char data[4096], file[4096], under_file[4200];
    join_path(data, sizeof data, dir, "data");
    join_path(file, sizeof file, dir, "plain-file");
    join_path(under_file, sizeof under_file, file, "data");
    /* Exclusive mode, by name: a second open below must be MQL_LOCKED. */
    mql_broker *mq = NULL;
    CHECK_OK(open_exclusive(data, &mq));
    make_topic(mq, "t", 1);

    /* --- general --- */
    mql_broker *other = NULL;
    write_file(file, "not a directory\n");
    PROVOKE(mql_open(under_file, NULL, &other), MQL_IO, "I/O error");
    disk_full(mq);
    PROVOKE(open_exclusive(data, &other), MQL_LOCKED, "locked");
    CHECK(other == NULL);
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    PROVOKE(mql_config_set_file_mode(cfg, 010000), MQL_INVALID_ARGUMENT, "file mode");
    mql_config_free(cfg);
    mql_producer *closed;
    CHECK_OK(mql_producer_new(mq, NULL, &closed));
    CHECK_OK(mql_producer_close(closed));
    PROVOKE(mql_send(closed, "t", NULL, 0, "v", 1, NULL), MQL_CLOSED, "closed");
    mql_producer_free(closed);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "t", 0));
    CHECK_OK(mql_seek_to_end(c, "t", 0));
    mql_message *m = NULL;
    PROVOKE(mql_poll(c, 0, &m), MQL_TIMEOUT, "timed out");
    CHECK(m == NULL);
    read_only(dir);
    PROVOKE(mql_config_new(NULL), MQL_NULL_ARGUMENT, "`out` is NULL");
    PROVOKE(mql_topic_create(mq, "bad\xff", NULL), MQL_INVALID_UTF8, "UTF-8");

    /* --- topics --- */
    PROVOKE(mql_topic_create(mq, "a/b", NULL), MQL_INVALID_TOPIC_NAME, "invalid topic name");
    PROVOKE(mql_topic_create(mq, "t", NULL), MQL_TOPIC_EXISTS, "already exists");
    PROVOKE(mql_topic_delete(mq, "nope"), MQL_UNKNOWN_TOPIC, "nope");
    mql_topic_config *tc = NULL;
    PROVOKE(mql_topic_config_new(0, &tc), MQL_INVALID_CONFIG, "partitions");
    CHECK(tc == NULL);

    /* --- partitions --- */
    uint64_t start, end;
    PROVOKE(mql_topic_offsets(mq, "t", 9, &start, &end), MQL_UNKNOWN_PARTITION, "partition 9");
    PROVOKE(mql_seek(c, "t", 0, 1000), MQL_OFFSET_OUT_OF_RANGE, "out of range");
    poisoned(dir);

    /* --- on-disk format --- */
    bad_metadata(dir, "corrupt", 1);
    bad_metadata(dir, "future", 0);

    /* --- producers --- */
    CHECK_OK(mql_topic_config_new(1, &tc));
    CHECK_OK(mql_topic_config_set_segment_bytes(tc, 64 * 1024));
    CHECK_OK(mql_topic_config_set_max_message_bytes(tc, 1024));
    CHECK_OK(mql_topic_create(mq, "small", tc));
    mql_topic_config_free(tc);
    static char big[2048];
    memset(big, 'x', sizeof big);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    PROVOKE(mql_send(p, "small", NULL, 0, big, sizeof big, NULL), MQL_MESSAGE_TOO_LARGE, "exceeds");
    CHECK(end_of(mq, "small", 0) == 0);
    mql_producer_free(p);

    /* Buffer full: a 64-byte buffer lets the first record through (nothing
     * else is held). The second finds no room: making some, the producer
     * writes the first one's batch at once, but with acks=-1 its bytes stay
     * held until the background thread flushed it, and max_block_ms is 0. */
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_acks(pc, -1));
    CHECK_OK(mql_producer_config_set_linger_ms(pc, 60000));
    CHECK_OK(mql_producer_config_set_buffer_memory(pc, 64));
    CHECK_OK(mql_producer_config_set_max_block_ms(pc, 0));
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    mql_record r = MQL_RECORD_INIT;
    r.topic = "t";
    r.value = big;
    r.value_len = 100;
    CHECK_OK(mql_produce(p, &r, count_delivery, NULL));
    PROVOKE(mql_produce(p, &r, count_delivery, NULL), MQL_BUFFER_FULL, "buffer");
    CHECK_OK(mql_producer_flush(p));
    CHECK(delivered == 1); /* the refused record has no report */
    CHECK_OK(mql_produce(p, &r, count_delivery, NULL)); /* room again */
    mql_producer_free(p);
    CHECK(delivered == 2);

    p = named_producer(mq, "ingest");
    r = seq_record("t", 0);
    CHECK_OK(mql_send_record(p, &r, NULL));
    r = seq_record("t", 5);
    PROVOKE(mql_send_record(p, &r, NULL), MQL_OUT_OF_ORDER_SEQUENCE, "expected 1, received 5");
    mql_producer *newer = named_producer(mq, "ingest");
    r = seq_record("t", 1);
    PROVOKE(mql_send_record(p, &r, NULL), MQL_PRODUCER_FENCED, "fenced");
    CHECK_OK(mql_send_record(newer, &r, NULL));
    mql_producer_free(newer);
    mql_producer_free(p);
    mql_producer_config *xc;
    CHECK_OK(mql_producer_config_new(&xc));
    CHECK_OK(mql_producer_config_set_name(xc, "only"));
    CHECK_OK(mql_producer_config_set_access_mode(xc, MQL_ACCESS_MODE_EXCLUSIVE));
    CHECK_OK(mql_producer_new(mq, xc, &p));
    PROVOKE(mql_producer_new(mq, xc, &newer), MQL_PRODUCER_BUSY, "busy");
    mql_producer_free(p);
    mql_producer_config_free(xc);

    /* A transaction past max_transaction_bytes: the record is not added,
     * the transaction stays open and commits what it has. */
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_transactional_id(pc, "txn"));
    CHECK_OK(mql_producer_config_set_max_transaction_bytes(pc, 300));
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    uint64_t t_end = end_of(mq, "t", 0);
    mql_txn *txn;
    CHECK_OK(mql_txn_begin(p, &txn));
    r = (mql_record)MQL_RECORD_INIT;
    r.topic = "t";
    r.partition = 0;
    r.value = big;
    r.value_len = 100;
    CHECK_OK(mql_txn_send(txn, &r));
    PROVOKE(mql_txn_send(txn, &r), MQL_TRANSACTION_TOO_LARGE, "larger than the limit");
    CHECK_OK(mql_txn_commit(txn, NULL, 0));
    mql_txn_free(txn);
    CHECK(end_of(mq, "t", 0) > t_end); /* the record and its commit marker */
    mql_producer_free(p);

    /* --- consumers --- */
    make_topic(mq, "two", 2);
    mql_consumer *x, *y;
    CHECK_OK(mql_consumer_new(mq, "h", NULL, &x));
    CHECK_OK(mql_subscribe(x, "two"));
    CHECK_OK(mql_consumer_new(mq, "h", NULL, &y));
    CHECK_OK(mql_subscribe(y, "two"));
    CHECK_STATUS(mql_poll(x, 0, &m), MQL_TIMEOUT); /* x gives partition 1 to y */
    mql_committed_offset other_members = {"two", 1, 0, NULL, 0};
    PROVOKE(mql_commit_offsets(x, &other_members, 1), MQL_COMMIT_FAILED, "two/1");
    mql_consumer_free(x);
    mql_consumer_free(y);

    /* --- share consumers --- */
    mql_share_consumer *sc;
    CHECK_OK(mql_share_consumer_new(mq, "s", NULL, &sc));
    CHECK_OK(mql_share_subscribe(sc, "two"));
    fill(mq, "two", 2, 1);
    mql_share_message *sm;
    CHECK_OK(mql_share_poll(sc, 5000, &sm));
    CHECK_OK(mql_share_ack(sc, sm, MQL_ACK_ACCEPT));
    PROVOKE(mql_share_ack(sc, sm, MQL_ACK_ACCEPT), MQL_INVALID_RECORD_STATE, "not held");
    mql_share_message_free(sm);
    mql_share_consumer_free(sc);
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));

    /* --- every status the library knows was provoked --- */
    int known = 0;
    for (int code = 0; code < MAX_CODE; code++) {
        const char *name = mql_status_str(code);
        if (strcmp(name, "MQL_UNKNOWN_STATUS") == 0) {
            if (provoked[code]) FAIL_AT("provoked status %d, which the library does not name", code);
            continue;
        }
        known++;
        CHECK(strncmp(name, "MQL_", 4) == 0);
        if (code == MQL_OK || code == MQL_PANIC) continue; /* see the top of the file */
        if (!provoked[code]) FAIL_AT("status %s (%d) was not provoked: add a case for it", name, code);
    }
    CHECK(strcmp(mql_status_str(MQL_OK), "MQL_OK") == 0);
    CHECK(strcmp(mql_status_str(MQL_PANIC), "MQL_PANIC") == 0);
    printf("every_status: all %d statuses but MQL_OK and MQL_PANIC provoked\n", known);
    return 0;
}
