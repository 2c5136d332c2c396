// In-process figures of the Node.js binding, each as a ratio against a
// baseline measured in the same run (BENCHMARKS.md, "Node.js binding").
//
//   scripts/bench-node            # release build, 5 runs per figure
//
// Rows:
// - nextId at the cap: IDs from `new Generator({ layout: 'twitter', worker:
//   1 })` (the `wait` policy) in a 1 s window, one thread, calling nextId()
//   in a loop, over the layout's cap of 4,096,000 IDs/s; and the pure-JS
//   peer `@sapphire/snowflake` (npm, pinned in package.json) in the same
//   loop, and making 3,000,000 IDs as issue 24 measured it. Every ID of
//   every run is kept and duplicates are counted, the peer's too.
// - one call while borrowing: nextId() of a generator that may borrow the
//   next ticks (`sequenceExhausted: 'borrow:1s'`), so the cap doesn't hold
//   it back, against JavaScript's own bare counter increments (a number's
//   and a bigint's, each returned from a function), per call.
// - Both nextId rows again for a generator whose handle was read, as when
//   it is shared with worker threads: it keeps no buffer (index.js), one
//   native call per ID.
// - nextIds(100_000): one call into a BigInt64Array, on a borrowing
//   generator, against filling a BigInt64Array of 100,000 from a loop.
//
// IDMINT_BENCH_RUNS sets the runs per figure, IDMINT_BENCH_SECONDS the window
// (smaller for a smoke run).
'use strict'

const os = require('node:os')
const path = require('node:path')
const { performance } = require('node:perf_hooks')

const { Generator } = require(path.join(__dirname, '..'))

const CAP = 4_096_000
const RUNS = Number(process.env.IDMINT_BENCH_RUNS || 5)
const SECONDS = Number(process.env.IDMINT_BENCH_SECONDS || 1)

function median(xs) {
  const s = [...xs].sort((a, b) => a - b)
  const m = s.length >> 1
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2
}

/** Duplicates among `ids` (sorted in place). */
function duplicates(ids) {
  ids.sort()
  let dups = 0
  for (let i = 1; i < ids.length; i++) if (ids[i] === ids[i - 1]) dups++
  return dups
}

/** IDs `next` makes in a window, one thread: { rate, ids }. */
function window(next) {
  let ids = new BigInt64Array(Math.ceil(CAP * SECONDS * 1.5))
  let n = 0
  const start = performance.now()
  const deadline = start + SECONDS * 1000
  for (;;) {
    if (n + 1000 > ids.length) {
      const more = new BigInt64Array(ids.length * 2)
      more.set(ids)
      ids = more
    }
    for (let i = 0; i < 1000; i++) ids[n++] = next()
    if (performance.now() >= deadline) break
  }
  const took = (performance.now() - start) / 1000
  return { rate: n / took, ids: ids.subarray(0, n) }
}

/**
 * `RUNS` windows, each with a new generator from `open`, which returns
 * `[next, close]`: a window's generator is closed before the next one opens
 * (one layout and worker ID make one live generator in a process).
 */
function atTheCap(name, open) {
  const rates = []
  let dups = 0
  let total = 0
  for (let r = 0; r < RUNS; r++) {
    const [next, close] = open()
    const { rate, ids } = window(next)
    close()
    rates.push(rate)
    dups += duplicates(ids)
    total += ids.length
  }
  const rate = median(rates)
  const fmt = (x) => Math.round(x).toLocaleString('en-US')
  console.log(`| nextId at the cap, ${name} | ${fmt(rate)} IDs/s | ${(rate / CAP).toFixed(2)} of the cap | ${fmt(dups)} duplicates in ${fmt(total)} |`)
}

/**
 * A datacenter and worker ID no earlier call gave (datacenter 0 is the cap's):
 * a generator that borrowed ahead leaves its node's last ID in the future,
 * and the next generator on that node would start behind it (clock_behind).
 */
let freshNodes = 0
function freshNode() {
  const i = freshNodes++
  return { datacenter: 1 + Math.floor(i / 32), worker: i % 32 }
}

/** Nanoseconds per call of `f` over `n` calls. */
function perCall(n, f) {
  let last
  const start = performance.now()
  for (let i = 0; i < n; i++) last = f()
  const took = performance.now() - start
  perCall.last = last // keeps the results alive
  return (took * 1e6) / n
}

