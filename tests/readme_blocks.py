"""tests/readme_blocks.py: the code blocks of README.md, for the tests that
run them (tests/sqlite_readme.py, tests/pg_readme.py), so that what the
README shows a new user is what the code does.

block(heading, lang, n) is the n-th ```lang block after the heading line;
quoted_error(block, marker) joins the comment lines that quote an error
after `marker` into one line; instrument(code) turns each `...` placeholder
statement into a record of the line that ran.
"""
import os
import re

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def readme():
    with open(os.path.join(ROOT, "README.md")) as f:
        return f.read()


def block(heading, lang, n=0):
    text = readme()
    at = text.index("\n" + heading + "\n")
    blocks = re.findall(r"^```%s\n(.*?)^```$" % re.escape(lang), text[at:], re.M | re.S)
    return blocks[n]


def quoted_error(code, marker):
    """The error quoted after `marker` in SQL comments, continued on the
    following `-- ` lines that are not a new statement's comment."""
    lines = code.splitlines()
    for i, line in enumerate(lines):
        if marker in line:
            parts = [line.split(marker, 1)[1].strip()]
            for nxt in lines[i + 1:]:
                s = nxt.strip()
                if not s.startswith("-- ") or s.startswith("-- Runtime error") or s.startswith("-- ERROR"):
                    break
                parts.append(s[3:].strip())
            return " ".join(parts)
    raise KeyError(marker)


def instrument(code):
    """Replace each placeholder line `...   # comment` with hits.append(N),
    N the placeholder's order (0, 1, ...), so a test can see which ran."""
    out, n = [], 0
    for line in code.splitlines():
        m = re.match(r"^(\s*)\.\.\.(\s*#.*)?$", line)
        if m:
            out.append("%shits.append(%d)%s" % (m.group(1), n, m.group(2) or ""))
            n += 1
        else:
            out.append(line)
    return "\n".join(out) + "\n"
