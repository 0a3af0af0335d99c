/* Named producers in several writer processes of one shared data directory,
 * through the C API (children made with fork(), each opening the directory
 * in shared mode with a handle of its own):
 *
 * - the writer storm: two writer children with named producers ("p0" with
 *   acks=all, "p1" with acks=1) send records with their own sequences,
 *   sequence s to partition s % 2, while the parent kills them with SIGKILL
 *   at random moments and forks them again; each resumes after its
 *   mql_producer_last_sequence and journals every acknowledged send. At
 *   the end every producer's sequences are there once each from 0 to its
 *   last, the offsets are dense, every journalled record is where its
 *   acknowledgement said and intact;
 * - fencing across processes: a newer instance of a name in another
 *   process gets the same producer id, a higher epoch and the older one's
 *   last sequence, and the older one's next send fails with
 *   MQL_PRODUCER_FENCED, writing nothing;
 * - a topic deleted under a writer in another process: its next send fails
 *   with MQL_UNKNOWN_TOPIC, and it writes again once the topic is created
 *   again. */
#define _POSIX_C_SOURCE 200809L
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "check.h"

#define WRITERS 2
#define PARTS 2
/* Where a writer stops sending (it then waits to be killed), so that the
 * read-back stays short in every pass. */
#define MAX_SEQ 200000

/* Writer w's record of sequence seq: "p<w>-<seq>-" then seq % 32 bytes
 * that depend on both, so a record read back can be checked whole. */
static size_t storm_value(char *buf, size_t size, int w, int64_t seq) {
    int n = snprintf(buf, size, "p%d-%lld-", w, (long long)seq);
    CHECK(n > 0 && (size_t)n + 32 <= size);
    size_t len = (size_t)n;
    for (int64_t i = 0; i < seq % 32; i++) buf[len++] = (char)('a' + (seq * 7 + w * 13 + i) % 26);
    return len;
}

static mql_producer *named(mql_broker *mq, const char *name, int32_t acks) {
    mql_producer_config *pc;
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_producer_config_set_name(pc, name));
    CHECK_OK(mql_producer_config_set_acks(pc, acks));
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, pc, &p));
    mql_producer_config_free(pc);
    return p;
}

/* Writer child w: resumes after its producer's last sequence and sends
 * until it is killed, appending "<seq> <partition> <offset>\n" of each
 * acknowledged send to `journal` (one write(2) each: a kill leaves a line
 * whole or absent). */
static void storm_writer(const char *path, int w, const char *journal) {
    int fd = open(journal, O_WRONLY | O_APPEND | O_CREAT, 0600);
    CHECK(fd >= 0);
    mql_broker *mq = open_shared(path);
    char name[8];
    snprintf(name, sizeof name, "p%d", w);
    mql_producer *p = named(mq, name, w == 0 ? -1 : 1);
    int64_t last = -2;
    CHECK_OK(mql_producer_last_sequence(p, &last));
    for (int64_t seq = last + 1; seq < MAX_SEQ; seq++) {
        char v[64];
        mql_record r = MQL_RECORD_INIT;
        r.topic = "storm";
        r.partition = seq % PARTS;
        r.value = v;
        r.value_len = storm_value(v, sizeof v, w, seq);
        r.sequence = seq;
        r.has_sequence = true;
        mql_metadata md;
        CHECK_OK(mql_send_record(p, &r, &md));
        CHECK(!md.duplicate && md.partition == (uint32_t)(seq % PARTS));
        char line[64];
        int n = snprintf(line, sizeof line, "%lld %u %llu\n", (long long)seq, md.partition,
                         (unsigned long long)md.offset);
        CHECK(write(fd, line, (size_t)n) == n);
    }
    for (;;) pause();
}

static pid_t start_writer(const char *path, int w, const char *journal) {
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) storm_writer(path, w, journal);
    return pid;
}

