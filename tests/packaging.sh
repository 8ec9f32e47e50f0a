#!/usr/bin/env bash
# tests/packaging.sh: what a packager or a PGXN user relies on, checked on
# the real targets: one licence named the same way in LICENSE, META.json and
# the control file; META.json valid and in step with the control file's
# version; `make install` honouring DESTDIR, PREFIX and PG_CONFIG and the
# installed SQLite extension loading from where it was put; `make dist`
# making a tarball from git that holds the sources and builds.
# One "ok - " or "not ok - " line per check.
set -u
. "$(dirname "$0")/lib.sh"
cd "$FENCE_ROOT"
work=$(mktemp -d /tmp/fence-pkg.XXXXXX)
trap 'rm -rf "$work"' EXIT

# --- the licence, named alike in its three places
head -1 LICENSE | grep -qx 'PostgreSQL License'
report $? "packaging: LICENSE is the PostgreSQL License"
grep -q '^# License: PostgreSQL License' pg_ext/fence.control
report $? "packaging: pg_ext/fence.control names the PostgreSQL License"

# --- META.json: valid PGXN metadata, version in step with the control file
"$PYTHON" - <<'EOF'
import json, re, sys
m = json.load(open("META.json"))
ctl = open("pg_ext/fence.control").read()
default = re.search(r"^default_version = '([^']+)'", ctl, re.M).group(1)
problems = []
for key in ("name", "abstract", "version", "maintainer", "license", "provides", "meta-spec"):
    if key not in m:
        problems.append("META.json has no %r" % key)
if m.get("license") != "postgresql":
    problems.append("META.json license is %r, not 'postgresql'" % m.get("license"))
semver = re.compile(r"^\d+\.\d+\.\d+$")
for where, v in [("version", m.get("version", ""))] + \
        [("provides.%s.version" % k, p.get("version", "")) for k, p in m.get("provides", {}).items()]:
    if not semver.match(v):
        problems.append("META.json %s %r is not x.y.z (PGXN needs semantic versions)" % (where, v))
    elif not (v + ".").startswith(default + "."):
        problems.append("META.json %s %s does not match the control file's default_version %s"
                        % (where, v, default))
for k, p in m.get("provides", {}).items():
    for f in ("file", "docfile"):
        if f in p:
            try:
                open(p[f]).close()
            except OSError:
                problems.append("META.json provides.%s.%s names %s, which does not exist" % (k, f, p[f]))
deb = open("debian/changelog").readline().split("(")[1].split(")")[0]
if deb != m.get("version"):
    problems.append("debian/changelog's version %s is not META.json's %s" % (deb, m.get("version")))
if m.get("meta-spec", {}).get("version") != "1.0.0":
    problems.append("META.json meta-spec version is not 1.0.0")
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
EOF
report $? "packaging: META.json is valid PGXN metadata, license postgresql, version = control file's = debian/changelog's"

# --- make install: DESTDIR, PREFIX, PG_CONFIG
stage=$work/stage
make -s install DESTDIR="$stage" PREFIX=/opt/fence-test PG_CONFIG="$(command -v pg_config)" \
	>"$work/install.log" 2>&1
st=$?
[ $st -ne 0 ] && tail -20 "$work/install.log"
report $st "packaging: make install DESTDIR=... PREFIX=... PG_CONFIG=... succeeds"

sharedir=$(pg_config --sharedir)
pkglibdir=$(pg_config --pkglibdir)
missing=0
for f in "$stage/opt/fence-test/lib/sqlite3/fence.so" "$stage$pkglibdir/fence.so" \
	"$stage$sharedir/extension/fence.control" "$stage$sharedir/extension/fence--1.0.sql"; do
	[ -f "$f" ] || { echo "not installed: $f"; missing=1; }
done
# nothing outside DESTDIR
[ -e /opt/fence-test ] && { echo "make install wrote /opt/fence-test, outside DESTDIR"; missing=1; }
report $missing "packaging: make install puts the SQLite .so under \$PREFIX/lib/sqlite3 and the PostgreSQL files where pg_config says, inside DESTDIR"

# the installed SQLite extension (not the build tree's) loads and fences
"$PYTHON" - "$stage/opt/fence-test/lib/sqlite3/fence" <<'EOF'
import sqlite3, sys
con = sqlite3.connect(":memory:", isolation_level=None)
con.enable_load_extension(True)
con.load_extension(sys.argv[1])
assert con.execute("SELECT fence_check('pkg', 5)").fetchone()[0] == 5
try:
    con.execute("SELECT fence_check('pkg', 4)")
    sys.exit("a stale token was accepted by the installed extension")
except sqlite3.IntegrityError as e:
    assert str(e).startswith("stale fencing token 4"), e
assert con.execute("SELECT token FROM fence_tokens WHERE resource = 'pkg'").fetchone()[0] == 5
EOF
report $? "packaging: the installed SQLite extension loads from \$PREFIX/lib/sqlite3 and refuses a stale token"

