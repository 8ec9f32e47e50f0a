// tests/stacks/better_sqlite3.js: fence from Node 20 with better-sqlite3 12, as an
// application writes it (run by tests/stacks/run_node.sh, which installs the package).
//
//   node tests/stacks/better_sqlite3.js EXTENSION DIR
//
// Two workers of one job on a per-row protected table keyed by TEXT, with
// leases from fence_acquire, once with tokens as plain JS numbers (safeIntegers
// off, better-sqlite3's default: a number is bound as a REAL, which fence takes
// as the integer it holds, up to 2^53) and once as BigInts (safeIntegers on). Each write is the
// pattern docs/stacks-sqlite.md gives: db.transaction(...).immediate()
// (BEGIN IMMEDIATE), fence_check first, the token in the token column too.
// Asserted on what committed, read back by a connection without fence.
'use strict';
const Database = require('better-sqlite3');
const path = require('path');

const [ext, dir] = process.argv.slice(2);
let failed = 0;
let passed = 0;
function ok(cond, what, detail) {
	console.log(`${cond ? 'ok' : 'not ok'} - stacks node better-sqlite3: ${what}`);
	if (cond) passed++;
	else {
		failed++;
		if (detail !== undefined) console.log(`#   ${String(detail).replace(/\n/g, '\n#   ')}`);
	}
	return cond;
}
function attempt(fn) {
	try {
		return [null, fn()];
	} catch (e) {
		return [e, null];
	}
}
function sleep(ms) {
	Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, ms);
}
const file = path.join(dir, 'jobs.db');
const TTL = 300;

function open() {
	const db = new Database(file, { timeout: 5000 });
	db.loadExtension(ext);
	db.pragma('recursive_triggers = ON'); // jobs is keyed on name, not the rowid
	return db;
}
function committed(sql) {
	const db = new Database(file, { readonly: true });
	try {
		return db.prepare(sql).all();
	} finally {
		db.close();
	}
}

class Worker {
	constructor(holder, big, res) {
		this.holder = holder;
		this.res = res;
		this.ttl = big ? BigInt(TTL) : TTL;
		this.db = open();
		this.db.defaultSafeIntegers(big);
		const key = res.slice(4);
		this.write = this.db.transaction((tok, state) => {
			this.db.prepare('SELECT fence_check(?, ?)').get(res, tok);
			const r = this.db.prepare('UPDATE jobs SET state = ?, tok = ? WHERE name = ?').run(state, tok, key);
			if (r.changes === 0) this.db.prepare('INSERT INTO jobs VALUES (?, ?, ?)').run(key, state, tok);
		});
	}
	acquire() {
		const tok = this.db.prepare('SELECT fence_acquire(?, ?, ?) AS t').get(this.res, this.holder, this.ttl).t;
		if (tok !== null) this.db.prepare('SELECT fence_check(?, ?)').get(this.res, tok);
		return tok;
	}
}

const setup = open();
const version = setup.prepare('SELECT sqlite_version() AS v').get().v;
ok(true, `better-sqlite3 ${require('better-sqlite3/package.json').version} runs SQLite ${version} on Node ${process.versions.node}`);
setup.exec('CREATE TABLE jobs(name TEXT PRIMARY KEY, state TEXT, tok INTEGER)');
setup.prepare("SELECT fence_protect('jobs', 'tok', 'job:', 'name')").get();
// a token as a JS number and as a BigInt, outside any table
let [e, r] = attempt(() => setup.prepare("SELECT fence_check('num', ?) AS t").get(5).t);
ok(e === null && r === 5, 'fence_check with the token as a plain JS number (bound as a REAL) accepts it', e || r);
[e, r] = attempt(() => setup.prepare("SELECT fence_check('num', ?) AS t").get(5n).t);
ok(e === null && r === 5, 'fence_check with the token as a BigInt accepts it', e || r);
[e, r] = attempt(() => setup.prepare("SELECT fence_check('num', ?) AS t").get(5.5).t);
ok(e !== null && /invalid fencing/.test(e.message), 'fence_check with 5.5 is invalid, not coerced', e || r);
[e, r] = attempt(() => setup.prepare("SELECT fence_check('num', ?) AS t").get(4).t);
ok(e !== null && e.code === 'SQLITE_CONSTRAINT_FUNCTION' && /^stale fencing token/.test(e.message),
	'fence_check with a lower JS number is stale (SQLITE_CONSTRAINT_FUNCTION)', e ? `${e.code}: ${e.message}` : r);
