#!/usr/bin/python3
"""tests/fuzz/make_seeds.py: write the seed corpora of the fuzz targets.

Each seed is a short program in the byte language the target decodes
(tests/fuzz/fuzz_core.c, tests/fuzz/fuzz_sqlite.c); this script spells them
out by name, so that a reader can see which scenario each seed starts the
fuzzer from, and the encoder below must follow the decoders if they change.
Run it from anywhere; it rewrites tests/fuzz/seeds/core/ and seeds/sqlite/.
"""
import os
import shutil
import struct

HERE = os.path.dirname(os.path.abspath(__file__))

# ---------------------------------------------------------------------------
# fuzz_input.h


def u16(n):
    return struct.pack("<H", n)


def u64(n):
    return struct.pack("<Q", n & (2**64 - 1))


def fill(data):
    """in_fill: up to 64 bytes repeated to the asked length."""
    assert 1 <= len(data) <= 64
    return bytes([len(data)]) + data


def fill_byte(b):
    return bytes([0, b])


INTERESTING = [0, 1, 2, 3, 5, 7, 31, -1, -2, 255, 256, 1024, 1025, 65535,
               2**31 - 1, 2**31, -2**31, 2**32 - 1, 2**32,
               2**63 - 1, 2**63 - 2, -2**63, -2**63 + 1, 2**53, 2**53 + 1]

# ---------------------------------------------------------------------------
# fuzz_sqlite.c

WORDS = [b"r", b"p:", b"p:1", b"p:2", b"u:1", b"u:2", b"1", b"2", b"31", b"",
         b"x", b"R", b"tok", b"id", b"v", b"TOK", b"rowid", b"nosuch",
         b"r\0x", b"p:1\0", b"u:", b"\xff\xfe", b"widget-42"]
DOUBLES = ["0.0", "-0.0", "1.0", "5.0", "31.0", "1.5", "-1.0", "2^63-1",
           "2^63", "-2^63", "1e308", "-1e308", "5e-324", "inf", "-inf", "nan",
           "2^52+0.5", "1e19"]


def null():
    return bytes([0])


def int_(n):
    """An integer: the small ones, the table of extremes, or raw."""
    if 0 <= n < 10:
        return bytes([3, n])
    if n in INTERESTING:
        return bytes([1, INTERESTING.index(n)])
    return bytes([2]) + u64(n)


def real(name):
    return bytes([5, DOUBLES.index(name)])


def word(w):
    return bytes([7, WORDS.index(w)])


def length(n):
    """takeLength, choosing the branch that gives exactly n."""
    if n < 9:
        return bytes([3, n])
    if 1021 <= n <= 1025:
        return bytes([0, n - 1021])
    if 198 <= n <= 202:
        return bytes([1, n - 198])
    return bytes([2]) + u16(n)


def text(n, pattern=b"a"):
    return bytes([11]) + length(n) + fill(pattern)


def blob(n, pattern=b"\x00\x01"):
    return bytes([13]) + length(n) + fill(pattern)


def zeroblob(n):
    return bytes([14]) + length(n)


def text16(n, pattern=b"r\x00"):
    return bytes([15]) + length(n) + fill(pattern)


OP_CHECK, OP_TRY, OP_GUARD_WRITE, OP_GUARD_WRITE_KEY = 0, 1, 2, 3
OP_CURRENT, OP_RESET, OP_GUARD_FENCED, OP_GUARD_FENCED_KEY = 4, 5, 6, 7
OP_WRITE, OP_PROTECT, OP_TXN, OP_OTHER, OP_SHADOW, OP_OOM = 8, 17, 18, 26, 30, 31

WRITES = ["insert", "insert_noid", "insert_or_replace", "insert_or_ignore",
          "upsert_tok", "upsert_v", "upsert_nothing", "update_tok",
          "update_tok_id", "update_tok_tok", "update_v", "update_id", "delete",
          "insert_two", "update_all_tok", "update_all_id", "delete_all",
          "replace_all", "replace", "update_or_replace_id", "update_or_replace_tok_id",
          "upsert_id"]
