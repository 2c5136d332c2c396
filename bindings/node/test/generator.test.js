// Generators: fixed, leased from the file registry, PostgreSQL (idmint's
// table and uid-generator's WORKER_NODE) and etcd, a real `cluster` of
// processes on one registry, a lease lost with its registry, and the
// configs an embedded process can't use.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')
const { setTimeout: sleep } = require('node:timers/promises')

const { Generator, IdmintError, Layout } = require('..')
const h = require('./helpers')

const { increasing, throwsCode } = h

test('a fixed generator: bigint IDs, BigInt64Array batches, typed errors', () => {
  const g = new Generator({ layout: 'twitter', worker: 7 })
  const a = g.nextId()
  const batch = g.nextIds(10_000)
  assert.equal(typeof a, 'bigint')
  assert.ok(batch instanceof BigInt64Array)
  assert.equal(batch.length, 10_000)
  assert.ok(a < batch[0] && increasing(batch))
  assert.equal(new Layout('twitter').decode(a).worker, 7)
  assert.equal(g.worker, 7)
  assert.equal(g.status().registry, 'fixed')
  assert.equal(g.nextIds(3n).length, 3, 'a bigint count')
  const e = throwsCode(() => g.nextIds(0), 'invalid_count')
  assert.equal(e.retryAfterMs, null)
  assert.equal(e.name, 'IdmintError')
  throwsCode(() => g.nextIds(2.5), 'invalid_count')
  throwsCode(() => new Generator({ layout: 'twitter', worker: 32 }), 'node_out_of_range')
  throwsCode(() => new Generator({ worker: -1 }), 'node_out_of_range')
  throwsCode(() => new Generator({ worker: 1.5 }), 'node_out_of_range')
  throwsCode(() => new Generator({ worker: 1, clockBehind: 'sometimes' }), 'invalid_text')
  const typo = throwsCode(() => new Generator({ workr: 1 }), 'invalid_config')
  assert.match(typo.message, /workr/)
  const s = new Generator({ layout: new Layout('sonyflake'), worker: 9, sequenceExhausted: 'wait' })
  assert.equal(new Layout('sonyflake').decode(s.nextId()).worker, 9)
  s.close()
  throwsCode(() => s.nextId(), 'closed')
  throwsCode(() => s.nextIds(5), 'closed')
  s.close() // idempotent
  const d = new Generator()
  assert.equal(d.layout.preset, 'twitter', 'twitter and worker 0 by default')
  assert.equal(d.worker, 0)
  d.close()
  g.close()
})

test('from a config with the file registry', async (t) => {
  const dir = h.tmpDir(t)
  const config = h.writeConfig(dir, '[snowflake]\nlayout = "twitter"\nregistry = "file"\n')
  const g = Generator.fromConfig(config)
  const ids = [...Array.from({ length: 1000 }, () => g.nextId()), ...g.nextIds(5000)]
  assert.ok(increasing(ids))
  assert.equal(g.status().lease, 'held')
  // The data directory is this generator's alone while it is open.
  throwsCode(() => Generator.fromConfig(config), 'registry_config')
  g.close()
  const again = await Generator.fromConfigAsync(config)
  assert.ok(again.nextId() > ids.at(-1), 'the mark persisted ahead: above every earlier ID')
  again.close()
  throwsCode(() => again.nextIds(2), 'closed')
  await assert.rejects(Generator.fromConfigAsync(`${dir}/missing.toml`), (e) => e instanceof IdmintError && e.code === 'invalid_config')
})

test('leased on PostgreSQL: a cluster of 3 processes, no worker shared, no ID twice', async (t) => {
  const url = await h.postgres(t)
  if (!url) return
  const dir = h.tmpDir(t)
  const config = h.writeConfig(
    dir,
    `[snowflake]\nregistry = "sql"\n[snowflake.sql]\nurl = "${url}"\ncluster = "${h.unique('node')}"\n`,
  )
  await h.clusterOn(config, 3)
  const g = Generator.fromConfig(config)
  assert.equal(g.status().registry, 'sql')
  g.close()
})

