#!/usr/bin/env python3
"""Generates two C tests of the C API's contract from include/mqlite.h:

    python3 tests/c/gen_contract_tests.py include/mqlite.h OUTDIR

writes OUTDIR/null_every_arg.c and OUTDIR/closed_every_call.c (run.sh does
this on every run; nothing generated is committed).

The header is the source of truth: a function added to it is covered by the
next run without touching this file. What the generator cannot know is in
the tables below, and an unknown parameter type, string name or struct
stops it with an error, so that nothing is skipped silently.

null_every_arg.c passes NULL to every pointer argument of every function,
one at a time, with valid values for all the others:

- a required pointer (the default) must give MQL_NULL_ARGUMENT, set
  mql_last_error_code() to it, name the argument in mql_last_error()
  ("`name` is NULL", or "name` is NULL" for a struct field, whose name is
  prefixed with where the struct is, e.g. `record->headers[0].name`), and
  write none of the out-parameters (they are pre-filled with 0x5A bytes and
  compared afterwards);
- a function that returns a value instead of a status (an accessor) must
  return its neutral value (NULL, 0, or what NEUTRAL says) for a NULL
  handle, and a void one (a `_free`) must simply return;
- a pointer the header documents as optional is in ALLOWED: either called
  with NULL (it must then succeed: MQL_OK, or no crash for accessors) or,
  when a call would block or change state the test relies on, listed with
  the reason and the test that covers it;
- struct arguments (records, headers, committed offsets, ...) get the same
  treatment for each pointer field, one level of nested arrays included;
  a pointer followed by a `size_t` length or count gets length 1, so that
  NULL is never the "empty" case.

closed_every_call.c calls every function taking a producer, consumer, share
consumer or processor (all other arguments valid) on handles that were
closed: a producer after mql_producer_close, a consumer after
mql_consumer_close, a share consumer after mql_share_consumer_close, and all
four after mql_close of their broker. Each call must fail with
MQL_CLOSED (error text and mql_last_error_code() included) unless AFTER_CLOSE
lists what it returns instead and why (the calls the header documents as
still working on a closed handle).

`void *user_data` arguments are opaque to the library and never checked.
"""

import os
import re
import sys

# ---------------------------------------------------------------- tables

# Documented optional pointers: (function or struct, parameter or field) ->
# ("call", why NULL is fine) or ("skip", why it is not called here).
ALLOWED = {
    ("mql_last_error_copy", "buf"): ("call", "NULL asks for the length only"),
    ("mql_message_id", "buf"): ("call", "NULL asks for the length only"),
    ("mql_open", "config"): ("skip", "NULL: the defaults; a successful open would take a second lock (roundtrip.c opens with NULL)"),
    ("mql_close", "broker"): ("call", "NULL does nothing and returns MQL_OK"),
    ("mql_topic_create", "config"): ("skip", "NULL: one partition, defaults; would create a topic (errors.c, null_args.c)"),
    ("mql_producer_config_set_name", "name"): ("call", "NULL: an anonymous producer"),
    ("mql_producer_new", "config"): ("skip", "NULL: the defaults; would make a producer (null_args.c)"),
    ("mql_send", "out"): ("call", "the metadata is optional"),
    ("mql_send_record", "out"): ("call", "the metadata is optional"),
    ("mql_send_batch", "out"): ("call", "the metadata is optional"),
    ("mql_produce", "callback"): ("call", "no delivery report wanted"),
    ("mql_consumer_new", "group_id"): ("skip", "NULL: a standalone consumer; would make a consumer (null_args.c)"),
    ("mql_consumer_new", "config"): ("skip", "NULL: the defaults; would make a consumer (null_args.c)"),
    ("mql_consumer_set_rebalance_callback", "callback"): ("call", "NULL removes the callback"),
    ("mql_committed", "metadata_len_out"): ("call", "the metadata length is optional"),
    ("mql_consumer_member_id", "len_out"): ("call", "the length is optional"),
    ("mql_processor_new", "config"): ("skip", "NULL: the defaults; would lend the consumer to a new processor (processor_orderly.c)"),
    ("mql_processor_run", "stats"): ("skip", "the stats are optional; a run blocks until stopped (processor_orderly.c)"),
    ("mql_processor_run_batches", "stats"): ("skip", "the stats are optional; a run blocks until stopped (processor_batches.c)"),
    ("mql_message_key", "len"): ("call", "the length is optional"),
    ("mql_message_value", "len"): ("call", "the length is optional"),
    ("mql_interceptor", "on_send"): ("call", "either function may be NULL, not both"),
    ("mql_interceptor", "on_acknowledgement"): ("call", "either function may be NULL, not both"),
    ("mql_committed_offset", "metadata"): ("call", "NULL: no metadata"),
    ("mql_set_log_callback", "callback"): ("call", "NULL turns logging off (the default)"),
    # Transactions.
    ("mql_producer_config_set_transactional_id", "id"): ("call", "NULL: no transactional id"),
    # Share consumers.
    ("mql_share_consumer_new", "config"): ("call", "NULL: the defaults"),
    # Mirrors.
    ("mql_mirror_run", "stats"): ("skip", "the stats are optional; a run needs a cluster (mirror.c)"),
    ("mql_mirror_last_error", "len_out"): ("call", "the length is optional"),
    ("mql_txn_commit", "out"): ("skip", "the metadata is optional; a commit would end the transaction (transactions.c)"),
}