TABLES = "tkux"
TXN = ["BEGIN", "BEGIN IMMEDIATE", "COMMIT", "ROLLBACK",
       "SAVEPOINT s0", "SAVEPOINT s1", "SAVEPOINT s2", "SAVEPOINT fence_protect",
       "RELEASE s0", "RELEASE s1", "RELEASE s2", "RELEASE fence_protect",
       "ROLLBACK TO s0", "ROLLBACK TO s1", "ROLLBACK TO s2",
       "ROLLBACK TO fence_protect"]
OTHER = ["check/1", "check/3", "current/0", "reset/2", "check+check",
         "try+reset+try", "held+current", "held:check+", "held:reset",
         "held:try||", "held:fenced"]
SHADOW = ["attach", "detach", "aux.fence_tokens", "aux.fence_tokens+", "temp.fence_tokens",
          "temp.fence_tokens+", "temp.fence_txn", "temp.fence_held", "temp.fence_held+",
          "aux.fence_txn", "aux.t", "aux.t+"]
PROTECT_TABLES = ["x", "X", "w", "fence_tokens", "sqlite_schema",
                  "sqlite_master", "nosuch", "", "x\\0t", None]


def bare(*ops):
    return bytes([0]) + b"".join(ops)


def shared(*ops):
    return bytes([1]) + b"".join(ops)


def check(res, tok):
    return bytes([OP_CHECK]) + res + tok


def try_(res, tok):
    return bytes([OP_TRY]) + res + tok


def guard_write(res, tok):
    return bytes([OP_GUARD_WRITE]) + res + tok


def guard_write_key(prefix, key, tok):
    return bytes([OP_GUARD_WRITE_KEY]) + prefix + key + tok


def current(res):
    return bytes([OP_CURRENT]) + res


def reset(res):
    return bytes([OP_RESET]) + res


def guard_fenced(res):
    return bytes([OP_GUARD_FENCED]) + res


def guard_fenced_key(prefix, key):
    return bytes([OP_GUARD_FENCED_KEY]) + prefix + key


def write(kind, table, *vals):
    return bytes([OP_WRITE, WRITES.index(kind), TABLES.index(table)]) + b"".join(vals)


def txn(sql):
    return bytes([OP_TXN, TXN.index(sql)])


def protect(kind, table, *vals):
    """kind: 3 (table, token column, resource), 4 (+ key column), or 'un'."""
    which = {3: 0, 4: 1, "un": 2}[kind]
    vals = list(vals) + [null()] * (3 - len(vals))
    return bytes([OP_PROTECT, which, PROTECT_TABLES.index(table)]) + b"".join(vals)


def other(which, *vals):
    vals = list(vals) + [null()] * (4 - len(vals))
    return bytes([OP_OTHER, OTHER.index(which)]) + b"".join(vals)


def shadow(which, *vals):
    vals = list(vals) + [null()] * (2 - len(vals))
    return bytes([OP_SHADOW, SHADOW.index(which)]) + b"".join(vals)


def oom(at, t1, t2):
    """savepoints under allocation failure: allocation number at (1 + 4a + b)."""
    a, b = divmod(at - 1, 4)
    return bytes([OP_OOM, a, b, t1, t2])


R, P, P1, P2, U1 = word(b"r"), word(b"p:"), word(b"p:1"), word(b"p:2"), word(b"u:1")

