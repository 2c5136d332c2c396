// The buffer index.js keeps for a generator one thread alone issues from:
// IDs still strictly increase (also around nextIds), are fresh (made within
// a millisecond of the call), stop at close, and a generator shared with
// another thread stops buffering, so a later call anywhere gets a larger ID.
'use strict'

const assert = require('node:assert/strict')
const { test } = require('node:test')
const path = require('node:path')
const { setTimeout: sleep } = require('node:timers/promises')
const { Worker } = require('node:worker_threads')

const { Generator, Layout } = require('..')
const h = require('./helpers')

const twitter = new Layout('twitter')

test('fast calls: strictly increasing through nextIds, no ID twice', () => {
  const g = new Generator({ layout: 'twitter', worker: 3 })
  const ids = []
  for (let round = 0; round < 200; round++) {
    for (let i = 0; i < 500; i++) ids.push(g.nextId())
    ids.push(...g.nextIds(1 + (round % 7)))
  }
  assert.ok(h.increasing(ids), 'a nextIds batch came below a buffered ID')
  // Fast calls take IDs a few at a time; dropped leftovers leave gaps, and
  // the gaps stay small: most IDs follow their predecessor directly.
  let adjacent = 0
  for (let i = 1; i < ids.length; i++) if (ids[i] === ids[i - 1] + 1n) adjacent++
  assert.ok(adjacent > ids.length * 0.5, `${adjacent} of ${ids.length} adjacent`)
  g.close()
})

test('slow calls get fresh IDs: made within a couple of milliseconds', async () => {
  const g = new Generator({ layout: 'twitter', worker: 3 })
  for (let i = 0; i < 10_000; i++) g.nextId() // grow the buffer
  for (let i = 0; i < 20; i++) {
    await sleep(3)
    const before = Date.now()
    const id = g.nextId()
    const made = twitter.decode(id).time.getTime()
    assert.ok(made >= before - 2, `an ID made at ${made} handed out at ${before}`)
  }
  g.close()
})

test('close drops the buffer: the next call throws closed', () => {
  const g = new Generator({ layout: 'twitter', worker: 3 })
  for (let i = 0; i < 10_000; i++) g.nextId()
  g.close()
  h.throwsCode(() => g.nextId(), 'closed')
})

/** A worker thread that, each time it is woken with a handle, answers with
 * the first ID of `Generator.fromHandle(handle)`, synchronously: the main
 * thread waits with `Atomics.wait`, so the round trip takes microseconds,
 * well inside the millisecond a buffered ID may live. */
function helperThread() {
  const shared = new SharedArrayBuffer(16)
  const flag = new Int32Array(shared, 0, 2) // [turn, handle]
  const answer = new BigInt64Array(shared, 8, 1)
  const code = `
    const { workerData } = require('node:worker_threads')
    const { Generator } = require(${JSON.stringify(path.join(__dirname, '..'))})
    const flag = new Int32Array(workerData, 0, 2)
    const answer = new BigInt64Array(workerData, 8, 1)
    for (;;) {
      Atomics.wait(flag, 0, 0)
      if (flag[1] < 0) break
      answer[0] = Generator.fromHandle(flag[1]).nextId()
      Atomics.store(flag, 0, 0)
      Atomics.notify(flag, 0)
    }`
  const worker = new Worker(code, { eval: true, workerData: shared })
  return {
    ask(handle) {
      flag[1] = handle
      Atomics.store(flag, 0, 1)
      Atomics.notify(flag, 0)
      Atomics.wait(flag, 0, 1)
      return answer[0]
    },
    stop() {
      flag[1] = -1
      Atomics.store(flag, 0, 1)
      Atomics.notify(flag, 0)
      return worker.terminate()
    },
  }
}

test('sharing stops the buffer: a later call in any thread gets a larger ID', async () => {
  const other = helperThread()
  other.ask(new Generator({ worker: 1 }).handle) // the thread has loaded idmint
  const g = new Generator({ layout: 'twitter', worker: 3 })
  try {
    for (let round = 0; round < 20; round++) {
      let before = 0n
      for (let i = 0; i < 10_000; i++) before = g.nextId() // buffering now
      const theirs = other.ask(g.handle) // shared from here on
      const mine = g.nextId()
      assert.ok(before < theirs, 'the other thread got an ID below one issued before')
      assert.ok(theirs < mine, `round ${round}: ${mine} came after ${theirs}`)
    }
  } finally {
    await other.stop()
  }
  assert.equal(Generator.fromHandle(g.handle).fromHandleMade, true)
  assert.equal(g.fromHandleMade, false)
  g.close()
})
