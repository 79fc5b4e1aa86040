// tsc --strict accepts the typed example, and its downlevelled `await using` works on Node 20.
import { test, before, after } from 'node:test'
import assert from 'node:assert/strict'
import { spawnSync } from 'node:child_process'
import { dirname, join } from 'node:path'
import { fileURLToPath } from 'node:url'
import { startRedis } from './redis.mjs'

const project = dirname(dirname(fileURLToPath(import.meta.url)))
let redis
before(async () => {
  redis = await startRedis()
})
after(() => redis.stop())

test('tsc --strict, then the compiled example runs with await using', () => {
  const tsc = spawnSync(
    process.execPath,
    [
      join(project, 'node_modules', 'typescript', 'bin', 'tsc'),
      '--strict', '--target', 'es2022', '--module', 'nodenext', '--moduleResolution', 'nodenext',
      '--lib', 'es2022,esnext.disposable', '--types', 'node', '--outDir', join(project, 'build'), join(project, 'test', 'typed.ts'),
    ],
    { cwd: project, encoding: 'utf8' },
  )
  assert.equal(tsc.status, 0, tsc.stdout + tsc.stderr)
  const run = spawnSync(process.execPath, [join(project, 'build', 'typed.js'), redis.url], { encoding: 'utf8', timeout: 20_000 })
  assert.equal(run.status, 0, run.stderr)
  assert.match(run.stdout.trim(), /^ok \d+$/)
})