SQLITE_SEEDS = {
    "accept_rule": bare(
        check(R, int_(5)), current(R), check(R, int_(5)), check(R, int_(3)),
        try_(R, int_(3)), try_(R, int_(7)), current(R), reset(R), current(R),
        check(R, int_(1))),
    "first_use_rolled_back": bare(
        txn("BEGIN"), check(word(b"x"), int_(1)), txn("ROLLBACK"),
        current(word(b"x")), check(word(b"x"), int_(1))),
    "invalid_values": bare(
        check(null(), int_(1)), check(word(b""), int_(1)), check(text(1025), int_(1)),
        check(text(1024), int_(1)), check(blob(3), int_(1)), check(int_(7), int_(1)),
        check(R, null()), check(R, int_(-1)), check(R, int_(-2**63)),
        check(R, real("31.0")), check(R, real("nan")), check(R, real("2^63")),
        check(R, word(b"31")), check(R, zeroblob(8)), current(int_(1)),
        reset(real("1.5")), check(text16(6), int_(2**63 - 1))),
    "extreme_tokens": bare(
        check(R, int_(2**63 - 2)), check(R, int_(2**63 - 1)), try_(R, int_(0)),
        check(word(b"r\0x"), int_(2**63 - 1)), check(text(1024, b"\x00\xff"), int_(0)),
        check(text(201, b"\x01\x7f"), int_(2**53 + 1)), try_(text(201, b"\x01\x7f"), int_(2**53))),
    "table_writes": shared(
        write("insert", "t", int_(1), int_(5), word(b"v")),
        write("update_v", "t", int_(1), word(b"x")),
        txn("BEGIN"), check(R, int_(5)), write("update_v", "t", int_(1), word(b"x")),
        write("delete", "t", int_(1)), txn("COMMIT"),
        write("insert", "t", int_(2), int_(4), null()),
        write("insert", "t", int_(2), null(), null())),
    "per_row_keys": shared(
        write("insert", "k", int_(1), int_(5), null()),
        write("update_id", "k", int_(1), int_(2)),
        txn("BEGIN"), check(P1, int_(5)), check(P2, int_(5)),
        write("update_id", "k", int_(1), int_(2)), txn("COMMIT"),
        write("insert", "k", blob(3), int_(1), null()),
        write("insert", "k", real("1.5"), int_(1), null()),
        write("insert", "k", text(1022, b"k"), int_(1), null()),
        write("insert", "k", text(1023, b"k"), int_(1), null()),
        write("insert", "k", null(), int_(1), null())),
    "savepoints": shared(
        txn("BEGIN"), txn("SAVEPOINT s0"), check(R, int_(7)), txn("SAVEPOINT s1"),
        reset(R), check(R, int_(2)), txn("ROLLBACK TO s1"), guard_fenced(R),
        txn("RELEASE s0"), txn("ROLLBACK TO s0"), txn("SAVEPOINT s2"),
        write("insert", "t", int_(1), int_(7), null()), txn("ROLLBACK TO s2"),
        txn("COMMIT")),
    "failed_statement": shared(
        txn("BEGIN"), write("insert_two", "k", int_(1), int_(5), int_(2), null()),
        write("insert_two", "k", int_(1), int_(5), int_(2), int_(6)),
        write("update_all_tok", "k", int_(4)), write("update_all_id", "k", int_(1)),
        txn("ROLLBACK")),
    "rowid_keys": shared(
        write("insert_noid", "u", null(), int_(3), null()),
        write("insert", "u", word(b"1"), int_(3), null()),
        txn("BEGIN"), check(U1, int_(3)), write("update_tok_id", "u", int_(1), int_(4), int_(9)),
        write("upsert_tok", "u", int_(9), int_(6), null()),
        write("insert_or_replace", "u", int_(9), int_(6), null()), txn("COMMIT")),
    "guards_called_directly": bare(
        guard_write(R, null()), guard_write(R, int_(3)),
        guard_write_key(P, blob(4), int_(3)), guard_write_key(int_(1), int_(1), int_(3)),
        guard_write_key(P, null(), int_(3)), guard_write_key(word(b""), word(b""), int_(3)),
        guard_fenced(R), txn("BEGIN"), guard_write_key(P, real("1.5"), int_(2)),
        guard_fenced_key(P, real("1.5")), guard_fenced_key(P, text(1023, b"z")),
        txn("COMMIT")),
    "protect_calls": shared(
        protect(3, "x", word(b"tok"), R),
        write("insert", "x", int_(1), int_(4), null()),
        protect(4, "X", null(), word(b"p:"), word(b"id")),
        write("insert", "x", int_(2), int_(4), null()),
        protect(3, "w", word(b"tok"), R), protect(3, "fence_tokens", word(b"tok"), R),
        protect(3, "x", word(b"nosuch"), R), protect(4, "x", word(b"tok"), R, word(b"rowid")),
        protect(3, "x", word(b"tok"), word(b"")), protect("un", "x")),
    "held_scans": shared(
        txn("BEGIN"), check(R, int_(1)), check(word(b"widget-42"), int_(2)),
        other("held+current"), other("held:check+", int_(1)), other("held:try||", word(b"x"), int_(3)),
        other("held:fenced"), other("held:reset"), other("check+check", R, int_(1), R, int_(0)),
        other("try+reset+try", R, int_(1), R, int_(0)), txn("COMMIT"),
        other("check/1", R), other("check/3", R), other("current/0"), other("reset/2", R)),
    "replace_forms": shared(
        write("insert", "k", int_(1), int_(5), null()), write("insert", "k", int_(2), int_(6), null()),
        write("replace", "k", int_(1), int_(4), null()), write("replace", "k", int_(1), int_(5), null()),
        write("update_or_replace_id", "k", int_(1), int_(2)),
        txn("BEGIN"), check(P1, int_(5)), check(P2, int_(6)),
        write("update_or_replace_id", "k", int_(1), int_(2)),
        write("update_or_replace_tok_id", "k", int_(2), int_(7), int_(3)),
        write("upsert_id", "u", int_(1), int_(3), null()), txn("COMMIT")),
    "shadowed_names": shared(
        shadow("attach"), shadow("aux.fence_tokens"), shadow("aux.fence_tokens+", R, int_(1000)),
        shadow("temp.fence_tokens"), shadow("temp.fence_tokens+", R, int_(1000)),
        shadow("temp.fence_txn"), shadow("temp.fence_held"), shadow("aux.fence_txn"),
        shadow("aux.t"), check(R, int_(5)), txn("BEGIN"), check(R, int_(6)),
        write("update_v", "t", int_(1), word(b"x")), shadow("aux.t+", R, int_(1)),
        other("held+current"), txn("COMMIT"), check(R, int_(5)), shadow("detach")),
    "savepoints_out_of_memory": shared(
        oom(1, 3, 4), oom(40, 3, 4), txn("BEGIN"), check(R, int_(2)), oom(80, 5, 6),
        check(R, int_(2)), oom(120, 7, 1), txn("COMMIT"), oom(200, 5, 5), oom(400, 6, 2)),
}

