// The type declarations napi-rs generates for the addon, and the check that
// the hand-written index.d.ts agrees with them (`node types.js check`,
// which scripts/node-binding runs after every build).
//
// - `napi build --dts native.d.ts` (the release build, `npm run build`)
//   writes native.d.ts itself.
// - build-dev.js (`npm run build:dev`) compiles with
//   NAPI_TYPE_DEF_TMP_FOLDER set, where napi-derive writes one JSON line per
//   exported item (what `napi build` reads too), and renders native.d.ts
//   from them here (`render`): a class per struct with its impl's members,
//   a function per function.
//
// The check: every class index.js exports must be declared in index.d.ts
// with every member napi generates, each with the same signature (a getter
// `get x(): T` reads as `readonly x: T`), and index.d.ts may declare no
// member of such a class that the addon lacks, except the few index.js
// adds itself (JS_MEMBERS). Every `native.<name>` index.js uses must be a
// function or class the addon exports.
'use strict'

const { readFileSync, writeFileSync } = require('node:fs')
const { join } = require('node:path')

/** Members index.d.ts declares that index.js, not the addon, defines. */
const JS_MEMBERS = {}

/** native.d.ts's text from napi-derive's JSON lines in `file`. */
function render(file) {
  const items = readFileSync(file, 'utf8')
    .split('\n')
    .filter((l) => l.trim() !== '')
    .map((l) => JSON.parse(l))
  const out = ['// Generated from napi-derive\'s type definitions by types.js (npm run build:dev); napi build --dts writes the same declarations.', '']
  const impls = new Map()
  for (const item of items) {
    if (item.kind === 'impl') impls.set(item.name, (impls.get(item.name) ?? []).concat(item.def))
  }
  for (const item of items) {
    if (item.kind === 'fn') out.push(`export declare ${item.def}`)
    else if (item.kind === 'struct') {
      const body = (impls.get(item.name) ?? []).join('\n')
      out.push(`export declare class ${item.name} {`, ...body.split('\n').map((l) => '  ' + l.trim()), '}')
    } else if (item.kind !== 'impl' && item.def) out.push(`export ${item.def}`)
  }
  return out.join('\n') + '\n'
}

/** The code of `text` without its comments. */
function stripComments(text) {
  return text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/\/\/[^\n]*/g, '')
}

/**
 * The classes of a .d.ts: name -> Map(member key -> signature), and its
 * functions' names. A member key is `static name`, `name` or
 * `constructor`; getters and readonly properties are `name: T`.
 */
function parse(text) {
  const code = stripComments(text)
  const classes = new Map()
  const classRe = /export\s+(?:declare\s+)?class\s+(\w+)(?:\s+extends\s+\w+)?\s*\{/g
  for (const m of code.matchAll(classRe)) {
    const name = m[1]
    // The body up to the brace that closes the class (members' types may
    // hold braces: `options?: { floors?: boolean }`).
    let depth = 1
    let end = m.index + m[0].length
    for (; depth > 0 && end < code.length; end++) {
      if (code[end] === '{') depth++
      else if (code[end] === '}') depth--
    }
    const body = code.slice(m.index + m[0].length, end - 1)
    const members = new Map()
    for (let line of body.split('\n')) {
      line = line.trim().replace(/\s+/g, ' ')
      if (line === '') continue
      let m
      if ((m = /^(static )?get (\w+)\(\): (.+)$/.exec(line))) {
        members.set((m[1] ?? '') + m[2], `${m[1] ?? ''}readonly ${m[2]}: ${m[3]}`)
      } else if ((m = /^(static )?(?:readonly )?(\w+): (.+)$/.exec(line))) {
        members.set((m[1] ?? '') + m[2], `${m[1] ?? ''}readonly ${m[2]}: ${m[3]}`)
      } else if ((m = /^(static )?(\w+)\((.*)$/.exec(line))) {
        members.set((m[1] ?? '') + m[2], line)
      } else {
        throw new Error(`cannot read the member \`${line}\` of class ${name}`)
      }
    }
    classes.set(name, members)
  }
  const functions = new Set([...code.matchAll(/export\s+declare\s+function\s+(\w+)/g)].map((m) => m[1]))
  return { classes, functions }
}

/** What disagrees between native.d.ts and index.d.ts, as lines. */
function disagreements(dir) {
  const native = parse(readFileSync(join(dir, 'native.d.ts'), 'utf8'))
  const declared = parse(readFileSync(join(dir, 'index.d.ts'), 'utf8'))
  const indexJs = stripComments(readFileSync(join(dir, 'index.js'), 'utf8'))
  const problems = []
  const used = new Set([...indexJs.matchAll(/\bnative\.(\w+)/g)].map((m) => m[1]))
  for (const name of used) {
    if (!native.functions.has(name) && !native.classes.has(name)) {
      problems.push(`index.js uses native.${name}, which the addon does not export`)
    }
  }
  const exported = [...indexJs.matchAll(/^\s*(\w+): native\.(\w+),?$/gm)]
    .filter(([, as, name]) => as === name && native.classes.has(name))
    .map(([, , name]) => name)
  for (const name of exported) {
    const ours = declared.classes.get(name)
    if (ours === undefined) {
      problems.push(`index.d.ts does not declare the class ${name}, which index.js exports`)
      continue
    }
    const theirs = native.classes.get(name)
    for (const [key, sig] of theirs) {
      if (!ours.has(key)) problems.push(`${name}: index.d.ts lacks \`${sig}\``)
      else if (ours.get(key) !== sig) {
        problems.push(`${name}: index.d.ts says \`${ours.get(key)}\`, napi generates \`${sig}\``)
      }
    }
    for (const [key, sig] of ours) {
      if (!theirs.has(key) && !(JS_MEMBERS[name] ?? []).includes(key)) {
        problems.push(`${name}: index.d.ts declares \`${sig}\`, which the addon lacks`)
      }
    }
  }
  return problems
}

if (require.main === module) {
  const [command, arg] = process.argv.slice(2)
  if (command === 'render') {
    writeFileSync(join(__dirname, 'native.d.ts'), render(arg))
  } else if (command === 'check') {
    const problems = disagreements(__dirname)
    if (problems.length > 0) {
      console.error('index.d.ts disagrees with the types napi generates (native.d.ts):')
      for (const p of problems) console.error('  ' + p)
      process.exit(1)
    }
    console.log('index.d.ts agrees with the types napi generates (native.d.ts)')
  } else {
    console.error('usage: node types.js render <napi-derive type-def file> | check')
    process.exit(2)
  }
}

module.exports = { render, parse, disagreements }
