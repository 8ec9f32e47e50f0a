#!/usr/bin/env python3
"""List every error message fence's SQLite extension can produce, with an
estimate of its length.

Messages are found in the C sources (sqlite_ext/*.c, sqlite_ext/*.h,
core/fence_core.c): the format string of every call that builds an error
(sqlite3_mprintf, snprintf, sqlite3_snprintf, sqlite3_result_error,
fenceResultError and the extension's own refuse helpers), every
FENCE_*_MSG macro, and the text of every RAISE(ABORT, '...'). A format's
length is estimated with each conversion expanded to a realistic value: a
string (%s, %w, %Q, %.*s: a name, a resource, SQLite's own message) 40
bytes, a 64-bit integer 19 digits, any other integer 10. Strings that are
SQL or names rather than messages are left out by is_message().

Fragments: a literal passed to a helper that pastes it into a message
through %s (refuseSchemaRead's zCheck, resultInvalid's what...) is listed
with kind "fragment" and must fit the 40 bytes its %s is counted as.

Usage: sqlite_messages.py [--root DIR] [--json]
Prints one line per message: estimated bytes, file:line, the format.
"""
import argparse
import json
import os
import re
import statistics
import sys

STRING_BYTES = 40
# arguments whose value is known to be short: what they can be
KNOWN_SHORT = {
    "declaredAffinity": 7,   # INTEGER, NUMERIC, TEXT, REAL, BLOB
    "zFunc": 15,             # fence_protect, fence_unprotect
    "azSchema[s]": 4,        # main, temp
    "kLeaseOpName[op]": 13,  # fence_acquire, fence_renew, fence_release
}
INT64_BYTES = 19
INT_BYTES = 10

# calls whose string-literal arguments are error messages (or SQL, which
# is_message() drops)
MESSAGE_CALLS = {
    "sqlite3_mprintf", "snprintf", "sqlite3_snprintf", "sqlite3_result_error",
    "fenceResultError", "refuse", "resultError",
}
# helpers that paste a literal argument into a message through %s
FRAGMENT_CALLS = {
    "refuseSchemaRead", "resultInvalid", "fence_msg_invalid",
}

SOURCES = ["sqlite_ext", "core/fence_core.c"]

SQL_START = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|CREATE|DROP|PRAGMA|SAVEPOINT|RELEASE|"
    r"ROLLBACK|BEGIN|COMMIT|WITH|VALUES|REPLACE|ALTER|ATTACH|DETACH|"
    r"[\"(,)]|%s\s*(AND|%s|\)|,|;)|%s%s|%s;|%s\)|fence:|<expr>|c\.|NEW\.|NOT \(|"
    r"\) AND|\) IS| AND |, NEW)", re.I)