# Neutral results of accessors given a NULL handle, when not NULL / 0.
NEUTRAL = {"mql_message_timestamp": "-1"}

# Valid `const char *` values by parameter name, then by (function, name).
STRINGS = {
    "path": "other_path",
    "name": '"t"',
    "topic": '"t"',
    "group_id": '"g"',
    "group": '"g"',
    "pattern": '"t"',
    "codec": '"none"',
    "strategy": '"range"',
    "client_id": '"c"',
    "id": '"t:0:0"',
    "reason": '"r"',
}
STRINGS_BY_FUNCTION = {
    ("mql_producer_config_set_transactional_id", "id"): '"tx"',
    ("mql_producer_config_set_name", "name"): '"n"',
    ("mql_producer_config_set_partitioner", "name"): '"sticky"',
    ("mql_config_set_kafka_property", "key"): '"client.id"',
    ("mql_config_set_kafka_property", "value"): '"c"',
    ("mql_config_set_mode", "mode"): '"exclusive"',
}

# Valid scalar values by parameter name (others: 0 / false, or 1 for a
# length or count following a buffer or array).
SCALARS = {"partitions": "1", "total": "1"}

# Live handles made by the C prelude, by handle type.
HANDLES = {
    "mql_broker": "mq",
    "mql_config": "cfg",
    "mql_topic_config": "tc",
    "mql_producer_config": "pc",
    "mql_consumer_config": "cc",
    "mql_producer": "prod",
    "mql_consumer": "cons",
    "mql_message": "msg",
    "mql_message_batch": "mbatch",
    "mql_waker": "wk",
    "mql_group_info": "gi",
    "mql_topic_info": "ti",
    "mql_name_list": "names",
    "mql_processor": "proc",
    "mql_stopper": "stp",
    "mql_txn": "txn",
    "mql_share_consumer": "ssc",
    "mql_share_message": "smsg",
    "mql_mirror": "mir",
}

# Valid input structs (arrays of one, made by the C prelude).
STRUCTS = {
    "mql_record": "rec_ok",
    "mql_header": "hdr_ok",
    "mql_interceptor": "ic_ok",
    "mql_partition_timestamp": "pt_ok",
    "mql_committed_offset": "co_ok",
    "mql_processor_config": "pcfg_ok",
    "mql_topic_partition": "tp_ok",
    "mql_partition_offset": "po_ok",
    "mql_share_consumer_config": "sccfg_ok",
}

