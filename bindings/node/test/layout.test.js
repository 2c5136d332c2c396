// Layouts: the text form, decode, compose and the run-out instant, checked
// against the `idmint` binary's own decode for every preset; IDs never pass
// through a lossy number.
'use strict'

const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const path = require('node:path')
const { test } = require('node:test')

const { Generator, Layout } = require('..')
const h = require('./helpers')

// The one file of layout test vectors every binding reads (generated from
// the Rust core): each row an ID and the parts and time it decodes into.
const VECTORS = fs
  .readFileSync(path.join(__dirname, '..', '..', 'testdata', 'layout-vectors.tsv'), 'utf8')
  .split('\n')
  .filter((line) => line && !line.startsWith('#'))
  .map((line) => line.split('\t'))
// Every preset, with an epoch moved where the preset has run out already,
// and a custom layout: the layouts of the vectors.
const LAYOUTS = [...new Set(VECTORS.map((row) => row[0]))]

test('decode and compose give the layout vectors', () => {
  assert.ok(VECTORS.length >= 3 * LAYOUTS.length, `${VECTORS.length} vectors`)
  for (const [text, id, unixMs, tick, datacenter, worker, rollback, sequence] of VECTORS) {
    const layout = new Layout(text)
    const d = layout.decode(BigInt(id))
    const what = `${text} ${id}`
    assert.equal(d.id, BigInt(id), what)
    assert.equal(d.timestampMs, Number(unixMs), what)
    assert.equal(d.tick, BigInt(tick), what)
    assert.deepEqual(
      [d.datacenter, d.worker, d.rollback, d.sequence],
      [datacenter, worker, rollback, sequence].map(Number),
      what,
    )
    const parts = {
      tick: BigInt(tick),
      datacenter: Number(datacenter),
      worker: Number(worker),
      rollback: Number(rollback),
      sequence: Number(sequence),
    }
    assert.equal(layout.compose(parts), BigInt(id), what)
  }
})

function cliDecode(bin, layout, id) {
  const out = execFileSync(bin, ['decode', '--json', '--layout', layout, String(id)], { encoding: 'utf8' })
  // Integers as text: a tick or an ID may pass 2^53.
  return JSON.parse(out.replace(/"(\w+)":(\d+)/g, '"$1":"$2"'))
}

for (const text of LAYOUTS) {
  test(`decode agrees with idmint decode: ${text}`, (t) => {
    const bin = h.idmintBin(t)
    if (!bin) return
    const layout = new Layout(text)
    const worker = layout.workers === 1n ? 0 : 1 // tso has no node field
    const g = new Generator({ layout, worker })
    t.after(() => g.close())
    const ids = [g.nextId(), ...g.nextIds(3)]
    // One composed from parts of our own choosing too.
    ids.push(layout.compose({ time: new Date('2025-06-01T12:00:00Z'), worker, sequence: 2 }))
    for (const id of ids) {
      const mine = layout.decode(id)
      const cli = cliDecode(bin, text, id)
      assert.equal(String(mine.id), cli.id)
      assert.equal(String(mine.timestampMs), cli.unix_ms)
      assert.ok(mine.time instanceof Date)
      assert.equal(mine.time.getTime(), Date.parse(cli.time))
      assert.deepEqual(
        [String(mine.tick), mine.datacenter, mine.worker, mine.rollback, mine.sequence].map(String),
        [cli.tick, cli.datacenter, cli.worker, cli.rollback, cli.sequence],
      )
      assert.equal(mine.worker, worker)
    }
    g.close()
  })
}

test('compose round-trips and names bad parts', () => {
  const twitter = new Layout('twitter')
  const at = new Date('2026-01-02T03:04:05.678Z')
  const id = twitter.compose({ time: at, datacenter: 3, worker: 7, sequence: 42 })
  assert.equal(typeof id, 'bigint')
  const d = twitter.decode(id)
  assert.deepEqual([d.time, d.datacenter, d.worker, d.sequence], [at, 3, 7, 42])
  assert.equal(twitter.compose({ tick: d.tick, datacenter: 3, worker: 7, sequence: 42 }), id)
  h.throwsCode(() => twitter.compose({ tick: 1n, worker: 32 }), 'node_out_of_range')
  h.throwsCode(() => twitter.compose({ time: new Date('2001-01-01T00:00:00Z') }), 'clock_before_epoch')
  h.throwsCode(() => twitter.compose({ time: '2026-01-01' }), 'invalid_config')
  h.throwsCode(() => twitter.compose({ time: new Date('nonsense') }), 'invalid_config')
  h.throwsCode(() => twitter.compose({}), 'invalid_config')
  h.throwsCode(() => twitter.compose({ tick: 1n, time: at }), 'invalid_config')
  h.throwsCode(() => twitter.compose({ tick: 1n, workr: 1 }), 'invalid_config')
})

test('an ID is a bigint, or a number only while it is a safe integer', () => {
  const twitter = new Layout('twitter')
  const g = new Generator({ worker: 1 })
  const id = g.nextId()
  g.close()
  assert.equal(twitter.decode(id).id, id)
  assert.equal(twitter.decode(4096).sequence, 0)
  assert.equal(twitter.decode(4096).id, 4096n)
  // 2^53 + 1 can't be a number: it arrives as 2^53, a different ID.
  const lossy = h.throwsCode(() => twitter.decode(2 ** 53 + 2), 'invalid_id')
  assert.match(lossy.message, /safe integer/)
  h.throwsCode(() => twitter.decode(Number(id)), 'invalid_id')
  h.throwsCode(() => twitter.decode(-1), 'invalid_id')
  h.throwsCode(() => twitter.decode(1.5), 'invalid_id')
  h.throwsCode(() => twitter.decode(-1n), 'invalid_id')
  h.throwsCode(() => twitter.decode(1n << 64n), 'invalid_id')
  h.throwsCode(() => twitter.decode(1n << 63n), 'invalid_id')
  assert.match(h.throwsCode(() => twitter.decode('42'), 'invalid_id').message, /must be a bigint/)
})

test('run-out and the text form', () => {
  const baidu = new Layout('baidu')
  assert.deepEqual(baidu.runsOutAt, new Date('2024-11-20T13:24:16Z'))
  assert.equal(baidu.preset, 'baidu')
  assert.ok(new Layout(String(baidu)).equals(baidu))
  assert.equal(new Layout('time=39,unit=10ms,epoch=2024-01-01,worker=16,sequence=8').preset, null)
  assert.equal(new Layout('twitter').idsPerSecondPerWorker, 4_096_000)
  assert.equal(new Layout('twitter').workers, 1024n)
  h.throwsCode(() => new Generator({ layout: 'baidu', worker: 1 }).nextId(), 'layout_exhausted')
  const bad = h.throwsCode(() => new Layout('twitter,sequence=twelve'), 'invalid_layout_text')
  assert.match(bad.message, /twelve/)
})
