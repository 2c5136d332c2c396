// Public IDs: round trips in every text form, and agreement with `idmint
// obfuscate` for the same key.
'use strict'

const assert = require('node:assert/strict')
const { execFileSync } = require('node:child_process')
const { test } = require('node:test')

const { Generator, PublicIds } = require('..')
const h = require('./helpers')

const KEY = '000102030405060708090a0b0c0d0e0f'

for (const format of ['dec', 'base32', 'sqids']) {
  test(`round trips: ${format}`, (t) => {
    const p = new PublicIds(KEY, { format })
    const g = new Generator({ worker: 3 })
    t.after(() => g.close())
    for (const id of g.nextIds(1000)) {
      const pub = p.obfuscate(id)
      assert.equal(typeof pub, 'bigint')
      assert.ok(pub !== id && pub < 1n << 63n)
      assert.equal(p.reveal(pub), id)
      const text = p.obfuscateText(id)
      assert.equal(p.decode(text), pub)
      assert.equal(p.encode(pub), text)
      assert.equal(p.revealText(text), id)
    }
    assert.equal(p.format, format)
    assert.equal(p.bits, 63)
  })
}

test('agrees with idmint obfuscate', (t) => {
  const bin = h.idmintBin(t)
  if (!bin) return
  const p = new PublicIds(KEY, { format: 'base32' })
  const ids = [1n, 42n, 1_050_118_621_198_921_728n, (1n << 63n) - 1n]
  const out = execFileSync(bin, ['obfuscate', '--format', 'base32', ...ids.map(String)], {
    encoding: 'utf8',
    env: { IDMINT_OBFUSCATION_KEY: KEY, PATH: '/usr/bin:/bin' },
  })
    .trim()
    .split(/\s+/)
  assert.deepEqual(out, ids.map((id) => p.obfuscateText(id)))
})

test('key rotation and errors', (t) => {
  const ring = `0:${KEY} 1:8d8f7cbb4e0bd3ab4dd7a5a4b3c2d1e0`
  const old = new PublicIds(`0:${KEY}`, { bits: 64, keyIdBits: 1 })
  const rotated = new PublicIds(ring, { bits: 64, keyIdBits: 1 })
  assert.equal(rotated.reveal(old.obfuscate(12345)), 12345n)
  assert.equal(rotated.reveal(rotated.obfuscate(12345n)), 12345n)
  h.throwsCode(() => old.reveal(rotated.obfuscate(12345)), 'unknown_key_id')
  // A malformed key: `invalid_key`, as docs/api.md says of the library.
  const bad = h.throwsCode(() => new PublicIds('abc'), 'invalid_key')
  for (const ring of ['zz', '0:zz', `x:${KEY}`, '']) h.throwsCode(() => new PublicIds(ring), 'invalid_key')
  h.throwsCode(() => new PublicIds(KEY, { format: 'hex' }), 'invalid_obfuscator')
  assert.ok(!bad.message.includes('abc'), 'a key never shows in errors')
  h.throwsCode(() => new PublicIds(KEY, { format: 'sqids' }).decode('not!sqids'), 'invalid_public_id')
  h.throwsCode(() => new PublicIds(KEY, { fromat: 'sqids' }), 'invalid_config')
  h.throwsCode(() => new PublicIds(KEY).obfuscate(2 ** 60), 'invalid_id')
  const dir = h.tmpDir(t)
  const config = h.writeConfig(dir, `[obfuscation]\nkey = "${KEY}"\nformat = "sqids"\n`)
  assert.equal(PublicIds.fromConfig(config).obfuscateText(77), new PublicIds(KEY, { format: 'sqids' }).obfuscateText(77))
})
