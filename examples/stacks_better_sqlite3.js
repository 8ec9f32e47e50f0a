// Node 20 + better-sqlite3 12, with fence's own leases.
//
// better-sqlite3 hands integers to JavaScript as plain numbers (unless
// safeIntegers is on) and binds a number as a REAL: fence takes a REAL that
// holds an exact integer up to 2^53 as that integer, so the token
// fence_acquire returns goes straight back into fence_check and the token
// column. Writes run in db.transaction(fn).immediate(...), which is
// BEGIN IMMEDIATE ... COMMIT (ROLLBACK when fn throws).
//
// The story. Worker A takes the lease and writes a draft, then pauses past
// its lease. Worker B takes the lease and writes twice. A resumes and writes
// with its old token: refused with SQLITE_CONSTRAINT_FUNCTION, and nothing
// of its transaction stays.
//
// Run it: /usr/bin/python3 examples/run.py stacks_better_sqlite3
// (it installs better-sqlite3 into build/node on first use), or with
// better-sqlite3 installed: FENCE_SQLITE_EXT=./sqlite_ext/fence node examples/stacks_better_sqlite3.js
//
// Exit status 0 when A's late write was refused and the file holds B's
// report at B's token.
'use strict';
const Database = require('better-sqlite3');
const os = require('os');
const path = require('path');
const fs = require('fs');

const FENCE = process.env.FENCE_SQLITE_EXT || './sqlite_ext/fence';
const TTL_MS = 500;

function openFenced(file) {
	const db = new Database(file, { timeout: 5000 });   // busy timeout, ms
	db.loadExtension(FENCE);
	db.pragma('recursive_triggers = ON');                 // per-row tables
	return db;
}

function acquire(db, me) {
	const token = db.prepare("SELECT fence_acquire('nightly-report', ?, ?) AS t").get(me, TTL_MS).t;
	if (token !== null) db.prepare("SELECT fence_check('nightly-report', ?)").get(token);
	return token;
}

function writer(db) {
	const write = db.transaction((token, body) => {
		db.prepare("SELECT fence_check('nightly-report', ?)").get(token);
		db.prepare('UPDATE report SET body = ?, tok = ? WHERE id = 1').run(body, token);
		db.prepare('INSERT INTO history(body) VALUES (?)').run(body);
	});
	return (token, body) => write.immediate(token, body);
}

const dir = process.env.FENCE_EXAMPLE_DIR || fs.mkdtempSync(path.join(os.tmpdir(), 'fence-'));
const file = path.join(dir, 'report.db');
const setup = openFenced(file);
setup.exec('CREATE TABLE report(id INTEGER PRIMARY KEY, body TEXT, tok INTEGER);' +
	'CREATE TABLE history(id INTEGER PRIMARY KEY, body TEXT)');
setup.prepare("SELECT fence_protect('report', 'tok', 'nightly-report')").get();
setup.prepare("INSERT INTO report VALUES (1, '(none yet)', 0)").run();
setup.close();

let good = false;
try {
	const a = openFenced(file);
	const b = openFenced(file);
	const ta = acquire(a, 'worker-a');
	writer(a)(ta, "A's draft");
	console.log(`A took the lease with token ${ta} (a ${typeof ta}) and wrote a draft; A pauses`);
	Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, TTL_MS * 1.5);
	const tb = acquire(b, 'worker-b');
	writer(b)(tb, "B's report");
	writer(b)(tb, "B's report, final");
	console.log(`A's lease expired; B took it with token ${tb} and wrote twice`);
	let refused = false;
	try {
		writer(a)(ta, "A's late report");
		console.log(`A resumed; its write with token ${ta} was ACCEPTED`);
	} catch (e) {
		if (e.code !== 'SQLITE_CONSTRAINT_FUNCTION') throw e;
		refused = e.message.startsWith('stale fencing token');
		console.log(`A resumed; its write with token ${ta} was refused (${e.code}): ${e.message}`);
	}
	const check = new Database(file, { readonly: true });
	const row = check.prepare('SELECT body, tok FROM report').get();
	const late = check.prepare("SELECT count(*) AS n FROM history WHERE body = ?").get("A's late report").n;
	check.close();
	good = refused && row.body === "B's report, final" && row.tok === tb && late === 0;
	console.log(`the file holds ${JSON.stringify(row)}: ${good ? 'as it should' : 'WRONG'}`);
} catch (e) {
	console.log(`failed: ${e.code || e.name}: ${e.message}`);
}
process.exit(good ? 0 : 1);
