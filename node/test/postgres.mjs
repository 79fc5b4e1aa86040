// A PostgreSQL of the test's own (Debian's package): initdb and pg_ctl in a temporary
// directory, a free loopback port, stopped after. As root its tools run as the `postgres`
// user (PostgreSQL refuses to run as root).
import { execFileSync } from 'node:child_process'
import { chownSync, mkdtempSync, readdirSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './redis.mjs'

export async function startPostgres() {
  const versions = readdirSync('/usr/lib/postgresql').sort()
  const bin = join('/usr/lib/postgresql', versions[versions.length - 1], 'bin')
  const dir = mkdtempSync(join(tmpdir(), 'dlock-node-pg-'))
  const root = process.getuid() === 0
  if (root) chownSync(dir, Number(execFileSync('id', ['-u', 'postgres']).toString()), 0)
  const tool = (name, args) =>
    execFileSync(root ? 'runuser' : join(bin, name), root ? ['-u', 'postgres', '--', join(bin, name), ...args] : args, {
      stdio: 'ignore',
    })
  const data = join(dir, 'data')
  tool('initdb', ['-D', data, '-U', 'postgres', '--auth=trust', '--no-sync', '--no-instructions'])
  const port = await freePort()
  tool('pg_ctl', ['-D', data, '-l', join(dir, 'postgres.log'), '-w', '-t', '120', '-o',
    `-p ${port} -k ${dir} -c listen_addresses=127.0.0.1 -c fsync=off`, 'start'])
  return {
    url: `postgres://postgres@127.0.0.1:${port}/postgres`,
    query: (sql) =>
      execFileSync(join(bin, 'psql'), ['-h', '127.0.0.1', '-p', String(port), '-U', 'postgres', '-At', '-c', sql])
        .toString()
        .trim(),
    stop() {
      tool('pg_ctl', ['-D', data, '-m', 'immediate', '-w', 'stop'])
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