PRELUDE = r"""
static mql_broker *mq;
static mql_config *cfg;
static mql_topic_config *tc;
static mql_producer_config *pc;
static mql_consumer_config *cc;
static mql_producer *prod;
static mql_consumer *cons, *cons2;
static mql_message *msg;
static mql_message_batch *mbatch;
static mql_waker *wk;
static mql_group_info *gi;
static mql_topic_info *ti;
static mql_name_list *names;
static mql_processor *proc;
static mql_stopper *stp;
static mql_producer *txn_prod;
static mql_txn *txn;
static mql_share_consumer *ssc;
static mql_share_message *smsg;
static mql_mirror *mir;
static char other_path[4200];

static mql_header hdr_ok[1] = {{"h", 1, "v", 1}};
static mql_record rec_ok[1] = {MQL_RECORD_INIT};
static mql_interceptor ic_ok[1];
static mql_partition_timestamp pt_ok[1] = {{"t", 0, 0}};
static mql_committed_offset co_ok[1] = {{"t", 0, 0, "m", 0}};
static mql_processor_config pcfg_ok[1] = {MQL_PROCESSOR_CONFIG_INIT};
static mql_topic_partition tp_ok[1] = {{"t", 0}};
static mql_partition_offset po_ok[1] = {{"t", 0, 1}};
static mql_share_consumer_config sccfg_ok[1] = {MQL_SHARE_CONSUMER_CONFIG_INIT};
static const char *topics_ok[1] = {"t"};

/* An out-parameter's storage, pre-filled with 0x5A, must be untouched. */
static void expect_untouched(const void *p, size_t n, const char *call, const char *arg, int line) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0x5A) FAIL_AT("line %d: %s wrote out-parameter `%s` although it failed", line, call, arg);
}

static void setup(const char *dir) {
    join_path(other_path, sizeof other_path, dir, "other");
    mq = open_data(dir, "data");
    make_topic(mq, "t", 1);
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_topic_config_new(1, &tc));
    CHECK_OK(mql_producer_config_new(&pc));
    CHECK_OK(mql_consumer_config_new(&cc));
    CHECK_OK(mql_producer_new(mq, NULL, &prod));
    ic_ok[0] = (mql_interceptor){stub_mql_on_send_callback, stub_mql_delivery_callback, NULL};
    rec_ok[0].topic = "t";
    rec_ok[0].partition = 0;
    rec_ok[0].key = "k";
    rec_ok[0].key_len = 1;
    rec_ok[0].value = "v";
    rec_ok[0].value_len = 1;
    rec_ok[0].headers = hdr_ok;
    rec_ok[0].header_count = 1;
    CHECK_OK(mql_send_record(prod, rec_ok, NULL));
    CHECK_OK(mql_send_record(prod, rec_ok, NULL));
    /* A group member by manual assignment: it may commit partition 0. */
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &cons));
    CHECK_OK(mql_assign(cons, "t", 0));
    CHECK_OK(mql_poll(cons, 5000, &msg));
    CHECK_OK(mql_poll_batch(cons, 5000, &mbatch)); /* the second record */
    CHECK(mql_message_batch_len(mbatch) == 1);
    CHECK_OK(mql_consumer_waker(cons, &wk));
    CHECK_OK(mql_commit(cons));
    CHECK_OK(mql_describe_group(mq, "g", &gi));
    CHECK(mql_group_info_committed_count(gi) == 1);
    CHECK_OK(mql_topic_describe(mq, "t", &ti));
    CHECK(mql_topic_info_partition_count(ti) == 1);
    CHECK_OK(mql_groups(mq, &names));
    CHECK(mql_name_list_len(names) == 1);
    /* A processor over a consumer of its own. */
    CHECK_OK(mql_consumer_new(mq, "g2", NULL, &cons2));
    CHECK_OK(mql_assign(cons2, "t", 0));
    CHECK_OK(mql_processor_new(cons2, pcfg_ok, &proc));
    CHECK_OK(mql_processor_stopper(proc, &stp));
    /* An open transaction of a producer with a transactional id. */
    CHECK_OK(mql_producer_config_set_transactional_id(pc, "tx"));
    CHECK_OK(mql_producer_new(mq, pc, &txn_prod));
    CHECK_OK(mql_producer_config_set_transactional_id(pc, NULL));
    CHECK_OK(mql_txn_begin(txn_prod, &txn));
    /* A share consumer holding a message of its own (share group "g"). */
    CHECK_OK(mql_share_consumer_new(mq, "g", sccfg_ok, &ssc));
    CHECK_OK(mql_share_subscribe(ssc, "t"));
    CHECK_OK(mql_share_poll(ssc, 5000, &smsg));
    /* A mirror (not run: that needs a cluster). */
    CHECK_OK(mql_mirror_new("t", 0, 0, &mir));
}

static void teardown(void) {
    mql_mirror_free(mir);
    mql_share_message_free(smsg);
    mql_share_consumer_free(ssc);
    mql_txn_free(txn);
    mql_producer_free(txn_prod);
    mql_stopper_free(stp);
    mql_processor_free(proc);
    mql_consumer_free(cons2);
    mql_group_info_free(gi);
    mql_topic_info_free(ti);
    mql_name_list_free(names);
    mql_waker_free(wk);
    mql_message_free(msg);
    mql_message_batch_free(mbatch);
    mql_consumer_free(cons);
    mql_producer_free(prod);
    mql_consumer_config_free(cc);
    mql_producer_config_free(pc);
    mql_topic_config_free(tc);
    mql_config_free(cfg);
    if (mq != NULL) CHECK_OK(mql_close(mq));
}
"""

NULL_HELPERS = r"""
static int null_checked, allowed_called, skipped;

/* A call that got a NULL where a pointer is required. */
static void expect_null(mql_status st, const char *call, const char *want_text, int line) {
    if (st != MQL_NULL_ARGUMENT)
        FAIL_AT("line %d: %s returned %s, want MQL_NULL_ARGUMENT (last error: %s)", line, call,
                mql_status_str(st), st == MQL_OK ? "-" : mql_last_error());
    if (mql_last_error_code() != MQL_NULL_ARGUMENT)
        FAIL_AT("line %d: %s: mql_last_error_code() is %s", line, call, mql_status_str(mql_last_error_code()));
    if (strstr(mql_last_error(), want_text) == NULL)
        FAIL_AT("line %d: %s: error text \"%s\" lacks \"%s\"", line, call, mql_last_error(), want_text);
    null_checked++;
}

/* A call with a NULL the header allows. */
static void expect_ok(mql_status st, const char *call, int line) {
    if (st != MQL_OK)
        FAIL_AT("line %d: %s returned %s, want MQL_OK (last error: %s)", line, call, mql_status_str(st),
                mql_last_error());
    allowed_called++;
}
"""