test("leased on PostgreSQL in uid-generator's WORKER_NODE table", async (t) => {
  const url = await h.postgres(t)
  if (!url) return
  const table = h.unique('worker_node')
  h.psql(
    `CREATE TABLE ${table} (ID BIGSERIAL NOT NULL, HOST_NAME VARCHAR(64) NOT NULL, ` +
      'PORT VARCHAR(64) NOT NULL, TYPE INT NOT NULL, LAUNCH_DATE DATE NOT NULL, ' +
      'MODIFIED TIMESTAMP NOT NULL, CREATED TIMESTAMP NOT NULL, PRIMARY KEY(ID))',
  )
  t.after(() => h.psql(`DROP TABLE ${table}`))
  const dir = h.tmpDir(t)
  const config = h.writeConfig(
    dir,
    '[snowflake]\nlayout = "baidu,epoch=2024-01-01"\nregistry = "sql"\n' +
      `[snowflake.sql]\nurl = "${url}"\nmode = "uid-generator"\ntable = "${table}"\n`,
  )
  await h.clusterOn(config, 2)
})

test('leased on etcd: a cluster of 2 processes, no worker shared, no ID twice', async (t) => {
  const endpoint = h.etcd(t)
  if (!endpoint) return
  const dir = h.tmpDir(t)
  const config = h.writeConfig(
    dir,
    `[snowflake]\nregistry = "etcd"\n[snowflake.etcd]\nendpoints = ["${endpoint}"]\ncluster = "${h.unique('node')}"\n`,
  )
  await h.clusterOn(config, 2)
})

test('a lost lease throws the typed error and issues nothing', async (t) => {
  const dir = h.tmpDir(t)
  const redis = h.privateRedis(t, dir)
  if (!redis) return
  const config = h.writeConfig(
    dir,
    '[snowflake]\nregistry = "redis"\nwindow = "1s"\n' +
      `[snowflake.redis]\nurl = "${redis.address}"\nlease_ttl = "2s"\n`,
  )
  const g = Generator.fromConfig(config)
  t.after(() => g.close())
  g.nextId()
  redis.stop()
  const stopped = Date.now()
  let refused
  for (;;) {
    try {
      g.nextId()
    } catch (e) {
      refused = e
      break
    }
    assert.ok(Date.now() - stopped < 5000, 'still issuing 5 s after the registry stopped (lease 2 s)')
    await sleep(20)
  }
  assert.ok(refused instanceof IdmintError)
  assert.equal(refused.code, 'mark_reached')
  assert.equal(refused.retryAfterMs, 1000)
  await sleep(2000) // past the lease's end: nothing, by any call
  let last
  for (let i = 0; i < 20; i++) {
    throwsCode(() => g.nextId(), 'mark_reached')
    last = throwsCode(() => g.nextIds(100), 'mark_reached')
  }
  assert.match(last.message, /expired|lost/)
  assert.ok(['expired', 'lost'].includes(g.status().lease))
})

test('configs an embedded process cannot use are refused', (t) => {
  const dir = h.tmpDir(t)
  const forever = h.writeConfig(dir, '[snowflake]\nregistry = "zookeeper"\n[snowflake.zookeeper]\nmode = "forever"\n')
  assert.match(throwsCode(() => Generator.fromConfig(forever), 'invalid_config').message, /ephemeral/)
  const typo = h.writeConfig(dir, '[snowflake]\nregistery = "file"\n', 'typo.toml')
  assert.match(throwsCode(() => Generator.fromConfig(typo), 'invalid_config').message, /registery/)
  const expired = h.writeConfig(dir, '[snowflake]\nlayout = "baidu"\n', 'baidu.toml')
  assert.match(throwsCode(() => Generator.fromConfig(expired), 'invalid_config').message, /ran out/)
})