# ---------------------------------------------------------------------------
# fuzz_core.c


def resource(n, pattern=b"a"):
    """takeResource, choosing the branch that gives exactly n bytes."""
    if 1023 <= n <= 1025:
        head = bytes([0, n - 1023])
    elif 199 <= n <= 201:
        head = bytes([1, n - 199])
    elif n < 5:
        head = bytes([3, n])
    else:
        head = bytes([2]) + u16(n)
    return head + fill(pattern)


def token(n):
    if n in INTERESTING:
        return bytes([0, INTERESTING.index(n)])
    return bytes([1]) + u64(n)


MSG = ["stale", "detail_stale", "line_stale", "missing", "detail_missing",
       "line_missing", "invalid"]
WHATS = ["resource", "token", "key", "resource prefix"]
PROBLEMS = ["valid", "null", "empty", "too_long", "not_text", "negative", "not_integer"]


def message(kind, res, tok=5, highest=7, negative=-1, why=0, column=None,
            what="resource", problem="valid", length=None):
    out = bytes([1]) + res + token(tok) + token(highest) + token(negative) + bytes([why])
    if column is None:
        out += bytes([0])
    else:
        out += bytes([1, len(column)]) + fill(column)
    out += bytes([MSG.index(kind)])
    if kind == "invalid":
        out += bytes([WHATS.index(what), PROBLEMS.index(problem)])
        out += bytes([0]) if length is None else bytes([1]) + u64(length)
    return out


def validate_resource(res):
    return bytes([0, 0]) + res


def validate_token(tok):
    return bytes([0, 1]) + token(tok)


def decide(has, highest, tok):
    return bytes([0, 2, has]) + token(highest) + token(tok)


def stateless(*ops):
    return bytes([1]) + b"".join(ops)


def held(*ops):
    return bytes([0]) + b"".join(ops)


def h_set(res, tok):
    return bytes([0]) + res + (bytes([1, tok]) if 0 <= tok < 8 else bytes([0]) + token(tok))


def h_get(res):
    return bytes([3]) + res


def h_truncate(n):
    return bytes([4]) + u16(n)


def h_first_tagged(back, bump=None):
    return bytes([5, back]) + (bytes([0]) if bump is None else bytes([1, bump]))


def h_clear():
    return bytes([6])


