// tests/stacks/better_sqlite3_replace.js: REPLACE and upserts on a per-row table from
// Node 20 with better-sqlite3 12, as an application writes them (run by
// tests/stacks/run_node.sh, which installs the package).
//
//   node tests/stacks/better_sqlite3_replace.js EXTENSION DIR
//
// The cases of tests/sqlite_stacks_replace.py (which says why), here through
// prepared statements with tokens as plain JS numbers (bound as REALs: the
// default) and as BigInts (safeIntegers), recursive_triggers set with
// db.pragma('recursive_triggers = ON') where the connection is opened, or left
// off (better-sqlite3's SQLite has it off), each write in
// db.transaction(...).immediate() with fence_check first:
//
//   accounts(name TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE, balance, tok)
//   fence_protect('accounts', 'tok', 'acct:', 'name')
//   alice a@x 100 5, bob b@x 100 5; acct:alice = acct:bob = 5
//
// (a) on: the holder of carol alone (7) REPLACEs carol with alice's email:
//     refused, nothing changes; a stale holder of bob (4) REPLACEs bob with
//     alice's email: refused; a holder of alice (6) and carol (7): commits,
//     alice's row gone, acct:alice 6 (never the new row's 7);
// (b) off: those writes and an upsert refused with the message of
//     docs/sqlite-guarantees.md, nothing changes;
// (c) on: ON CONFLICT(email) DO UPDATE of alice's row by the holder of carol
//     alone is refused (an UPDATE of alice's row), a stale upsert of alice is
//     refused, and with a fence on alice it commits.
// Asserted on what committed, read by a connection that has not loaded fence.
'use strict';
const Database = require('better-sqlite3');
const fs = require('fs');
const path = require('path');

const [ext, dir] = process.argv.slice(2);
const OFF_MESSAGE = "fence guard refused: a REPLACE on this table can delete another key's row; " +
	'run PRAGMA recursive_triggers=ON on the connection';
let failed = 0;
let passed = 0;
function ok(cond, what, detail) {
	console.log(`${cond ? 'ok' : 'not ok'} - stacks node better-sqlite3 replace: ${what}`);
	if (cond) passed++;
	else {
		failed++;
		if (detail !== undefined) console.log(`#   ${String(detail).replace(/\n/g, '\n#   ')}`);
	}
	return cond;
}

let n = 0;
function fresh() {
	const file = path.join(dir, `replace-${++n}.db`);
	const db = new Database(file);
	db.loadExtension(ext);
	db.pragma('recursive_triggers = ON');
	db.exec(`
		CREATE TABLE accounts(name TEXT PRIMARY KEY, email TEXT NOT NULL UNIQUE,
		                      balance INTEGER, tok INTEGER);
		SELECT fence_protect('accounts', 'tok', 'acct:', 'name');
		BEGIN IMMEDIATE;
		SELECT fence_check('acct:alice', 5), fence_check('acct:bob', 5);
		INSERT INTO accounts VALUES ('alice', 'a@x', 100, 5), ('bob', 'b@x', 100, 5);
		COMMIT;`);
	db.close();
	return file;
}
function committed(file) {
	const db = new Database(file, { readonly: true });
	try {
		const rows = db.prepare('SELECT name, email, balance, tok FROM accounts ORDER BY name').raw().all();
		const toks = Object.fromEntries(db.prepare('SELECT resource, token FROM fence_tokens ORDER BY resource').raw().all());
		return JSON.stringify([rows, toks]);
	} finally {
		db.close();
	}
}

// The application's connection: fence loaded, recursive_triggers where it opens.
function open(file, on, big) {
	const db = new Database(file, { timeout: 5000 });
	db.loadExtension(ext);
	if (on) db.pragma('recursive_triggers = ON');
	else if (db.pragma('recursive_triggers', { simple: true })) db.pragma('recursive_triggers = OFF');
	db.defaultSafeIntegers(big);
	return db;
}

const REPLACE = 'INSERT OR REPLACE INTO accounts(name, email, balance, tok) VALUES (?, ?, ?, ?)';
const upsertSql = (target, setTok) =>
	'INSERT INTO accounts(name, email, balance, tok) VALUES (?, ?, ?, ?) ' +
	`ON CONFLICT(${target}) DO UPDATE SET balance = excluded.balance${setTok ? ', tok = excluded.tok' : ''}`;

function write(file, on, big, ops) {
	const num = (v) => (big ? BigInt(v) : v);
	const db = open(file, on, big);
	const fenceCheck = db.prepare('SELECT fence_check(?, ?)');
	const replace = db.prepare(REPLACE);
	const txn = db.transaction(() => {
		for (const [kind, ...args] of ops) {
			if (kind === 'fence') fenceCheck.get(args[0], num(args[1]));
			else if (kind === 'replace') replace.run(args[0][0], args[0][1], num(args[0][2]), num(args[0][3]));
			else {
				const [row, target, setTok] = args;
				db.prepare(upsertSql(target, setTok)).run(row[0], row[1], num(row[2]), num(row[3]));
			}
		}
	});
	try {
		txn.immediate();
		return null;
	} catch (e) {
		return e;
	} finally {
		db.close();
	}
}