// a per-row key as a JS number: bound as a REAL, which an INTEGER key column
// makes 17 before the guard sees it; a fraction stays a REAL, whose text
// differs between SQLite versions, and is refused as a key
setup.exec("CREATE TABLE items(n INTEGER PRIMARY KEY, id INTEGER, tok INTEGER); " +
	"SELECT fence_protect('items', 'tok', 'item:', 'id')");
const putItem = setup.prepare('INSERT INTO items(id, tok) VALUES (?, ?)');
[e] = attempt(() => putItem.run(17, 5));
const [e2] = attempt(() => putItem.run(17.5, 5));
const items = setup.prepare('SELECT id FROM items').all();
const keyed = setup.prepare("SELECT resource FROM fence_tokens WHERE resource LIKE 'item:%'").all();
ok(e === null && e2 !== null && /invalid fencing key/.test(e2.message) &&
	JSON.stringify(items) === '[{"id":17}]' && JSON.stringify(keyed) === '[{"resource":"item:17"}]',
	'a JS number key 17 names item:17; 17.5 is refused as a key and nothing of it commits',
	`${e} ${e2} ${JSON.stringify(items)} ${JSON.stringify(keyed)}`);
setup.close();

function scenario(big) {
	// big: safeIntegers on (tokens are BigInts); else plain JS numbers, the default
	const kind = big ? 'BigInt tokens (safeIntegers)' : 'JS number tokens (the default)';
	const num = (v) => (big ? BigInt(v) : v);
	const res = big ? 'job:b' : 'job:a';
	const key = res.slice(4);
	const zombie = new Worker('worker-1', big, res);
	const holder = new Worker('worker-2', big, res);
	let e, tz, th;
	[e, tz] = attempt(() => zombie.acquire());
	if (!ok(e === null && typeof tz === typeof num(1), `${kind}: fence_acquire gives a token, and fence_check of it right after accepts it`, e || tz)) return;
	[e] = attempt(() => zombie.write.immediate(tz, 'zombie-1'));
	ok(e === null, `${kind}: the first holder writes at ${tz} (db.transaction(...).immediate())`, e);
	sleep(TTL * 1.3); // the first holder pauses past its lease
	[e, th] = attempt(() => holder.acquire());
	if (!ok(e === null && typeof th === typeof num(1) && th > tz, `${kind}: the next holder gets a greater token and checks it`, e || th)) return;
	const [e1] = attempt(() => holder.write.immediate(th, 'holder-1'));
	const [e2] = attempt(() => holder.write.immediate(th, 'holder-2'));
	ok(e1 === null && e2 === null, `${kind}: the holder writes twice at its token ${th}`, `${e1} ${e2}`);
	[e] = attempt(() => zombie.write.immediate(tz, 'zombie-2'));
	ok(e !== null && e.code === 'SQLITE_CONSTRAINT_FUNCTION' && /^stale fencing token/.test(e.message),
		`${kind}: the zombie's write at ${tz} is refused as stale (SQLITE_CONSTRAINT_FUNCTION)`, e ? `${e.code}: ${e.message}` : 'no error');
	[e] = attempt(() => zombie.db.prepare('UPDATE jobs SET state = ?, tok = ? WHERE name = ?').run('zombie-3', tz, key));
	ok(e !== null && /stale fencing token/.test(e.message),
		`${kind}: the zombie's UPDATE with its token ${tz} in the token column, outside a transaction, is refused`, e || 'no error');
	const rows = committed(`SELECT state, tok FROM jobs WHERE name = '${key}'`);
	const toks = committed(`SELECT token FROM fence_tokens WHERE resource = '${res}'`);
	ok(JSON.stringify(rows) === JSON.stringify([{ state: 'holder-2', tok: Number(th) }]) &&
		toks.length === 1 && toks[0].token === Number(th),
		`${kind}: committed: the holder's second write at ${th}; fence_tokens ${th}`,
		`rows ${JSON.stringify(rows)}, fence_tokens ${JSON.stringify(toks)}`);
}
scenario(false);
scenario(true);
const bare = new Database(file, { timeout: 5000 });
[e] = attempt(() => bare.prepare("UPDATE jobs SET state = 'bare', tok = 1000 WHERE name = 'a'").run());
ok(e !== null && /no such function: fence_guard/.test(e.message),
	'a connection that has not loaded fence cannot write the protected table', e || 'no error');
bare.close();
console.log(`# stacks node better-sqlite3: ${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