CLOSED_HELPERS = r"""
static int calls_checked;

/* A call on a closed handle. */
static void expect_closed(mql_status st, const char *call, int line) {
    if (st != MQL_CLOSED)
        FAIL_AT("line %d: %s returned %s, want MQL_CLOSED (last error: %s)", line, call, mql_status_str(st),
                st == MQL_OK ? "-" : mql_last_error());
    if (mql_last_error_code() != MQL_CLOSED)
        FAIL_AT("line %d: %s: mql_last_error_code() is %s", line, call, mql_status_str(mql_last_error_code()));
    if (strstr(mql_last_error(), "closed") == NULL)
        FAIL_AT("line %d: %s: error text \"%s\" lacks \"closed\"", line, call, mql_last_error());
    calls_checked++;
}

/* A call on a closed handle that the header says returns `want`. */
static __attribute__((unused)) void expect_status(mql_status st, mql_status want, const char *call, int line) {
    if (st != want)
        FAIL_AT("line %d: %s returned %s, want %s (last error: %s)", line, call, mql_status_str(st),
                mql_status_str(want), st == MQL_OK ? "-" : mql_last_error());
    if (st != MQL_OK && mql_last_error_code() != want)
        FAIL_AT("line %d: %s: mql_last_error_code() is %s", line, call, mql_status_str(mql_last_error_code()));
    calls_checked++;
}

/* Fresh, open handles in place of the closed producer and consumer. */
static void reopen_handles(void) {
    mql_producer_free(prod);
    CHECK_OK(mql_producer_new(mq, NULL, &prod));
    mql_waker_free(wk);
    mql_consumer_free(cons);
    CHECK_OK(mql_consumer_new(mq, "g", NULL, &cons));
    CHECK_OK(mql_assign(cons, "t", 0));
    CHECK_OK(mql_consumer_waker(cons, &wk));
    mql_share_consumer_free(ssc);
    CHECK_OK(mql_share_consumer_new(mq, "g", sccfg_ok, &ssc));
    CHECK_OK(mql_share_subscribe(ssc, "t"));
}
"""

# What calls on closed handles return when it is not MQL_CLOSED, by
# (scenario, function): (status, why). The header documents each.
AFTER_CLOSE = {
    ("producer_closed", "mql_producer_flush"): ("MQL_OK", "nothing is pending after a close, so nothing to wait for"),
    ("producer_closed", "mql_producer_flush_timeout"): ("MQL_OK", "as mql_producer_flush"),
    ("producer_closed", "mql_producer_close"): ("MQL_OK", "closing twice is fine"),
    ("producer_closed", "mql_producer_last_sequence"): ("MQL_OK", "the handle stays valid: sequences still work"),
    ("producer_closed", "mql_producer_next_sequence"): ("MQL_OK", "the handle stays valid: sequences still work"),
    ("producer_closed", "mql_producer_get_stats"): ("MQL_OK", "stats still work"),
    ("producer_closed", "mql_producer_id"): ("MQL_OK", "ids still work"),
    ("producer_closed", "mql_producer_epoch"): ("MQL_OK", "ids still work"),
    ("producer_closed", "mql_producer_buffered_bytes"): ("MQL_OK", "as mql_producer_get_stats"),
    ("producer_closed", "mql_producer_queued"): ("MQL_OK", "the count still reads: 0, closing delivered everything"),
    ("consumer_closed", "mql_consumer_close"): ("MQL_OK", "closing again does nothing"),
    ("consumer_closed", "mql_consumer_waker"): ("MQL_OK", "a waker of a closed consumer wakes nothing, harmlessly"),
    ("consumer_closed", "mql_consumer_get_stats"): ("MQL_OK", "what the consumer did stays readable"),
    ("consumer_closed", "mql_consumer_set_rebalance_callback"): ("MQL_OK", "harmless: a closed consumer has no rebalances"),
    ("consumer_closed", "mql_consumer_member_id"): ("MQL_OK", "empty for a closed consumer"),
    ("broker_closed", "mql_producer_close"): ("MQL_OK", "closing is always allowed; nothing is pending"),
    ("broker_closed", "mql_producer_get_stats"): ("MQL_OK", "stats still work"),
    ("broker_closed", "mql_producer_id"): ("MQL_OK", "ids still work"),
    ("broker_closed", "mql_producer_epoch"): ("MQL_OK", "ids still work"),
    ("broker_closed", "mql_producer_buffered_bytes"): ("MQL_OK", "as mql_producer_get_stats"),
    ("broker_closed", "mql_producer_queued"): ("MQL_OK", "as for a closed producer"),
    ("broker_closed", "mql_consumer_close"): ("MQL_OK", "closing is always allowed"),
    ("broker_closed", "mql_consumer_waker"): ("MQL_OK", "as for a closed consumer"),
    ("broker_closed", "mql_consumer_get_stats"): ("MQL_OK", "as for a closed consumer"),
    ("broker_closed", "mql_consumer_set_rebalance_callback"): ("MQL_OK", "as for a closed consumer"),
    ("broker_closed", "mql_consumer_member_id"): ("MQL_OK", "as for a closed consumer (empty)"),
    ("broker_closed", "mql_processor_stopper"): ("MQL_OK", "a stopper may be made at any time"),
    ("share_consumer_closed", "mql_share_consumer_close"): ("MQL_OK", "closing again does nothing"),
    ("share_consumer_closed", "mql_share_consumer_stats_get"): ("MQL_OK", "what the consumer did stays readable"),
    ("broker_closed", "mql_share_consumer_close"): ("MQL_OK", "closing is always allowed"),
    ("broker_closed", "mql_share_consumer_stats_get"): ("MQL_OK", "as for a closed share consumer"),
}

