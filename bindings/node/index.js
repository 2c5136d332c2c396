// idmint in your Node.js process: fleet-safe snowflake IDs (a worker ID
// leased from a registry, the high-water mark persisted ahead, clock
// policies, a fence when the lease is lost), segment keys and public IDs, on
// the same Rust core as `idmint serve`.
//
//   const { Generator, Layout } = require('idmint')
//   const g = new Generator({ layout: 'twitter', worker: 7 })
//   const id = g.nextId()                       // a bigint
//   console.log(new Layout('twitter').decode(id).time)
//
// The addon (idmint.node, built by `npm run build`) does the work; this file
// adds the error class and the close at exit. See README.md.
'use strict'

const { isMainThread } = require('node:worker_threads')
const native = require('./idmint.node')

/**
 * An idmint failure: `.code` is idmint's stable error code (`clock_behind`,
 * `mark_reached`, `key_not_found`, `unavailable`, `closed`, ...), `.message`
 * what went wrong, `.retryAfterMs` how long to wait before a retry may
 * succeed (or null when retrying can't help).
 */
class IdmintError extends Error {
  constructor(code, message, retryAfterMs) {
    super(`${code}: ${message}`)
    this.name = 'IdmintError'
    this.code = code
    this.retryAfterMs = retryAfterMs ?? null
  }
}

// The addon throws every failure as this class, made in the calling
// thread's own environment (each worker thread loads this file anew).
native.setErrorClass(IdmintError)

// Leases are released when the process exits normally (the event loop ran
// out, or process.exit()): from the main thread only, whose exit is the
// process's; a worker thread's exit leaves the generators it shares open.
// A process killed by a signal leaves its lease to run out.
if (isMainThread) {
  process.once('exit', () => native.closeAll())
}

// The hot path: `nextId` through a plain function on the generator's handle
// (kept on the object after the first call), not a method of the addon's
// class, whose call glue in napi-rs costs several times the ID itself.
const HANDLE = Symbol('idmint.handle')
const nextIdOf = native.generatorNextId
Object.defineProperty(native.Generator.prototype, 'nextId', {
  value: function nextId() {
    return nextIdOf(this[HANDLE] ?? (this[HANDLE] = this.handle))
  },
  writable: true,
  configurable: true,
})

module.exports = {
  Generator: native.Generator,
  Layout: native.Layout,
  Segments: native.Segments,
  PublicIds: native.PublicIds,
  IdmintError,
}
