#!/usr/bin/env bash
# The sqlite3 shell in scripts, with fence's own leases.
#
# Each worker's script begins with
#
#   .bail on                     stop at the first error: without it the shell goes
#                                on after a refused fence_check, and the COMMIT at
#                                the end commits the writes that followed it
#   .load ./sqlite_ext/fence
#   .timeout 5000                wait up to 5 s for the write lock, not fail at once
#   PRAGMA trusted_schema = ON;  newer shells open every database with it off, and
#                                then fence's guard triggers may not call fence's
#                                functions (every write to a protected table fails
#                                closed); turn it on for database files you trust
#
# in the script itself: the 3.52 shell given both -bail and an SQL -cmd skips
# its standard input without a word (exit status 0).
#
# The story. Worker A takes the lease and writes a draft, then pauses past
# its lease. Worker B takes the lease and writes. A resumes and runs its
# script with its old token: the shell stops at the refused fence_check
# (exit status 1) and nothing of A's transaction stays.
#
# Run it: /usr/bin/python3 examples/run.py stacks_sqlite3_shell
# (or FENCE_SQLITE_EXT=./sqlite_ext/fence bash examples/stacks_sqlite3_shell.sh)
# Exit status 0 when A's late script was refused and the file holds B's report.
set -u
FENCE=${FENCE_SQLITE_EXT:-./sqlite_ext/fence}
dir=${FENCE_EXAMPLE_DIR:-$(mktemp -d)}
db=$dir/report.db
TTL_MS=500

fenced() {	# fenced: the shell as every worker runs it; the script on stdin
	{
		printf '.bail on\n.load %s\n.timeout 5000\nPRAGMA trusted_schema = ON;\n' "$FENCE"
		cat
	} | sqlite3 "$db"
}

acquire() {	# acquire HOLDER: print the lease's token (empty while another holds it)
	echo "SELECT fence_acquire('nightly-report', '$1', $TTL_MS);" | fenced
}

check() {	# check TOKEN: right after acquiring, so that older holders are refused from now on
	echo "SELECT fence_check('nightly-report', $1);" | fenced >/dev/null
}

write() {	# write TOKEN BODY: one transaction, BEGIN IMMEDIATE ... COMMIT
	fenced >/dev/null <<EOF
BEGIN IMMEDIATE;
SELECT fence_check('nightly-report', $1);
UPDATE report SET body = '$2', tok = $1 WHERE id = 1;
INSERT INTO history(body) VALUES ('$2');
COMMIT;
EOF
}

fenced >/dev/null <<'EOF'
CREATE TABLE report(id INTEGER PRIMARY KEY, body TEXT, tok INTEGER);
CREATE TABLE history(id INTEGER PRIMARY KEY, body TEXT);
SELECT fence_protect('report', 'tok', 'nightly-report');
INSERT INTO report VALUES (1, '(none yet)', 0);
EOF

ta=$(acquire worker-a)
check "$ta" || exit 1
write "$ta" "draft by A" || exit 1
echo "A took the lease with token $ta and wrote a draft; A pauses"
sleep 0.75
tb=$(acquire worker-b)
check "$tb" || exit 1
write "$tb" "report by B" || exit 1
echo "A's lease expired; B took it with token $tb, checked it and wrote"
if out=$(write "$ta" "late report by A" 2>&1); then
	echo "A resumed; its script with token $ta was ACCEPTED"
	refused=0
else
	echo "A resumed; the shell stopped its script at: $out"
	case $out in *"stale fencing token"*) refused=1 ;; *) refused=0 ;; esac
fi
row=$(sqlite3 "$db" "SELECT body || '|' || tok FROM report")
late=$(sqlite3 "$db" "SELECT count(*) FROM history WHERE body = 'late report by A'")
if [ "$refused" = 1 ] && [ "$row" = "report by B|$tb" ] && [ "$late" = 0 ]; then
	echo "the file holds '$row': as it should"
	exit 0
fi
echo "the file holds '$row' ($late late rows in history): WRONG"
exit 1