/* Kills `pid` with SIGKILL; fails if it had ended by itself. */
static void kill_writer(pid_t pid, int w) {
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid)
        FAIL_AT("writer %d ended by itself (wait status %#x)", w, status);
    CHECK(kill(pid, SIGKILL) == 0);
    CHECK(waitpid(pid, &status, 0) == pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

static void storm(const char *dir) {
    char path[4096], journal[WRITERS][4096];
    join_path(path, sizeof path, dir, "storm");
    for (int w = 0; w < WRITERS; w++) {
        char name[16];
        snprintf(name, sizeof name, "journal-%d", w);
        join_path(journal[w], sizeof journal[w], dir, name);
    }
    mql_broker *mq = open_shared(path);
    make_topic(mq, "storm", PARTS);
    /* Closed before the forks: nothing of the parent's engine is copied
     * into the children. */
    CHECK_OK(mql_close(mq));
    unsigned seed = (unsigned)time(NULL) ^ (unsigned)getpid();
    srand(seed);
    pid_t pids[WRITERS];
    for (int w = 0; w < WRITERS; w++) pids[w] = start_writer(path, w, journal[w]);
    int kills = 0;
    for (; kills < 8; kills++) {
        sleep_ms(150 + rand() % 300);
        int w = rand() % WRITERS;
        kill_writer(pids[w], w);
        pids[w] = start_writer(path, w, journal[w]);
    }
    sleep_ms(400);
    for (int w = 0; w < WRITERS; w++) kill_writer(pids[w], w);

    /* Everything, read by a fresh handle. */
    mq = open_shared(path);
    /* offset_of[w][s]: where p<w>'s sequence s is; -1 when nowhere. */
    int64_t *offset_of[WRITERS];
    int64_t count[WRITERS] = {0};
    for (int w = 0; w < WRITERS; w++) {
        offset_of[w] = malloc(MAX_SEQ * sizeof(int64_t));
        CHECK(offset_of[w] != NULL);
        for (int64_t s = 0; s < MAX_SEQ; s++) offset_of[w][s] = -1;
    }
    for (uint32_t q = 0; q < PARTS; q++) {
        uint64_t end = end_of(mq, "storm", q);
        mql_consumer *c;
        CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
        CHECK_OK(mql_assign(c, "storm", q));
        CHECK_OK(mql_seek_to_beginning(c, "storm", q));
        for (uint64_t offset = 0; offset < end; offset++) {
            mql_message *m = NULL;
            CHECK_OK(mql_poll(c, 5000, &m));
            if (mql_message_partition(m) != q || mql_message_offset(m) != offset)
                FAIL_AT("%u/%llu where %u/%llu was due (seed %u)", mql_message_partition(m),
                        (unsigned long long)mql_message_offset(m), q,
                        (unsigned long long)offset, seed);
            size_t len = 0;
            const char *v = mql_message_value(m, &len);
            char text[64];
            CHECK(v != NULL && len > 0 && len < sizeof text);
            memcpy(text, v, len);
            text[len] = '\0';
            int w = -1;
            long long seq = -1;
            CHECK(sscanf(text, "p%d-%lld-", &w, &seq) == 2);
            CHECK(w >= 0 && w < WRITERS && seq >= 0 && seq < MAX_SEQ);
            char want[64];
            size_t want_len = storm_value(want, sizeof want, w, seq);
            if (len != want_len || memcmp(v, want, len) != 0)
                FAIL_AT("damaged record at %u/%llu: %s", q, (unsigned long long)offset, text);
            if (seq % PARTS != q) FAIL_AT("p%d seq %lld in partition %u", w, seq, q);
            if (offset_of[w][seq] != -1) FAIL_AT("p%d: seq %lld twice (seed %u)", w, seq, seed);
            offset_of[w][seq] = (int64_t)offset;
            count[w]++;
            mql_message_free(m);
        }
        mql_consumer_free(c);
    }
    for (int w = 0; w < WRITERS; w++) {
        CHECK(count[w] > 0);
        for (int64_t s = 0; s < count[w]; s++)
            if (offset_of[w][s] == -1) FAIL_AT("p%d: seq %lld missing (seed %u)", w, (long long)s, seed);
        char name[8];
        snprintf(name, sizeof name, "p%d", w);
        mql_producer *p = named(mq, name, 1);
        int64_t last = -2;
        CHECK_OK(mql_producer_last_sequence(p, &last));
        CHECK(last == count[w] - 1);
        mql_producer_free(p);
        /* Every acknowledged send is where its acknowledgement said. */
        FILE *f = fopen(journal[w], "r");
        CHECK(f != NULL);
        long long seq;
        unsigned part;
        unsigned long long off;
        int acked = 0;
        while (fscanf(f, "%lld %u %llu", &seq, &part, &off) == 3) {
            if (seq >= count[w] || part != seq % PARTS || offset_of[w][seq] != (int64_t)off)
                FAIL_AT("p%d: acknowledged seq %lld at %u/%llu lost (seed %u)", w, seq, part, off,
                        seed);
            acked++;
        }
        fclose(f);
        CHECK(acked > 0);
        free(offset_of[w]);
    }
    CHECK_OK(mql_close(mq));
    printf("storm: %d kills; p0 wrote %lld, p1 %lld, every acknowledged record there\n", kills,
           (long long)count[0], (long long)count[1]);
}

/* Reads one byte from fd (0 at end of file). */
static char get_byte(int fd) {
    char b = 0;
    return read(fd, &b, 1) == 1 ? b : 0;
}

static void put_byte(int fd, char b) { CHECK(write(fd, &b, 1) == 1); }

static void send_text(mql_producer *p, const char *topic, const char *text, int64_t seq,
                      mql_metadata *md) {
    mql_record r = MQL_RECORD_INIT;
    r.topic = topic;
    r.partition = 0;
    r.value = text;
    r.value_len = strlen(text);
    r.sequence = seq;
    r.has_sequence = seq >= 0;
    CHECK_OK(mql_send_record(p, &r, md));
}

/* The older instance of "f": sends sequences 0..49, says so on `up` ('s'),
 * waits for a byte on `down`, then tries sequence 50, which must fail with
 * MQL_PRODUCER_FENCED. Exits 0 when it did. */
static void fence_old(const char *path, int up, int down) {
    mql_broker *mq = open_shared(path);
    mql_producer *p = named(mq, "f", 1);
    int64_t id = 0;
    int16_t epoch = 0;
    CHECK_OK(mql_producer_id(p, &id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK(write(up, &id, sizeof id) == sizeof id && write(up, &epoch, sizeof epoch) == sizeof epoch);
    for (int seq = 0; seq < 50; seq++) {
        char v[16];
        snprintf(v, sizeof v, "old-%d", seq);
        mql_metadata md;
        send_text(p, "fenced", v, seq, &md);
    }
    put_byte(up, 's');
    CHECK(get_byte(down) == 'n');
    mql_record r = MQL_RECORD_INIT;
    r.topic = "fenced";
    r.partition = 0;
    r.value = "old-50";
    r.value_len = 6;
    r.sequence = 50;
    r.has_sequence = true;
    mql_metadata md;
    CHECK_STATUS(mql_send_record(p, &r, &md), MQL_PRODUCER_FENCED);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    exit(0);
}

/* Forks a child that runs `child(path, up, down)` (it must exit): `up`
 * carries bytes from the child, `down` to it. Returns its pid; the
 * parent's ends are in up_r and down_w. */
static pid_t fork_child(const char *path, void (*child)(const char *, int, int), int *up_r,
                        int *down_w) {
    int up[2], down[2];
    CHECK(pipe(up) == 0 && pipe(down) == 0);
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(up[0]);
        close(down[1]);
        child(path, up[1], down[0]);
    }
    close(up[1]);
    close(down[0]);
    *up_r = up[0];
    *down_w = down[1];
    return pid;
}

static void fencing(const char *dir) {
    char path[4096];
    join_path(path, sizeof path, dir, "fencing");
    mql_broker *mq = open_shared(path);
    make_topic(mq, "fenced", 1);
    CHECK_OK(mql_close(mq));
    int up, down;
    pid_t pid = fork_child(path, fence_old, &up, &down);
    int64_t old_id = 0;
    int16_t old_epoch = 0;
    CHECK(read(up, &old_id, sizeof old_id) == sizeof old_id);
    CHECK(read(up, &old_epoch, sizeof old_epoch) == sizeof old_epoch);
    CHECK(get_byte(up) == 's');
    mq = open_shared(path);
    mql_producer *p = named(mq, "f", 1);
    int64_t id = 0, last = -2;
    int16_t epoch = 0;
    CHECK_OK(mql_producer_id(p, &id));
    CHECK_OK(mql_producer_epoch(p, &epoch));
    CHECK_OK(mql_producer_last_sequence(p, &last));
    CHECK(id == old_id);     /* one name, one producer id */
    CHECK(epoch > old_epoch); /* the newer instance has the higher epoch */
    CHECK(last == 49);        /* and resumes after the older one's sequences */
    put_byte(down, 'n');
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL_AT("the older instance failed (wait status %#x)", status);
    close(up);
    close(down);
    for (int seq = 50; seq < 100; seq++) {
        char v[16];
        snprintf(v, sizeof v, "new-%d", seq);
        mql_metadata md;
        send_text(p, "fenced", v, seq, &md);
        CHECK(!md.duplicate);
    }
    mql_producer_free(p);
    CHECK(end_of(mq, "fenced", 0) == 100);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "fenced", 0));
    CHECK_OK(mql_seek_to_beginning(c, "fenced", 0));
    for (int seq = 0; seq < 100; seq++) {
        mql_message *m = NULL;
        CHECK_OK(mql_poll(c, 5000, &m));
        char want[16];
        snprintf(want, sizeof want, "%s-%d", seq < 50 ? "old" : "new", seq);
        size_t len = 0;
        const char *v = mql_message_value(m, &len);
        CHECK(v != NULL && len == strlen(want) && memcmp(v, want, len) == 0);
        mql_message_free(m);
    }
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
    printf("fencing: the older instance in another process is fenced and wrote nothing after\n");
}

