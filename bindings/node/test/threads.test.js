// worker_threads: one generator shared by handle between the main thread
// and four worker threads issuing at once, no ID twice; closing it in one
// thread closes it for all.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')
const path = require('node:path')
const { setImmediate } = require('node:timers/promises')
const { Worker } = require('node:worker_threads')

const { ErrorCode, Generator, Layout, Segments } = require('..')
const h = require('./helpers')

const THREADS = 4
const SINGLES = 50_000
const BATCH = 20_000

function runThread(workerData) {
  return new Promise((resolve, reject) => {
    const w = new Worker(path.join(__dirname, 'fixtures', 'thread-worker.js'), { workerData })
    w.once('message', resolve)
    w.once('error', reject)
    w.once('exit', (code) => code !== 0 && reject(new Error(`thread exited with ${code}`)))
  })
}

async function sharedByThreads(g) {
  const threads = Array.from({ length: THREADS }, () =>
    runThread({ handle: g.handle, singles: SINGLES, batch: BATCH }),
  )
  // The main thread issues meanwhile, in slices, until every thread answered.
  let done = false
  const all = Promise.all(threads).finally(() => {
    done = true
  })
  const mine = []
  while (!done) {
    mine.push(...g.nextIds(1000))
    await setImmediate()
  }
  const answers = await all
  const seen = new Set(mine)
  for (const a of answers) {
    assert.equal(a.handle, g.handle)
    assert.equal(a.worker, g.worker, 'the same generator, so the same worker ID')
    assert.equal(a.ids.length, SINGLES + BATCH)
    for (const id of a.ids) seen.add(id)
  }
  assert.ok(mine.length > 0)
  assert.equal(seen.size, mine.length + THREADS * (SINGLES + BATCH), 'an ID came twice')
}

test('worker threads share one fixed generator by its handle', async () => {
  const g = new Generator({ layout: 'twitter', worker: 5 })
  await sharedByThreads(g)
  assert.equal(new Layout('twitter').decode(g.nextId()).worker, 5)
  // Closed from one object: closed for every thread's object.
  const other = Generator.fromHandle(g.handle)
  g.close()
  h.throwsCode(() => other.nextId(), ErrorCode.CLOSED)
  h.throwsCode(() => Generator.fromHandle(g.handle), 'closed')
  h.throwsCode(() => Generator.fromHandle(1.5), 'closed')
})

test('worker threads share one leased generator (one lease, one worker ID)', async (t) => {
  const dir = h.tmpDir(t)
  const g = Generator.fromConfig(h.writeConfig(dir, '[snowflake]\nregistry = "file"\n'))
  t.after(() => g.close())
  await sharedByThreads(g)
  assert.equal(g.status().lease, 'held')
})

test('segment allocators are shared by handle too', (t) => {
  const dir = h.tmpDir(t)
  const s = Segments.fromConfig(h.writeConfig(dir, '[segment.keys.order]\nstep = 10\nstart = 1\n'))
  const other = Segments.fromHandle(s.handle)
  assert.deepEqual([s.nextId('order'), other.nextId('order'), s.nextId('order')], [1n, 2n, 3n])
  other.close()
  h.throwsCode(() => s.nextId('order'), 'closed')
})
