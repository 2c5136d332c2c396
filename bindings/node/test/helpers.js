// What the binding's tests share: config files, the real services, the
// `idmint` binary to compare with, private services a test may stop, and a
// real `cluster` of processes on one config.
//
// Services (as the Rust and Python tests use them): PostgreSQL on
// 127.0.0.1:5432, MariaDB on 127.0.0.1:3306, Redis on 127.0.0.1:6379, etcd
// at IDMINT_TEST_ETCD_ENDPOINT (scripts/test starts it). A missing service
// fails the test under CI=true and skips it elsewhere, loudly.
'use strict'

const assert = require('node:assert/strict')
const cluster = require('node:cluster')
const { execFileSync } = require('node:child_process')
const fs = require('node:fs')
const net = require('node:net')
const os = require('node:os')
const path = require('node:path')

const { IdmintError } = require('..')

const REPO = path.resolve(__dirname, '..', '..', '..')
const POSTGRES_URL = 'postgres://postgres@127.0.0.1:5432/test'
const MYSQL_URL = 'mysql://root@127.0.0.1:3306/test'
const REDIS_URL = 'redis://127.0.0.1:6379/'

/** Runs `f`, which must throw an IdmintError with `code`; returns it. */
function throwsCode(f, code) {
  let caught
  assert.throws(f, (e) => {
    caught = e
    return e instanceof IdmintError && e instanceof Error && e.code === code
  })
  return caught
}

/** Whether `ids` strictly increase. */
function increasing(ids) {
  for (let i = 1; i < ids.length; i++) {
    if (!(ids[i - 1] < ids[i])) return false
  }
  return true
}

/** Fails under CI=true when the service is missing, else skips `t`. */
function need(t, name, reachable) {
  if (reachable) return true
  if (process.env.CI === 'true') {
    throw new Error(`${name} is not reachable and CI=true: start it before the tests`)
  }
  t.skip(`SKIPPED: ${name} is not reachable`)
  console.error(`SKIPPED: ${name} is not reachable`)
  return false
}

/** Whether something accepts connections on 127.0.0.1:`port`. */
function listens(port) {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port, timeout: 1000 })
    const done = (ok) => {
      socket.destroy()
      resolve(ok)
    }
    socket.once('connect', () => done(true))
    socket.once('error', () => done(false))
    socket.once('timeout', () => done(false))
  })
}

async function postgres(t) {
  return need(t, 'PostgreSQL on 127.0.0.1:5432', await listens(5432)) && POSTGRES_URL
}

async function mariadb(t) {
  return need(t, 'MariaDB on 127.0.0.1:3306', await listens(3306)) && MYSQL_URL
}

async function redis(t) {
  return need(t, 'Redis on 127.0.0.1:6379', await listens(6379)) && REDIS_URL
}

function etcd(t) {
  const endpoint = process.env.IDMINT_TEST_ETCD_ENDPOINT
  return need(t, 'etcd (IDMINT_TEST_ETCD_ENDPOINT)', endpoint) && endpoint
}

/** A name no other run uses. */
function unique(prefix) {
  return `${prefix}_${process.pid}_${process.hrtime.bigint() % 1_000_000_000n}`
}

/** A fresh directory, removed when `t` ends. */
function tmpDir(t) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'idmint-node-'))
  t.after(() => fs.rmSync(dir, { recursive: true, force: true }))
  return dir
}

/**
 * Writes a config file in `dir` (`[server] data_dir` there, then `body`)
 * and returns its path.
 */
function writeConfig(dir, body, name = 'idmint.toml') {
  const file = path.join(dir, name)
  fs.writeFileSync(file, `[server]\ndata_dir = "${path.join(dir, 'data')}"\n\n${body}\n`)
  return file
}

/** Runs SQL on MariaDB's `test` database with the mysql client. */
function mysql(sql) {
  execFileSync('mysql', ['-h', '127.0.0.1', '-P', '3306', '-u', 'root', 'test', '-e', sql])
}

/** Runs SQL on PostgreSQL's `test` database with psql. */
function psql(sql) {
  execFileSync('psql', ['-h', '127.0.0.1', '-U', 'postgres', '-d', 'test', '-v', 'ON_ERROR_STOP=1', '-c', sql])
}

/**
 * A throwaway redis-server (scripts/redis) the test may stop: `{ address,
 * stop() }`, stopped when `t` ends. Null when skipped.
 */
function privateRedis(t, dir) {
  const script = path.join(REPO, 'scripts', 'redis')
  let available = true
  try {
    execFileSync(script, ['check', dir], { stdio: 'ignore' })
  } catch {
    available = false
  }
  if (!need(t, 'redis-server (scripts/redis check)', available)) return null
  const d = path.join(dir, 'redis')
  const address = execFileSync(script, ['start', d], { encoding: 'utf8' }).trim()
  const stop = () => execFileSync(script, ['stop', d], { stdio: 'ignore' })
  t.after(() => {
    try {
      stop()
    } catch {
      // stopped already
    }
  })
  return { address, stop }
}

/**
 * The `idmint` binary to compare with: IDMINT_BIN, else the workspace's
 * debug build (scripts/test builds it with `cargo test --workspace`), else
 * one on PATH. Null when skipped.
 */
function idmintBin(t) {
  const candidates = [process.env.IDMINT_BIN, path.join(REPO, 'target', 'debug', 'idmint')]
  for (const dir of (process.env.PATH || '').split(path.delimiter)) {
    candidates.push(path.join(dir, 'idmint'))
  }
  const found = candidates.find((c) => c && fs.existsSync(c) && fs.statSync(c).isFile())
  return need(t, 'the idmint binary (cargo build -p idmint)', found) ? found : null
}

/**
 * A real `cluster`: forks `n` processes running test/fixtures/cluster-worker.js,
 * each of which makes `Generator.fromConfig(config)` and sends back its
 * worker ID and `perWorker` IDs (a BigInt64Array). Every process holds its
 * lease until all have answered. Asserts that no two share a worker ID and no
 * ID comes twice; returns the worker IDs.
 */
async function clusterOn(config, n, perWorker = 20_000) {
  cluster.setupPrimary({
    exec: path.join(__dirname, 'fixtures', 'cluster-worker.js'),
    args: [config, String(perWorker)],
    serialization: 'advanced',
    silent: false,
  })
  const workers = Array.from({ length: n }, () => cluster.fork())
  const answers = await Promise.all(
    workers.map(
      (w) =>
        new Promise((resolve, reject) => {
          w.once('message', resolve)
          w.once('exit', (code) => reject(new Error(`cluster worker exited with ${code} before answering`)))
        }),
    ),
  )
  const exits = workers.map((w) => new Promise((resolve) => w.once('exit', (code) => resolve(code))))
  for (const w of workers) w.send('close')
  assert.deepEqual(await Promise.all(exits), workers.map(() => 0))
  for (const a of answers) {
    assert.equal(a.error, undefined, a.error)
  }
  const workerIds = answers.map((a) => a.worker)
  assert.equal(new Set(workerIds).size, n, `worker IDs shared: ${workerIds}`)
  const seen = new Set()
  for (const a of answers) {
    assert.equal(a.ids.length, perWorker)
    for (const id of a.ids) seen.add(id)
  }
  assert.equal(seen.size, n * perWorker, 'an ID came twice')
  return workerIds
}

module.exports = {
  REPO,
  clusterOn,
  increasing,
  throwsCode,
  etcd,
  idmintBin,
  mariadb,
  mysql,
  need,
  postgres,
  privateRedis,
  psql,
  redis,
  tmpDir,
  unique,
  writeConfig,
}
