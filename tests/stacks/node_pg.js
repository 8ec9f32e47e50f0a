// tests/stacks/node_pg.js: fence through node-postgres (npm `pg` 8), run by
// tests/pg_stacks_node.py with NODE_PATH set to the node_modules it
// installed and FENCE_DSN_* in the environment. Prints "ok - " / "not ok - "
// lines and asserts on what committed (rows, fence_current).
'use strict'
const { Client, Pool } = require('pg')

const conf = {
  host: process.env.PGHOST, port: Number(process.env.PGPORT),
  user: process.env.PGUSER || 'postgres', database: process.env.FENCE_DB,
}
let failed = 0
function ok(cond, what, detail) {
  console.log((cond ? 'ok' : 'not ok') + ' - stacks node ' + what)
  if (!cond) {
    failed++
    if (detail !== undefined) console.log('#   ' + JSON.stringify(detail, (k, v) => typeof v === 'bigint' ? v.toString() + 'n' : v))
  }
}

// The pattern docs/stacks-postgresql.md gives: one client from the pool,
// BEGIN, fence_check, the writes, COMMIT; ROLLBACK on any error.
async function markPaid(pool, resource, token, who, named) {
  const client = await pool.connect()
  try {
    await client.query('BEGIN')
    const check = { text: 'SELECT fence_check($1, $2)', values: [resource, token] }
    const write = { text: 'INSERT INTO ledger (resource, who) VALUES ($1, $2)', values: [resource, who] }
    if (named) { check.name = 'fence-check'; write.name = 'ledger-insert' }
    await client.query(check)
    await client.query(write)
    await client.query('COMMIT')
  } catch (e) {
    await client.query('ROLLBACK')
    throw e
  } finally {
    client.release()
  }
}

async function code(fn) {
  try { await fn(); return null } catch (e) { return e.code || String(e) }
}

async function main() {
  const pool = new Pool({ ...conf, max: 4 })
  const admin = new Client(conf)
  await admin.connect()
  const rows = async (resource) =>
    (await admin.query('SELECT who FROM ledger WHERE resource = $1 ORDER BY seq', [resource])).rows.map(r => r.who)
  const highest = async (resource) =>
    (await admin.query('SELECT fence_current($1) AS h', [resource])).rows[0].h

  // the same story with the token as each JavaScript type a program holds
  const kinds = [
    ['a number', 10, 20],
    ['a string', '10', '20'],
    ['a BigInt', 10n, 20n],
    ['a BigInt above 2^53', 9007199254740993n, 9007199254740995n],
    ['a number, named (server-side prepared) statements', 10, 20, true],
  ]
  for (const [kind, zombie, holder, named] of kinds) {
    const res = 'invoice:' + kind
    const states = []
    for (const [tok, who] of [[zombie, 'zombie'], [holder, 'holder'], [zombie, 'zombie-again'], [holder, 'holder-again']]) {
      states.push(await code(() => markPaid(pool, res, tok, who, named)))
    }
    const got = await rows(res)
    const h = await highest(res)
    ok(JSON.stringify(states) === JSON.stringify([null, null, '23T01', null]) &&
       JSON.stringify(got) === JSON.stringify(['zombie', 'holder', 'holder-again']) &&
       h === String(holder),
       'token as ' + kind + ': the zombie\'s transaction is refused 23T01 after the holder\'s, ' +
       'nothing of it commits; the holder\'s commit; fence_current reads back exactly (as a string)',
       { states, got, h })
  }

  // a JavaScript number above 2^53 is not the token it was meant to be
  const meant = '9007199254740993'
  const sent = Number(meant)
  const r = await admin.query('SELECT fence_check($1, $2) AS t', ['precision', sent])
  ok(r.rows[0].t === '9007199254740992',
     'DEMONSTRATION (documented): a token above Number.MAX_SAFE_INTEGER passed as a number ' +
     'arrives rounded (9007199254740993 became 9007199254740992); pass a string or a BigInt',
     r.rows[0])

  // the protected table pattern: the row carries the token, one statement
  await admin.query("SELECT fence_check('acct:1', 20)")
  const s1 = await code(() => pool.query('UPDATE acct SET who = $1, tok = $2 WHERE id = 1', ['zombie', 10]))
  const s2 = await code(() => pool.query('UPDATE acct SET who = $1, tok = $2 WHERE id = 1', ['holder', 20n]))
  const acct = (await admin.query('SELECT who, tok FROM acct WHERE id = 1')).rows[0]
  ok(s1 === '23T01' && s2 === null && acct.who === 'holder' && acct.tok === '20',
     'protected row carrying the token, pool.query(): the zombie\'s UPDATE at 10 is refused ' +
     '23T01, the holder\'s at 20 commits', { s1, s2, acct })

  // the pitfall: pool.query() for the check and the write runs them in two
  // transactions (maybe on two connections). A table protected without a
  // token column refuses the unfenced write, the holder's too.
  await admin.query("SELECT fence_check('plain', 20)")
  const p1 = await code(() => pool.query("SELECT fence_check('plain', 20)"))
  const p2 = await code(() => pool.query("INSERT INTO plain (who) VALUES ('holder')"))
  const plain = (await admin.query('SELECT count(*)::int AS n FROM plain')).rows[0].n
  ok(p1 === null && p2 === '23T02' && plain === 0,
     'pool.query() for the check and then the write: a table protected without a token column ' +
     'refuses the write 23T02 (the documented refusal), nothing commits', { p1, p2, plain })

  await admin.end()
  await pool.end()
  console.log('# node_pg.js: ' + failed + ' failed')
  process.exit(failed ? 1 : 0)
}

main().catch((e) => { console.log('not ok - stacks node script ran: ' + e.stack.split('\n').join(' | ')); process.exit(1) })