function main() {
  const { Snowflake } = require('@sapphire/snowflake')
  const peerVersion = require('../package.json').devDependencies['@sapphire/snowflake']
  console.log(
    `Node.js ${process.version}, idmint ${require('../package.json').version}, ${RUNS} runs per figure, ` +
      `load average ${os.loadavg().map((x) => x.toFixed(2)).join(' ')} at the start`,
  )
  console.log()
  console.log('| what | figure | ratio | checked |')
  console.log('|---|---|---|---|')

  atTheCap('idmint', () => {
    const g = new Generator({ layout: 'twitter', worker: 1 })
    return [() => g.nextId(), () => g.close()]
  })
  atTheCap('idmint, shared with other threads (no buffer)', () => {
    const g = new Generator({ layout: 'twitter', worker: 4 })
    void g.handle // read: shared, as when sent to a worker thread
    return [() => g.nextId(), () => g.close()]
  })
  atTheCap(`@sapphire/snowflake ${peerVersion} (peer)`, () => {
    const s = new Snowflake(1288834974657n)
    return [() => s.generate(), () => {}]
  })

  // The measurement of the peer: 3,000,000 IDs in one process.
  const peerTimes = []
  let peerDups = 0
  for (let r = 0; r < RUNS; r++) {
    const s = new Snowflake(1288834974657n)
    const ids = new BigInt64Array(3_000_000)
    const start = performance.now()
    for (let i = 0; i < ids.length; i++) ids[i] = s.generate()
    peerTimes.push(performance.now() - start)
    peerDups += duplicates(ids)
  }
  console.log(
    `| 3,000,000 IDs, @sapphire/snowflake ${peerVersion} (peer) | ${median(peerTimes).toFixed(0)} ms | | ` +
      `${Math.round(peerDups / RUNS).toLocaleString('en-US')} duplicates per 3,000,000 (mean of ${RUNS}) |`,
  )

  const n = 2_000_000
  const idm = []
  const shared = []
  const num = []
  const big = []
  for (let r = 0; r < RUNS; r++) {
    const g = new Generator({ layout: 'twitter', ...freshNode(), sequenceExhausted: 'borrow:1s' })
    idm.push(perCall(n, () => g.nextId()))
    const h = new Generator({ layout: 'twitter', ...freshNode(), sequenceExhausted: 'borrow:1s' })
    void h.handle
    shared.push(perCall(n, () => h.nextId()))
    h.close()
    let counter = 0
    num.push(perCall(n, () => ++counter))
    let bigCounter = 0n
    big.push(perCall(n, () => (bigCounter += 1n)))
    g.close()
  }
  const [b, c] = [median(num), median(big)]
  for (const [what, a] of [['one nextId while borrowing', median(idm)], ['one nextId while borrowing, shared (no buffer)', median(shared)]]) {
    console.log(
      `| ${what} | ${a.toFixed(0)} ns | ${(a / b).toFixed(2)}× a number counter's \`++n\` (${b.toFixed(0)} ns), ` +
        `${(a / c).toFixed(2)}× a bigint counter's \`n += 1n\` (${c.toFixed(0)} ns) | |`,
    )
  }

  const batch = []
  const fill = []
  for (let r = 0; r < RUNS * 20; r++) {
    const g = new Generator({ layout: 'twitter', ...freshNode(), sequenceExhausted: 'borrow:1s' })
    let start = performance.now()
    const ids = g.nextIds(100_000)
    batch.push(performance.now() - start)
    if (ids.length !== 100_000) throw new Error('short batch')
    for (let i = 1; i < ids.length; i++) if (!(ids[i - 1] < ids[i])) throw new Error('not increasing')
    g.close()
    start = performance.now()
    const plain = new BigInt64Array(100_000)
    for (let i = 0; i < plain.length; i++) plain[i] = BigInt(i)
    fill.push(performance.now() - start)
  }
  const [x, y] = [median(batch), median(fill)]
  console.log(
    `| nextIds(100_000) into a BigInt64Array | ${(x * 1000).toFixed(0)} µs | ${(x / y).toFixed(2)}× filling a ` +
      `BigInt64Array of 100,000 in a loop (${(y * 1000).toFixed(0)} µs) | 100,000 distinct, increasing |`,
  )
}

main()