def strip_comments(src):
    """C source with comments blanked (newlines kept), strings intact."""
    out = []
    i, n = 0, len(src)
    while i < n:
        c = src[i]
        if src.startswith("/*", i):
            j = src.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", src[i:j]))
            i = j
        elif src.startswith("//", i):
            j = src.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and src[j] != c:
                j += 2 if src[j] == "\\" else 1
            out.append(src[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def unescape(body):
    return re.sub(r"\\(x[0-9a-fA-F]+|[0-7]{1,3}|.)",
                  lambda m: {"n": "\n", "t": "\t", "\\": "\\", "\"": "\"", "'": "'"}.get(
                      m.group(1), "?"), body)


TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*|\\\n|\S')


def literal_runs(text, macros):
    """Each run of adjacent string literals (and string macros) in text,
    as (offset, joined string)."""
    runs = []
    cur, start = None, 0
    for m in TOKEN.finditer(text):
        t = m.group(0)
        if t == "\\\n":
            continue  # a macro's line continuation
        piece = None
        if t.startswith('"'):
            piece = unescape(t[1:-1])
        elif t in macros:
            piece = macros[t]
        elif t in ("PRId64", "PRIu64"):
            piece = "lld"
        if piece is not None:
            if cur is None:
                cur, start = "", m.start()
            cur += piece
        else:
            if cur is not None:
                runs.append((start, cur))
            cur = None
    if cur is not None:
        runs.append((start, cur))
    return runs


def string_macros(sources):
    macros = {}
    define = re.compile(r"^[ \t]*#[ \t]*define[ \t]+([A-Za-z_]\w*)[ \t]+((?:.*\\\n)*.*)$", re.M)
    for _ in range(3):  # macros made of macros
        for path, src in sources:
            for m in define.finditer(src):
                body = m.group(2).replace("\\\n", " ")
                runs = literal_runs(body, macros)
                rest = TOKEN.sub(lambda t: "" if (t.group(0).startswith('"') or
                                                  t.group(0) in macros) else t.group(0), body)
                if runs and not rest.strip():
                    macros[m.group(1)] = "".join(r[1] for r in runs)
    return macros


def string_end(text, i):
    """The index just past the C string or character literal opening at i."""
    j = i + 1
    while j < len(text) and text[j] != text[i]:
        j += 2 if text[j] == "\\" else 1
    return j + 1


def call_args(src, open_paren):
    """The text between the parenthesis at open_paren and its match."""
    depth, i = 0, open_paren
    while i < len(src):
        c = src[i]
        if c in "\"'":
            i = string_end(src, i)
            continue
        if c == "(":
            depth += 1
        elif c == ")":
            depth -= 1
            if depth == 0:
                return src[open_paren + 1:i]
        i += 1
    return src[open_paren + 1:]


CONVERSION = re.compile(r"%%|%[-+ #0]*(\d+|\*)?(\.(\d+|\*))?(ll|l|z|h|hh)?([a-zA-Z])|[^%]+|%")


def estimate(fmt, known=None):
    """Bytes of fmt with every conversion expanded to a realistic value;
    known[i], when given, is the length of the i-th string conversion's
    value (an argument that can only be one of a few literals)."""
    total = 0
    nstr = 0
    for m in CONVERSION.finditer(fmt):
        t = m.group(0)
        if t == "%%":
            total += 1
        elif m.group(5):
            conv, size = m.group(5), m.group(4) or ""
            if conv in "swQqz":
                prec = m.group(3)
                if known and nstr in known:
                    total += known[nstr]
                else:
                    total += min(STRING_BYTES, int(prec)) if prec and prec.isdigit() else STRING_BYTES
                nstr += 1
            elif conv in "diuxX":
                total += INT64_BYTES if size in ("ll", "l") and conv != "x" else INT_BYTES
            else:
                total += INT_BYTES
        else:
            total += len(t.encode())
    return total


SQL_ANYWHERE = re.compile(r"CREATE TRIGGER|DROP TRIGGER|DELETE FROM|IS NOT NULL|"
                          r"SELECT count|\bNEW\.|\bOLD\.")


def split_top(text, sep):
    """text split at each sep outside parentheses and strings."""
    parts, depth, cur, i = [], 0, [], 0
    while i < len(text):
        c = text[i]
        if c in "\"'":
            j = string_end(text, i)
            cur.append(text[i:j])
            i = j
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        if c == sep and depth == 0:
            parts.append("".join(cur))
            cur = []
        else:
            cur.append(c)
        i += 1
    parts.append("".join(cur))
    return parts


def results(expr):
    """The values a C conditional expression can take (its last operands)."""
    q = split_top(expr, "?")
    if len(q) == 1:
        return [expr]
    rest = "?".join(q[1:])
    # the ':' that closes the first '?': the first one at nesting level 0
    depth = 0
    for i, c in enumerate(rest):
        if c == "?":
            depth += 1
        elif c == ":" and not _in_string(rest, i) and _paren_depth(rest, i) == 0:
            if depth == 0:
                return results(rest[:i]) + results(rest[i + 1:])
            depth -= 1
    return [expr]


def _in_string(text, i):
    return text[:i].count('"') % 2 == 1


def _paren_depth(text, i):
    return text[:i].count("(") - text[:i].count(")")


def literal_lengths(fmt, args, macros):
    """{i: bytes} for each string conversion i of fmt whose argument can only
    be string literals (a literal, or a conditional choosing among them)."""
    known, a, nstr = {}, 0, 0
    for m in CONVERSION.finditer(fmt):
        if not m.group(5) or m.group(0) == "%%":
            continue
        if m.group(1) == "*":
            a += 1
        if m.group(3) == "*":
            a += 1
        if m.group(5) in "swQqz":
            if a < len(args):
                vals = results(args[a].strip())
                lens = []
                for v in vals:
                    v = v.strip()
                    while v.startswith("(") and v.endswith(")"):
                        v = v[1:-1].strip()
                    short = [n for k, n in KNOWN_SHORT.items()
                             if v == k or v.startswith(k + "(")]
                    if short:
                        lens.append(short[0])
                        continue
                    runs = literal_runs(v, macros)
                    if len(runs) == 1 and TOKEN.sub(lambda t: "" if t.group(0).startswith('"') or
                                                    t.group(0) in macros else t.group(0),
                                                    v).strip() == "":
                        lens.append(len(runs[0][1].encode()))
                    else:
                        lens = None
                        break
                if lens:
                    known[nstr] = max(lens)
            nstr += 1
        a += 1
    return known


def is_message(s):
    if not re.search(r"[A-Za-z]{3,} [A-Za-z]", s):
        return False  # a name, a pure format, a date
    return not SQL_START.match(s) and not SQL_ANYWHERE.search(s)


def collect(root):
    sources = []
    for rel in SOURCES:
        p = os.path.join(root, rel)
        paths = [os.path.join(p, f) for f in sorted(os.listdir(p))
                 if f.endswith((".c", ".h"))] if os.path.isdir(p) else [p]
        for path in paths:
            with open(path, encoding="utf-8") as f:
                sources.append((os.path.relpath(path, root), strip_comments(f.read())))
    macros = string_macros(sources)
    found = {}

    def add(kind, path, src, off, text, known=None):
        line = src.count("\n", 0, off) + 1
        key = (kind, text)
        size = estimate(text, known) if kind == "message" else len(text.encode())
        if key not in found or found[key]["bytes"] < size:  # the longest use
            found[key] = {"kind": kind, "where": "%s:%d" % (path, line), "format": text,
                          "bytes": size}

    call = re.compile(r"\b(%s)\s*\(" % "|".join(sorted(MESSAGE_CALLS | FRAGMENT_CALLS)))
    for path, src in sources:
        for m in call.finditer(src):
            args = call_args(src, m.end() - 1)
            base = m.end()
            fmt = None
            pos = 0
            for arg in split_top(args, ","):
                if call.search(arg):
                    pos += len(arg) + 1
                    continue  # a call of its own, read on its own
                for off, text in literal_runs(arg, macros):
                    if not re.search(r"[A-Za-z]", text) or (fmt is None and "%" in text and
                                                            not is_message(text)):
                        continue
                    if fmt is None and m.group(1) not in FRAGMENT_CALLS and is_message(text):
                        fmt = text
                        fmt_where = base + pos + off
                        fmt_args = []
                    elif fmt is not None or m.group(1) in FRAGMENT_CALLS:
                        if "%" not in text:
                            add("fragment", path, src, base + pos + off, text)
                if fmt is not None and fmt_args is not None and arg.strip() != "" and \
                        not any(t == fmt for _, t in literal_runs(arg, macros)):
                    fmt_args.append(arg)
                pos += len(arg) + 1
            if fmt is not None:
                add("message", path, src, fmt_where, fmt, literal_lengths(fmt, fmt_args, macros))
        for m in re.finditer(r"^[ \t]*#[ \t]*define[ \t]+(FENCE_\w*_MSG)\b", src, re.M):
            add("message", path, src, m.start(), macros[m.group(1)])
        for off, run in literal_runs(src, macros):
            for m in re.finditer(r"RAISE\s*\(\s*(ABORT|FAIL|ROLLBACK)\s*,\s*'((?:[^']|'')*)'", run):
                add("message", path, src, off, m.group(2).replace("''", "'"))
    return sorted(found.values(), key=lambda r: (-r["bytes"], r["where"]))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    rows = collect(a.root)
    if a.json:
        json.dump(rows, sys.stdout, indent=1)
        return
    msgs = [r for r in rows if r["kind"] == "message"]
    for r in rows:
        print("%4d  %-8s %-32s %s" % (r["bytes"], r["kind"], r["where"],
                                      r["format"].replace("\n", "\\n")))
    sizes = [r["bytes"] for r in msgs]
    print("# %d messages, longest %d, median %d bytes (a string conversion "
          "counted as %d bytes)" % (len(sizes), max(sizes), statistics.median(sizes),
                                     STRING_BYTES))


if __name__ == "__main__":
    main()
