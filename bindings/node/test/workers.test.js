// One worker ID, one live generator per process: a second generator whose
// IDs would overlap a live one's throws `worker_taken`, fixed or from a
// config, whatever the preset is called; closing the first frees it; a
// generator shared by its handle is one generator.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')

const { Generator } = require('..')
const h = require('./helpers')

test('a second live generator of one worker is refused', () => {
  const first = new Generator({ layout: 'twitter', worker: 1 })
  const ids = first.nextIds(1000)
  const e = h.throwsCode(() => new Generator({ layout: 'twitter', worker: 1 }), 'worker_taken')
  assert.match(e.message, /worker ID 1/)
  assert.equal(e.retryAfterMs, null)
  // The same bits by another name: leaf's one 10-bit node field with
  // Twitter's epoch; its worker 1 is twitter's datacenter 0, worker 1.
  h.throwsCode(() => new Generator({ layout: 'leaf', worker: 1 }), 'worker_taken')
  const other = new Generator({ layout: 'twitter', worker: 1, datacenter: 1 })
  const theirs = new Set(other.nextIds(1000))
  assert.ok(ids.every((id) => !theirs.has(id)))
  other.close()
  // A handle names the same generator: no second one, no refusal.
  const shared = Generator.fromHandle(first.handle)
  assert.ok(shared.nextId() > ids.at(-1))
  first.close()
  const again = new Generator({ layout: 'twitter', worker: 1 })
  assert.ok(again.nextId() > ids.at(-1))
  again.close()
})

test('one generator per request is refused, never repeated', () => {
  const handlers = [new Generator({ layout: 'twitter', worker: 2 })]
  for (let i = 0; i < 3; i++) {
    h.throwsCode(() => handlers.push(new Generator({ layout: 'twitter', worker: 2 })), 'worker_taken')
  }
  assert.equal(handlers.length, 1)
  handlers[0].close()
})

test('a generator from a config joins the check', (t) => {
  const dir = h.tmpDir(t)
  const config = h.writeConfig(dir, '[snowflake]\nlayout = "twitter"\nregistry = "file"\nworker = 6\n')
  const fixed = new Generator({ layout: 'twitter', worker: 6 })
  h.throwsCode(() => Generator.fromConfig(config), 'worker_taken')
  fixed.close()
  const leased = Generator.fromConfig(config)
  leased.nextId()
  h.throwsCode(() => new Generator({ layout: 'twitter', worker: 6 }), 'worker_taken')
  leased.close()
  new Generator({ layout: 'twitter', worker: 6 }).close()
})
