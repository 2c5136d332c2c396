// Segment keys on Leaf's own `leaf_alloc` table in MariaDB, on Redis, and
// on the embedded default store.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')

const { IdmintError, Segments } = require('..')
const h = require('./helpers')

test("Leaf's leaf_alloc on MariaDB: two allocators, no ID twice, above what Leaf issued", async (t) => {
  const url = await h.mariadb(t)
  if (!url) return
  const table = h.unique('leaf_alloc')
  // Leaf's DDL (scripts/leaf_alloc.sql) and a row Leaf has issued from.
  h.mysql(`CREATE TABLE \`${table}\` (
      \`biz_tag\` varchar(128) NOT NULL DEFAULT '',
      \`max_id\` bigint(20) NOT NULL DEFAULT '1',
      \`step\` int(11) NOT NULL,
      \`description\` varchar(256) DEFAULT NULL,
      \`update_time\` timestamp NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP,
      PRIMARY KEY (\`biz_tag\`)
    ) ENGINE=InnoDB;
    INSERT INTO \`${table}\` (biz_tag, max_id, step, description)
      VALUES ('leaf-segment-test', 10001, 2000, 'from Leaf');`)
  t.after(() => h.mysql(`DROP TABLE \`${table}\``))
  const dir = h.tmpDir(t)
  const config = h.writeConfig(dir, `[segment]\nurl = "${url}"\nschema = "leaf"\ntable = "${table}"\n`)
  const a = Segments.fromConfig(config)
  const b = await Segments.fromConfigAsync(config)
  const seen = new Set()
  let last = 0n
  for (let i = 0; i < 3000; i++) {
    const id = a.nextId('leaf-segment-test')
    assert.equal(typeof id, 'bigint')
    assert.ok(id > last && id >= 10001n, 'above everything Leaf issued')
    last = id
    seen.add(id)
    seen.add(b.nextId('leaf-segment-test'))
  }
  const batch = a.nextIds('leaf-segment-test', 5000)
  assert.ok(batch instanceof BigInt64Array)
  assert.ok(batch[0] > last && h.increasing(batch))
  for (const id of batch) seen.add(id)
  assert.equal(seen.size, 3000 * 2 + 5000)
  h.throwsCode(() => a.nextId('no-such-key'), 'key_not_found')
  h.throwsCode(() => a.nextId('bad key!'), 'invalid_key')
  a.close()
  h.throwsCode(() => a.nextId('leaf-segment-test'), 'closed')
  b.close()
})

test('a store that is down is unavailable, with a retry hint', async (t) => {
  // Nothing listens on port 1: the store can't be opened.
  const dir = h.tmpDir(t)
  const config = h.writeConfig(dir, '[segment]\nurl = "mysql://root@127.0.0.1:1/test"\n')
  let refused
  try {
    Segments.fromConfig(config)
  } catch (e) {
    refused = e
  }
  assert.ok(refused instanceof IdmintError)
  assert.ok(['store_error', 'store_timeout'].includes(refused.code), refused.code)
  assert.equal(typeof refused.retryAfterMs, 'number')
  await assert.rejects(Segments.fromConfigAsync(config), (e) => e instanceof IdmintError && e.code === refused.code)
})

test('keys declared in the config, on the default store', (t) => {
  const dir = h.tmpDir(t)
  const s = Segments.fromConfig(h.writeConfig(dir, '[segment.keys.order]\nstep = 100\nstart = 1000\n'))
  const ids = Array.from({ length: 250 }, () => s.nextId('order'))
  assert.deepEqual(ids, Array.from({ length: 250 }, (_, i) => 1000n + BigInt(i)))
  h.throwsCode(() => s.nextIds('order', -1), 'invalid_count')
  h.throwsCode(() => Segments.fromConfig(h.writeConfig(dir, '', 'other.toml'), { flors: true }), 'invalid_config')
  s.close()
})

test('the Redis store', async (t) => {
  const url = await h.redis(t)
  if (!url) return
  const dir = h.tmpDir(t)
  const prefix = `${h.unique('node')}:`
  const config = h.writeConfig(
    dir,
    `[segment]\nurl = "${url}"\nkey_prefix = "${prefix}"\n[segment.keys.invoice]\nstep = 50\nstart = 7\n`,
  )
  const s = Segments.fromConfig(config)
  const ids = [...Array.from({ length: 120 }, () => s.nextId('invoice')), ...s.nextIds('invoice', 500)]
  assert.deepEqual(ids, Array.from({ length: 620 }, (_, i) => 7n + BigInt(i)))
  s.close()
})