def h_bulk(n):
    assert n < 64 or 1025 <= n < 1025 + 64
    return bytes([7]) + (bytes([7, n - 1025]) if n > 64 else bytes([0, n]))


def h_fail(after):
    return bytes([8, after])


def h_check():
    return bytes([9])


CORE_SEEDS = {
    "resource_bounds": stateless(
        validate_resource(resource(0)), validate_resource(resource(1)),
        validate_resource(resource(1024)), validate_resource(resource(1025)),
        validate_resource(resource(3000)), validate_token(0), validate_token(-1),
        validate_token(-2**63), validate_token(2**63 - 1)),
    "accept_rule": stateless(
        decide(0, 0, 0), decide(1, 5, 5), decide(1, 5, 4), decide(1, 5, 6),
        decide(1, 2**63 - 1, -2**63), decide(1, -2**63, 2**63 - 1)),
    "stale_messages": stateless(
        message("stale", resource(3, b"r"), 3, 5), message("detail_stale", resource(200), 3, 5),
        message("line_stale", resource(4, b"w-42"), 3, 2**63 - 1),
        message("stale", resource(201, b"\x00\x1f\x7f\xff"), 2**63 - 1)),
    "long_stale_line": stateless(
        message("line_stale", resource(250, b"resource-"), 2**63 - 2, 2**63 - 1)),
    "missing_messages": stateless(
        message("missing", resource(1025)), message("detail_missing", resource(2), why=1),
        message("detail_missing", resource(2), why=0, column=b"tok"),
        message("detail_missing", resource(2), why=0, column=b"\"\x01" * 30),
        message("line_missing", resource(1024, b"\n"), why=1, column=b"tok")),
    "invalid_messages": stateless(*[
        message("invalid", resource(1), what=w, problem=p, length=l, negative=-2**63)
        for w, p, l in [("resource", "null", None), ("resource", "empty", None),
                        ("resource", "too_long", 2**64 - 1), ("token", "negative", None),
                        ("key", "not_text", None), ("resource prefix", "not_integer", None),
                        ("token", "valid", None)]]),
    "held_basics": held(
        h_set(resource(1, b"r"), 5), h_set(resource(1, b"q"), 1), h_set(resource(1, b"r"), 7),
        h_get(resource(1, b"r")), h_first_tagged(1, 1), h_set(resource(1, b"r"), -1),
        h_truncate(1), h_get(resource(1, b"r")), h_check()),
    "held_reset_entries": held(
        h_set(resource(2, b"ab"), 3), h_set(resource(2, b"ab"), -1), h_set(resource(0), 0),
        h_set(resource(1025, b"\x00"), 2**63 - 1), h_check(), h_truncate(2), h_check()),
    "held_rehash": held(
        h_bulk(1030), h_get(resource(4, b"b100")), h_truncate(17), h_check(), h_clear(),
        h_bulk(20), h_check()),
    "held_out_of_memory": held(
        h_fail(1), h_set(resource(1, b"r"), 1), h_fail(2), h_set(resource(1, b"s"), 2),
        h_fail(3), h_bulk(40), h_check(), h_clear(), h_fail(1), h_set(resource(1, b"t"), 3)),
    "held_tags": held(
        h_set(resource(1, b"a"), 1), h_first_tagged(0, 1), h_set(resource(1, b"b"), 2),
        h_first_tagged(0, 2), h_set(resource(1, b"c"), 3), h_first_tagged(1),
        h_first_tagged(3), h_truncate(1), h_first_tagged(0)),
    "held_long_resources": held(
        h_set(resource(1024, b"x"), 1), h_set(resource(1025, b"x"), 2),
        h_set(resource(3000, b"xy"), 3), h_get(resource(1024, b"x")), h_check(), h_clear()),
}


def write_all(name, seeds):
    d = os.path.join(HERE, "seeds", name)
    shutil.rmtree(d, ignore_errors=True)
    os.makedirs(d)
    for seed, data in sorted(seeds.items()):
        with open(os.path.join(d, seed), "wb") as f:
            f.write(data)


if __name__ == "__main__":
    write_all("core", CORE_SEEDS)
    write_all("sqlite", SQLITE_SEEDS)
    print("wrote %d core and %d sqlite seeds" % (len(CORE_SEEDS), len(SQLITE_SEEDS)))