# it exports its entry point and nothing else: no name of fence's can
# clash with another extension's loaded into the same process
exports=$(nm -D --defined-only "$stage/opt/fence-test/lib/sqlite3/fence.so" | awk '$2 ~ /^[TDBRVW]$/ { print $3 }' | sort | tr '\n' ' ')
[ "$exports" = "sqlite3_fence_init " ]
report $? "packaging: the SQLite extension exports sqlite3_fence_init only (exports: ${exports:-none})"

# PG_CONFIG is what PGXS uses: a wrong one must fail, not install elsewhere
if make -s install-pg DESTDIR="$work/bad" PG_CONFIG=/nonexistent/pg_config >/dev/null 2>&1; then
	report 1 "packaging: make install with a PG_CONFIG that does not exist fails"
else
	report 0 "packaging: make install with a PG_CONFIG that does not exist fails"
fi

# --- make demo installs what the demo needs, not the test toolchain
demo_pkgs=$(FENCE_DEPS_PRINT=1 FENCE_DEPS_ASSUME_NONE=1 bash tests/install_deps.sh demo | sort | tr '\n' ' ')
check_pkgs=$(FENCE_DEPS_PRINT=1 FENCE_DEPS_ASSUME_NONE=1 bash tests/install_deps.sh check | sort | tr '\n' ' ')
echo "make demo on a fresh machine installs: $demo_pkgs"
bad=0
[ "$demo_pkgs" = "gcc libc6-dev libsqlite3-dev make python3 " ] || bad=1
case $check_pkgs in *clang*etcd-server*postgresql-server-dev-15*python3-kazoo*redis-server*zookeeper*) ;; *) bad=1 ;; esac
make -n demo 2>/dev/null | grep -q 'install_deps.sh demo' || bad=1
make -n demo 2>/dev/null | grep -q 'install_deps.sh check' && bad=1
report $bad "packaging: make demo installs only a C compiler, the SQLite headers and python3; make check the rest"

# --- make dist: from git, holds the sources, builds
if git rev-parse --verify -q HEAD >/dev/null 2>&1; then
	ver=$(sed -n 's/^   "version": "\(.*\)",$/\1/p' META.json | head -1)
	make -s dist >"$work/dist.log" 2>&1
	st=$?
	if [ $st -eq 0 ] && [ -f "fence-$ver.tar.gz" ] && [ -f "fence-$ver.zip" ]; then
		mv "fence-$ver.tar.gz" "fence-$ver.zip" "$work/"
		tar -tzf "$work/fence-$ver.tar.gz" >"$work/list"
		bad=0
		for f in LICENSE META.json README.md Makefile pg_ext/fence.control pg_ext/fence--1.0.sql \
			sqlite_ext/fence.c core/fence_core.c docs/contract.md; do
			grep -qx "fence-$ver/$f" "$work/list" || { echo "not in the tarball: $f"; bad=1; }
		done
		if grep -E '\.(so|o|bc)$|/build/|tests/results/' "$work/list"; then
			echo "build output in the tarball"
			bad=1
		fi
		report $bad "packaging: make dist makes fence-$ver.tar.gz and .zip from git, sources in, build output out"
		tar -xzf "$work/fence-$ver.tar.gz" -C "$work"
		make -s -C "$work/fence-$ver" sqlite >/dev/null 2>&1 && [ -f "$work/fence-$ver/sqlite_ext/fence.so" ]
		report $? "packaging: the tarball builds the SQLite extension"
	else
		cat "$work/dist.log"
		report 1 "packaging: make dist makes fence-$ver.tar.gz and .zip"
	fi
else
	echo "not a git checkout: make dist is not tested"
fi

# --- the documents a user reads stand on their own: no reference to files or
# trackers outside the repository, and every relative link leads somewhere
"$PYTHON" - <<'PYEOF'
import glob, os, re, sys
docs = ["README.md", "CHANGELOG.md", "BENCHMARKS.md", "examples/README.md",
        "tests/lockservice/README.md"] + sorted(glob.glob("docs/*.md"))
problems = []
for d in docs:
    if not os.path.exists(d):
        continue
    text = open(d).read()
    for n, line in enumerate(text.splitlines(), 1):
        for pat in (r"SPEC\.md", r"\bthe SPEC\b", r"\bissue #?\d+", r"/work/"):
            if re.search(pat, line, re.I):
                problems.append("%s:%d refers outside the repository: %s" % (d, n, line.strip()))
    for target in re.findall(r"\]\(([^)#:]+)(?:#[^)]*)?\)", text):
        if not os.path.exists(os.path.join(os.path.dirname(d), target)):
            problems.append("%s links to %s, which does not exist" % (d, target))
for p in problems:
    print(p)
sys.exit(1 if problems else 0)
PYEOF
report $? "docs: README, docs/, examples/ and the other user documents refer to nothing outside the repository, and their links resolve"