const ALICE = ['alice', 'a@x', 100, 5];
const BOB = ['bob', 'b@x', 100, 5];
const BEFORE = JSON.stringify([[ALICE, BOB], { 'acct:alice': 5, 'acct:bob': 5 }]);
const CAROL_TAKES_A = ['carol', 'a@x', 0, 7];
const CAROL_UPSERT_A = ['carol', 'a@x', 50, 7];
const refused = (kind, what) => ({
	check: (e) => e !== null && (kind === 'off'
		? e.code === 'SQLITE_ERROR' && e.message.includes(OFF_MESSAGE)
		: e.code === 'SQLITE_CONSTRAINT_FUNCTION' && (kind === 'stale'
			? e.message.startsWith('stale fencing token')
			: e.message.startsWith('fencing token required for resource "acct:alice"'))),
	outcome: `refused (${what}), nothing changes`,
	expected: BEFORE,
});
const commits = (what, rows, toks) => ({
	check: (e) => e === null,
	outcome: `commits: ${what}`,
	expected: JSON.stringify([rows, toks]),
});

const CASES = [
	['a1: the holder of carol alone (7) REPLACEs carol with alice\'s email', true,
		[['replace', CAROL_TAKES_A]],
		refused('required', 'fencing token required for acct:alice; acct:alice stays 5, not 7')],
	['a2: a stale holder of bob (4) REPLACEs bob with alice\'s email', true,
		[['replace', ['bob', 'a@x', 0, 4]]],
		refused('stale', 'stale fencing token; alice\'s and bob\'s rows stay')],
	['a3: a holder of alice (6) and carol (7) REPLACEs carol with alice\'s email', true,
		[['fence', 'acct:alice', 6], ['replace', CAROL_TAKES_A]],
		commits('alice\'s row gone, acct:alice 6 (not 7), acct:carol 7', [BOB, CAROL_TAKES_A],
			{ 'acct:alice': 6, 'acct:bob': 5, 'acct:carol': 7 })],
	['b1: a3\'s write with recursive_triggers off', false,
		[['fence', 'acct:alice', 6], ['replace', CAROL_TAKES_A]],
		refused('off', 'with the docs\' message; acct:alice stays 5')],
	['b2: a1\'s write with recursive_triggers off', false,
		[['replace', CAROL_TAKES_A]],
		refused('off', 'with the docs\' message; alice\'s row stays')],
	['b3: c3\'s upsert with recursive_triggers off', false,
		[['fence', 'acct:alice', 6], ['upsert', CAROL_UPSERT_A, 'email', false]],
		refused('off', 'with the docs\' message')],
	['c1: the holder of carol alone (7) upserts ON CONFLICT(email) DO UPDATE SET balance (alice\'s row)', true,
		[['upsert', CAROL_UPSERT_A, 'email', false]],
		refused('required', 'checked as an UPDATE of alice\'s row: fencing token required for acct:alice')],
	['c2: a stale holder of alice (4) upserts alice ON CONFLICT(name) DO UPDATE SET balance, tok', true,
		[['upsert', ['alice', 'a@x', 50, 4], 'name', true]],
		refused('stale', 'stale fencing token')],
	['c3: a holder of alice (6) and carol (7) upserts ON CONFLICT(email) DO UPDATE SET balance', true,
		[['fence', 'acct:alice', 6], ['upsert', CAROL_UPSERT_A, 'email', false]],
		commits('alice\'s balance 50, acct:alice 6', [['alice', 'a@x', 50, 5], BOB],
			{ 'acct:alice': 6, 'acct:bob': 5, 'acct:carol': 7 })],
];

fs.mkdirSync(dir, { recursive: true });
console.log(`# better-sqlite3 ${require('better-sqlite3/package.json').version}, SQLite ` +
	`${new Database(':memory:').prepare('SELECT sqlite_version() AS v').get().v}, Node ${process.versions.node}`);
for (const big of [false, true]) {
	const kind = big ? 'BigInt tokens (safeIntegers)' : 'JS number tokens (the default)';
	for (const [name, on, ops, { check, outcome, expected }] of CASES) {
		try {
			const file = fresh();
			const e = write(file, on, big, ops);
			const after = committed(file);
			ok(check(e) && after === expected, `${kind}, ${name}: ${outcome}`,
				`error: ${e ? `${e.code}: ${e.message}` : 'none'}\ncommitted: ${after}\nexpected:  ${expected}`);
		} catch (e) {
			ok(false, `${kind}, ${name}: ran to its end`, e.stack);
		}
	}
}
console.log(`# stacks node better-sqlite3 replace: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