# ---------------------------------------------------------------- parsing


def die(msg):
    sys.stderr.write(f"gen_contract_tests.py: {msg}\n")
    sys.exit(1)


def norm(t):
    """A C type spelled one way: 'const char *const *', 'struct mql_x **'."""
    out = ""
    for tok in t.replace("*", " * ").split():
        if tok == "*":
            out += "*" if out.endswith("*") else " *"
        elif out.endswith("*"):
            out += tok
        else:
            out += (" " if out else "") + tok
    return out


def split_param(p):
    """'const struct mql_x *name' -> ('const struct mql_x *', 'name')."""
    m = re.match(r"^(.*?)(\w+)$", p.strip())
    if not m:
        die(f"cannot parse parameter {p!r}")
    return norm(m.group(1)), m.group(2)


def parse(header):
    text = re.sub(r"/\*.*?\*/", "", header, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    callbacks = {}
    for m in re.finditer(r"typedef\s+([^;()]*?)\(\*(\w+)\)\((.*?)\);", text, flags=re.S):
        params = [split_param(p) for p in m.group(3).split(",")]
        callbacks[m.group(2)] = (norm(m.group(1)), params)
    structs = {}
    for m in re.finditer(r"typedef struct (\w+) \{(.*?)\} \w+;", text, flags=re.S):
        fields = [split_param(f) for f in m.group(2).split(";") if f.strip()]
        structs[m.group(1)] = fields
    handles = {
        m.group(1)
        for m in re.finditer(r"typedef struct (\w+) (\w+);", text)
        if m.group(1) == m.group(2) and m.group(1) not in structs
    }
    functions = []
    for m in re.finditer(r"^([A-Za-z_][\w \*]*?)\b(mql_\w+)\(([^;{]*?)\);", text, flags=re.M):
        ret, name, args = norm(m.group(1)), m.group(2), " ".join(m.group(3).split())
        params = [] if args in ("", "void") else [split_param(p) for p in args.split(",")]
        functions.append((ret, name, params))
    return callbacks, structs, handles, functions


# ---------------------------------------------------------------- classes


def struct_of(t, pattern):
    m = re.match(pattern, t)
    return m.group(1) if m else None


def classify(t, handles, structs, callbacks):
    """What kind of parameter a type is."""
    if t == "void *":
        return "user_data", None
    if t in callbacks:
        return "callback", t
    s = struct_of(t, r"^(?:const )?struct (mql_\w+) \*$")
    if s in handles:
        return "handle", s
    s = struct_of(t, r"^struct (mql_\w+) \*\*$")
    if s in handles:
        return "out", t[:-1].strip()
    if t == "const char *":
        return "string", None
    if t == "const char *const *":
        return "strings", None
    s = struct_of(t, r"^const struct (mql_\w+) \*const \*$")
    if s in handles:
        return "handles", s
    if t == "const void *":
        return "bytes", None
    if t == "char *":
        return "text_out", "char"
    s = struct_of(t, r"^const struct (mql_\w+) \*$")
    if s in structs:
        return "struct_in", s
    s = struct_of(t, r"^struct (mql_\w+) \*$")
    if s in structs:
        return "out", t[:-1].strip()
    if re.match(r"^(u?int\d+_t|size_t) \*$", t) or t in ("const char **", "const void **"):
        return "out", t[:-1].strip()
    if t in ("bool", "int", "size_t") or re.match(r"^u?int\d+_t$", t) or t.startswith("enum "):
        return "scalar", t
    die(f"unknown parameter type {t!r}: teach classify() about it")


# Kinds whose following size_t is their length or count.
SIZED = {"bytes", "text_out", "strings", "handles", "struct_in", "out"}


class Call:
    """Builds the argument list of one call of `fn`."""

    def __init__(self, gen, fn, params):
        self.gen, self.fn, self.params = gen, fn, params
        self.kinds = [classify(t, gen.handles, gen.structs, gen.callbacks) for t, _ in params]

    def value(self, i):
        (t, name), (kind, extra) = self.params[i], self.kinds[i]
        if kind == "user_data":
            return "NULL"
        if kind == "callback":
            return f"stub_{extra}"
        if kind == "handle":
            if extra not in HANDLES:
                die(f"{self.fn}: no live handle of type {extra}: add it to HANDLES and the prelude")
            return HANDLES[extra]
        if kind in ("out", "text_out"):
            return f"s_{name}"
        if kind == "string":
            v = STRINGS_BY_FUNCTION.get((self.fn, name), STRINGS.get(name))
            if v is None:
                die(f"{self.fn}: no valid string for parameter {name!r}: add it to STRINGS")
            return v
        if kind == "strings":
            return "topics_ok"
        if kind == "handles":
            if extra not in HANDLES:
                die(f"{self.fn}: no live handle of type {extra}: add it to HANDLES and the prelude")
            return f"(const {extra} *const[]){{{HANDLES[extra]}}}"
        if kind == "bytes":
            return '"v"'
        if kind == "struct_in":
            if extra not in STRUCTS:
                die(f"{self.fn}: no valid {extra}: add it to STRUCTS and the prelude")
            return STRUCTS[extra]
        # Scalars.
        if t == "size_t" and i > 0 and self.kinds[i - 1][0] in SIZED:
            return "1"
        if name in SCALARS:
            return SCALARS[name]
        if t == "bool":
            return "false"
        if t.startswith("enum "):
            die(f"{self.fn}: no valid value for enum parameter {name!r}")
        return "0"

    def out_decls(self):
        """Storage of every out-parameter, pre-filled with 0x5A."""
        lines = []
        for (t, name), (kind, extra) in zip(self.params, self.kinds):
            if kind in ("out", "text_out"):
                lines.append(f"{extra} s_{name}[4];")
                lines.append(f"memset(s_{name}, 0x5A, sizeof s_{name});")
        return lines

    def frees(self):
        """Releases the handles a successful call returned in its
        out-parameters."""
        lines = []
        for (t, name), (kind, extra) in zip(self.params, self.kinds):
            h = struct_of(t, r"^struct (mql_\w+) \*\*$") if kind == "out" else None
            if h:
                lines.append(f"{self.gen.free_function(h)}(s_{name}[0]);")
        return lines

    def out_checks(self, call):
        return [
            f'expect_untouched(s_{name}, sizeof s_{name}, "{call}", "{name}", __LINE__);'
            for (t, name), (kind, _) in zip(self.params, self.kinds)
            if kind in ("out", "text_out")
        ]


class Gen:
    """What both tests share: the parsed header, callback stubs, output."""

    def __init__(self, header, source_name):
        self.callbacks, self.structs, self.handles, self.functions = parse(header)
        if not self.functions:
            die("no functions found in the header")
        self.source_name = source_name
        self.out = []

    def emit(self, line=""):
        self.out.append(line)

    def free_function(self, handle):
        """The function that releases a handle: `void X_free(struct X *)`,
        or `mql_close` for a broker."""
        for ret, fn, params in self.functions:
            if len(params) != 1 or params[0][0] != f"struct {handle} *":
                continue
            if (ret == "void" and fn.endswith("_free")) or fn == "mql_close":
                return fn
        die(f"no function releases a {handle}")

    def stubs(self):
        for name, (ret, params) in sorted(self.callbacks.items()):
            args = ", ".join(f"{t} a{i}" if not t.endswith("*") else f"{t}a{i}" for i, (t, _) in enumerate(params))
            self.emit(f"static __attribute__((unused)) {ret} stub_{name}({args}) {{")
            for i in range(len(params)):
                self.emit(f"    (void)a{i};")
            if ret != "void":
                self.emit(f"    return ({ret})0;")
            self.emit("}")
        self.emit()

    def block(self, title, body):
        self.emit(f"    {{ /* {title} */")
        for line in body:
            self.emit(f"        {line}")
        self.emit("    }")

    def head(self, what, helpers):
        self.emit(f"/* GENERATED by tests/c/gen_contract_tests.py from {self.source_name}; do not edit.")
        for line in what:
            self.emit(f" * {line}" if line else " *")
        self.emit(" * See the generator's docstring for what is expected. */")
        self.emit('#include "check.h"')
        self.emit()
        self.stubs()
        self.emit(PRELUDE)
        self.emit(helpers)

    def text(self):
        return "\n".join(self.out) + "\n"


class NullGen(Gen):
    """null_every_arg.c."""

    def __init__(self, header, source_name):
        super().__init__(header, source_name)
        self.used_allowed = set()
        self.counts = {"null": 0, "call": 0, "skip": 0}

    def allowed(self, owner, name):
        a = ALLOWED.get((owner, name))
        if a:
            self.used_allowed.add((owner, name))
        return a

    def function(self, ret, fn, params):
        c = Call(self, fn, params)
        pointer_params = [
            i for i, (k, _) in enumerate(c.kinds) if k not in ("scalar", "user_data")
        ]
        if not pointer_params:
            return
        self.emit(f"    /* ---- {fn} ---- */")
        for i in pointer_params:
            name = params[i][1]
            args = [c.value(j) for j in range(len(params))]
            args[i] = "NULL"
            call = f"{fn}({', '.join(args)})"
            label = f"{fn}: {name} = NULL"
            allowed = self.allowed(fn, name)
            if allowed and allowed[0] == "skip":
                self.emit(f"    /* {label}: allowed, not called here: {allowed[1]} */")
                self.emit("    skipped++;")
                self.counts["skip"] += 1
                continue
            body = c.out_decls()
            if allowed:
                self.counts["call"] += 1
                if ret == "enum mql_status":
                    body.append(f'expect_ok({call}, "{label}", __LINE__);')
                    body += c.frees()
                else:
                    body.append(f"(void){call};" if ret != "void" else f"{call};")
                    body.append("allowed_called++;")
                self.block(f"{label}: allowed: {allowed[1]}", body)
                continue
            self.counts["null"] += 1
            body += self.null_expectation(ret, fn, call, label, f"`{name}` is NULL")
            body += c.out_checks(label)
            self.block(label, body)
            # The fields of a struct argument, one at a time.
            if c.kinds[i][0] == "struct_in":
                self.struct_fields(c, i, ret)
            if c.kinds[i][0] in ("strings", "handles"):
                body = c.out_decls()
                elem = "const char" if c.kinds[i][0] == "strings" else f"const {c.kinds[i][1]}"
                body.append(f"{elem} *one_null[1] = {{NULL}};")
                args = [c.value(j) for j in range(len(params))]
                args[i] = "one_null"
                call = f"{fn}({', '.join(args)})"
                body += self.null_expectation(ret, fn, call, f"{fn}: {name}[0] = NULL", f"{name}[0]` is NULL")
                self.counts["null"] += 1
                self.block(f"{fn}: {name}[0] = NULL", body)

    def null_expectation(self, ret, fn, call, label, want):
        if ret == "enum mql_status":
            return [f'expect_null({call}, "{label}", "{want}", __LINE__);']
        if ret == "void":
            return [f"{call};", "null_checked++;"]
        neutral = NEUTRAL.get(fn, "NULL" if ret.endswith("*") else "0")
        return [
            f"if ({call} != {neutral}) FAIL_AT(\"{label}: want {neutral}\");",
            "null_checked++;",
        ]

    def struct_fields(self, c, i, ret):
        fn = c.fn
        struct = c.kinds[i][1]
        arg_name = c.params[i][1]
        for path, sname, fname, setup in self.field_cases(struct, "v", STRUCTS[struct]):
            label = f"{fn}: {arg_name}{path} = NULL"
            args = [c.value(j) for j in range(len(c.params))]
            args[i] = "v"
            call = f"{fn}({', '.join(args)})"
            body = c.out_decls() + setup
            allowed = self.allowed(sname, fname)
            if allowed and allowed[0] == "call":
                self.counts["call"] += 1
                body.append(f'expect_ok({call}, "{label}", __LINE__);')
                self.block(f"{label}: allowed: {allowed[1]}", body)
                continue
            if allowed:
                die(f"{sname}.{fname}: struct fields can only be allowed with 'call'")
            self.counts["null"] += 1
            # The field's path inside the argument ("topic",
            # "headers[0].name"): the library prefixes it with where the
            # struct is ("record->", "records[0].").
            want = path[len("[0].") :]
            body += self.null_expectation(ret, fn, call, label, f"{want}` is NULL")
            body += c.out_checks(label)
            self.block(label, body)

    def field_cases(self, struct, var, valid):
        """(path, struct, field, C setup lines) for each pointer field of
        `struct`, with one level of nested struct arrays."""
        fields = self.structs[struct]
        for k, (t, fname) in enumerate(fields):
            kind, extra = classify(t, self.handles, self.structs, self.callbacks)
            if kind in ("scalar", "user_data"):
                continue
            if kind not in ("string", "bytes", "struct_in", "callback"):
                die(f"{struct}.{fname}: unsupported field type {t!r}")
            setup = [f"{struct} {var}[1];", f"memcpy({var}, {valid}, sizeof {var});", f"{var}[0].{fname} = NULL;"]
            yield f"[0].{fname}", struct, fname, setup
            if kind == "struct_in":
                if extra not in STRUCTS:
                    die(f"{struct}.{fname}: no valid {extra}: add it to STRUCTS")
                for path, sname, f2, inner in self.field_cases(extra, f"{var}_{fname}", STRUCTS[extra]):
                    setup = (
                        [f"{struct} {var}[1];", f"memcpy({var}, {valid}, sizeof {var});"]
                        + inner
                        + [f"{var}[0].{fname} = {var}_{fname};"]
                    )
                    yield f"[0].{fname}{path}", sname, f2, setup

    def generate(self):
        self.head(
            [
                "NULL for every pointer argument of every function (and every pointer",
                "field of every struct argument), one at a time, all other arguments",
                "valid.",
            ],
            NULL_HELPERS,
        )
        self.emit("int main(int argc, char **argv) {")
        self.emit("    setup(scratch_dir(argc, argv));")
        for ret, fn, params in self.functions:
            self.function(ret, fn, params)
        self.emit("    teardown();")
        self.emit(
            '    printf("null_every_arg: %d NULL arguments refused, %d allowed NULLs called, '
            '%d allowed NULLs covered elsewhere\\n", null_checked, allowed_called, skipped);'
        )
        want = (self.counts["null"], self.counts["call"], self.counts["skip"])
        self.emit(f"    CHECK(null_checked == {want[0]} && allowed_called == {want[1]} && skipped == {want[2]});")
        self.emit("    return 0;")
        self.emit("}")
        stale = set(ALLOWED) - self.used_allowed
        if stale:
            die(f"ALLOWED entries that match no parameter (stale?): {sorted(stale)}")
        return self.text()

    def summary(self):
        return "null_every_arg.c: {} functions, {} NULL checks, {} allowed NULLs called, {} covered elsewhere".format(
            len(self.functions), self.counts["null"], self.counts["call"], self.counts["skip"]
        )


class ClosedGen(Gen):
    """closed_every_call.c."""

    def __init__(self, header, source_name):
        super().__init__(header, source_name)
        self.used = set()
        self.calls = 0

    def on_handles(self, types):
        """The status-returning functions whose first argument is one of
        `types`."""
        for ret, fn, params in self.functions:
            if not params or ret != "enum mql_status":
                continue
            kind, extra = classify(params[0][0], self.handles, self.structs, self.callbacks)
            if kind == "handle" and extra in types:
                yield fn, params

    def scenario(self, name, types):
        for fn, params in self.on_handles(types):
            c = Call(self, fn, params)
            args = ", ".join(c.value(j) for j in range(len(params)))
            call = f"{fn}({args})"
            label = f"{name}: {fn}"
            body = c.out_decls()
            expect = AFTER_CLOSE.get((name, fn))
            self.calls += 1
            if expect:
                self.used.add((name, fn))
                body.append(f'expect_status({call}, {expect[0]}, "{label}", __LINE__);')
                if expect[0] == "MQL_OK":
                    body += c.frees()
                self.block(f"{label}: {expect[0]}: {expect[1]}", body)
            else:
                body.append(f'expect_closed({call}, "{label}", __LINE__);')
                body += c.out_checks(label)
                self.block(f"{label}: MQL_CLOSED", body)

    def generate(self):
        self.head(
            [
                "Every call on a producer, consumer, share consumer or processor after",
                "it (or its broker) was closed: MQL_CLOSED, or what the header",
                "documents.",
            ],
            CLOSED_HELPERS,
        )
        self.emit("int main(int argc, char **argv) {")
        self.emit("    const char *dir = scratch_dir(argc, argv);")
        self.emit("    setup(dir);")
        self.emit()
        self.emit("    /* A producer closed by mql_producer_close. */")
        self.emit("    CHECK_OK(mql_producer_close(prod));")
        self.scenario("producer_closed", {"mql_producer"})
        self.emit()
        self.emit("    /* A consumer closed by mql_consumer_close. */")
        self.emit("    CHECK_OK(mql_consumer_close(cons));")
        self.scenario("consumer_closed", {"mql_consumer"})
        self.emit()
        self.emit("    /* A share consumer closed by mql_share_consumer_close. */")
        self.emit("    CHECK_OK(mql_share_consumer_close(ssc));")
        self.scenario("share_consumer_closed", {"mql_share_consumer"})
        self.emit()
        self.emit("    /* Handles whose broker was closed (mql_close), themselves open. */")
        self.emit("    reopen_handles();")
        self.emit("    CHECK_OK(mql_close(mq));")
        self.emit("    mq = NULL;")
        self.scenario("broker_closed", {"mql_producer", "mql_consumer", "mql_share_consumer", "mql_processor"})
        self.emit()
        self.emit("    teardown();")
        self.emit(f'    printf("closed_every_call: %d calls on closed handles checked\\n", calls_checked);')
        self.emit(f"    CHECK(calls_checked == {self.calls});")
        self.emit("    return 0;")
        self.emit("}")
        stale = set(AFTER_CLOSE) - self.used
        if stale:
            die(f"AFTER_CLOSE entries that match no call (stale?): {sorted(stale)}")
        return self.text()

    def summary(self):
        return f"closed_every_call.c: {self.calls} calls on closed handles"


def main():
    if len(sys.argv) != 3:
        die("usage: gen_contract_tests.py include/mqlite.h OUTDIR")
    header_path, outdir = sys.argv[1], sys.argv[2]
    with open(header_path, encoding="utf-8") as f:
        header = f.read()
    for gen, name in ((NullGen, "null_every_arg.c"), (ClosedGen, "closed_every_call.c")):
        g = gen(header, header_path)
        text = g.generate()
        with open(os.path.join(outdir, name), "w", encoding="utf-8") as f:
            f.write(text)
        sys.stderr.write(f"gen_contract_tests.py: {g.summary()}\n")


if __name__ == "__main__":
    main()