/* Sends to "d" until a send fails (saying 'p' on `up` after 200 sends);
 * the failure must be MQL_UNKNOWN_TOPIC ('f' on `up`); once told the
 * topic exists again (a byte on `down`), sends one record with the same
 * producer, which must land at offset 0. Exits 0 when all held. */
static void delete_producer(const char *path, int up, int down) {
    mql_broker *mq = open_shared(path);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    mql_status st = MQL_OK;
    for (int sent = 0; sent < 10000000; sent++) {
        mql_metadata md;
        st = mql_send(p, "d", NULL, 0, "x", 1, &md);
        if (st != MQL_OK) break;
        if (sent == 199) put_byte(up, 'p');
    }
    if (st != MQL_UNKNOWN_TOPIC)
        FAIL_AT("send to a deleted topic: %s, not MQL_UNKNOWN_TOPIC (%s)", mql_status_str(st),
                mql_last_error());
    put_byte(up, 'f');
    CHECK(get_byte(down) == 'r');
    mql_metadata md;
    CHECK_OK(mql_send(p, "d", NULL, 0, "again", 5, &md));
    CHECK(md.offset == 0);
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    exit(0);
}

static void delete_while_writing(const char *dir) {
    char path[4096];
    join_path(path, sizeof path, dir, "deleting");
    mql_broker *mq = open_shared(path);
    make_topic(mq, "d", 1);
    CHECK_OK(mql_close(mq));
    int up, down;
    pid_t pid = fork_child(path, delete_producer, &up, &down);
    char b = get_byte(up);
    mq = open_shared(path);
    if (b == 'p') {
        CHECK_OK(mql_topic_delete(mq, "d"));
        b = get_byte(up);
    }
    if (b == 'f') {
        make_topic(mq, "d", 1);
        put_byte(down, 'r');
    }
    close(up);
    close(down);
    int status = 0;
    CHECK(waitpid(pid, &status, 0) == pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL_AT("the writer failed (wait status %#x)", status);
    CHECK(end_of(mq, "d", 0) == 1);
    CHECK_OK(mql_close(mq));
    printf("delete while writing: MQL_UNKNOWN_TOPIC in the writer, which writes again after\n");
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    /* A byte to a child that already failed must not end the parent. */
    signal(SIGPIPE, SIG_IGN);
    storm(dir);
    fencing(dir);
    delete_while_writing(dir);
    return 0;
}
