// tests/npm_smoke.js: run by tests/npm_package.sh inside a scratch project
// that installed the packed sqlite-fence tarball and better-sqlite3 12. What
// a Node user does: require the package, load it into a connection, write
// through a protected table with BEGIN IMMEDIATE, and see a stale holder's
// write refused. Asserts on what committed (the table, fence_tokens).
// One "ok - " or "not ok - " line per check.
"use strict";
const fs = require("node:fs");
const os = require("node:os");
const path = require("node:path");
const Database = require("better-sqlite3");
const fence = require("sqlite-fence");

let failed = 0;
function report(ok, name, detail) {
  console.log(`${ok ? "ok" : "not ok"} - npm: ${name}`);
  if (!ok) {
    failed++;
    if (detail !== undefined) for (const l of String(detail).split("\n")) console.log(`#   ${l}`);
  }
}

const dir = fs.mkdtempSync(path.join(os.tmpdir(), "fence-npm-"));
try {
  const file = fence.getLoadablePath();
  report(path.isAbsolute(file) && file.includes(path.join("node_modules", "sqlite-fence")) && fs.existsSync(file),
    "getLoadablePath() names the fence.so inside the installed package", file);

  // One holder's fenced write, then a stale holder's, with tokens of a JS
  // type; returns what committed.
  function scenario(label, tok) {
    const db = new Database(path.join(dir, `${label}.db`));
    fence.load(db);
    db.pragma("busy_timeout = 5000");
    db.exec("CREATE TABLE invoices (id integer PRIMARY KEY, status text, tok bigint)");
    db.prepare("SELECT fence_protect('invoices', 'tok', 'invoices-lock')").get();
    db.prepare("INSERT INTO invoices VALUES (7, 'open', ?)").run(tok(33));
    const markPaid = (id, token) => {
      db.exec("BEGIN IMMEDIATE");
      try {
        db.prepare("UPDATE invoices SET status = 'paid', tok = ? WHERE id = ?").run(token, id);
        db.exec("COMMIT");
      } catch (e) {
        if (db.inTransaction) db.exec("ROLLBACK");
        throw e;
      }
    };
    markPaid(7, tok(34));
    let refusal = null;
    try {
      markPaid(7, tok(33));       // the zombie, still holding 33
    } catch (e) {
      refusal = e;
    }
    // a plain fence_check with the type too: accepted at 34, refused at 33
    let check = null, stale = null;
    try {
      check = db.prepare("SELECT fence_check('invoices-lock', ?) AS t").get(tok(34)).t;
      db.prepare("SELECT fence_check('invoices-lock', ?)").get(tok(33));
    } catch (e) {
      stale = e;
    }
    db.close();
    const again = new Database(path.join(dir, `${label}.db`), { readonly: true });
    const row = again.prepare("SELECT status, tok FROM invoices WHERE id = 7").get();
    const highest = again.prepare("SELECT token FROM fence_tokens WHERE resource = 'invoices-lock'").get();
    again.close();
    return { refusal, row, highest, check, stale };
  }

  for (const [label, tok, what] of [
    ["bigint", (n) => BigInt(n), "a BigInt token (33n)"],
    ["number", (n) => n, "a plain JS number token (33), bound as REAL"],
  ]) {
    let r;
    try {
      r = scenario(label, tok);
    } catch (e) {
      report(false, `better-sqlite3 12, ${what}: the fenced write commits and the stale holder's is refused`,
        e.stack);
      continue;
    }
    const show = (v) => JSON.stringify(v, (k, x) => (typeof x === "bigint" ? `${x}n` : x));
    report(r.refusal && r.refusal.code === "SQLITE_CONSTRAINT_FUNCTION" &&
      r.refusal.message.startsWith("stale fencing token 33 for resource \"invoices-lock\"") &&
      r.row && r.row.status === "paid" && Number(r.row.tok) === 34 && r.highest && Number(r.highest.token) === 34,
      `better-sqlite3 12, ${what}, a protected table: the fenced write commits and the stale holder's ` +
      "is refused (SQLITE_CONSTRAINT_FUNCTION); the table and fence_tokens keep 34",
      show({ refusal: r.refusal && [r.refusal.code, r.refusal.message], row: r.row, highest: r.highest }));
    report(Number(r.check) === 34 && r.stale && r.stale.code === "SQLITE_CONSTRAINT_FUNCTION" &&
      r.stale.message.startsWith("stale fencing token 33"),
      `better-sqlite3 12, ${what}, fence_check(resource, token): 34 accepted, 33 refused as stale`,
      show({ check: r.check, stale: r.stale && [r.stale.code, r.stale.message] }));
  }

  // README.md's better-sqlite3 block, run as written (its file name aside)
  const readme = fs.readFileSync(process.env.FENCE_README, "utf8");
  const at = readme.indexOf("\n### Node.js and SQLite (better-sqlite3)\n");
  const m = at < 0 ? null : /^```js\n([\s\S]*?)^```$/m.exec(readme.slice(at));
  if (!m) {
    report(false, "README's better-sqlite3 block is found");
  } else {
    const code = m[1].replace('"app.db"', JSON.stringify(path.join(dir, "readme.db")));
    let r = {};
    try {
      const { db, markPaid } = new Function("require", `${code}\nreturn { db, markPaid };`)(require);
      db.prepare("INSERT INTO invoices VALUES (7, 'open', ?)").run(33n);
      markPaid(7, 34n);
      try { markPaid(7, 33n); } catch (e) { r.refusal = e; }
      markPaid(7, 35);     // a plain number, through the protected table's integer column
      r.row = db.prepare("SELECT status, tok FROM invoices WHERE id = 7").get();
      r.highest = db.prepare("SELECT token FROM fence_tokens WHERE resource = 'invoice:7'").get();
      r.open = db.inTransaction;
      db.close();
    } catch (e) {
      r.error = e;
    }
    report(!r.error && r.refusal && r.refusal.code === "SQLITE_CONSTRAINT_FUNCTION" &&
      r.refusal.message.startsWith("stale fencing token 33 for resource \"invoice:7\"") &&
      r.row.status === "paid" && Number(r.row.tok) === 35 && Number(r.highest.token) === 35 && !r.open,
      "README's better-sqlite3 block: markPaid commits with 34n, refuses the stale 33n (SQLITE_CONSTRAINT_FUNCTION), " +
      "commits with the number 35",
      r.error ? r.error.stack : JSON.stringify({ refusal: r.refusal && [r.refusal.code, r.refusal.message], row: r.row,
        highest: r.highest }));
  }

  // the package's own README (what npm shows), its code block run as written
  {
    const pkgReadme = fs.readFileSync(path.join(path.dirname(fence.getLoadablePath()), "..", "..", "README.md"), "utf8");
    const b = /^```js\n([\s\S]*?)^```$/m.exec(pkgReadme);
    let guards = null, err = null;
    try {
      const code = b[1].replace('"app.db"', JSON.stringify(path.join(dir, "pkg.db")));
      const db = new Function("require", `${code}\nreturn db;`)(require);
      guards = db.prepare("SELECT count(*) AS n FROM fence_guards").get().n;
      db.close();
    } catch (e) {
      err = e;
    }
    report(guards === 1, "the package's README.md: its example runs as written and protects counter", err && err.stack);
  }

  // load() refuses what is not a connection, with a message
  let te = null;
  try { fence.load({}); } catch (e) { te = e; }
  report(te instanceof TypeError && /better-sqlite3/.test(te.message), "load() refuses a non-connection with a TypeError");

  let sqliteMod = null;
  try { sqliteMod = require("node:sqlite"); } catch (e) { /* Node 20 has none */ }
  if (sqliteMod && sqliteMod.DatabaseSync) {
    const db = new sqliteMod.DatabaseSync(path.join(dir, "node.db"), { allowExtension: true });
    fence.load(db);
    db.exec("SELECT fence_check('n', 5)");
    let e2 = null;
    try { db.exec("SELECT fence_check('n', 4)"); } catch (e) { e2 = e; }
    const t = db.prepare("SELECT token FROM fence_tokens WHERE resource = 'n'").get();
    db.close();
    report(e2 && /stale fencing token 4/.test(e2.message) && Number(t.token) === 5,
      `node:sqlite (Node ${process.version}): load() loads fence and a stale token is refused`, e2);
  } else {
    console.log(`# node:sqlite is not in Node ${process.version}: load() with it is not tested here`);
  }
} finally {
  fs.rmSync(dir, { recursive: true, force: true });
}
process.exit(failed ? 1 : 0);
