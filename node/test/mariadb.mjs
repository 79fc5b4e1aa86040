// A MariaDB of the test's own (Debian's package): mariadb-install-db and mariadbd in a
// temporary directory, a free loopback port, a database `dlock`, killed by pid after.
import { execFileSync, spawn } from 'node:child_process'
import { mkdtempSync, rmSync } from 'node:fs'
import { tmpdir } from 'node:os'
import { join } from 'node:path'
import { freePort } from './redis.mjs'

export async function startMariadb() {
  const dir = mkdtempSync(join(tmpdir(), 'dlock-node-mariadb-'))
  const data = join(dir, 'data')
  execFileSync('mariadb-install-db', ['--no-defaults', `--datadir=${data}`, '--user=root',
    '--auth-root-authentication-method=normal', '--skip-test-db', '--innodb-log-file-size=4M'], { stdio: 'ignore' })
  const port = await freePort()
  const child = spawn('mariadbd', ['--no-defaults', `--datadir=${data}`, `--socket=${join(dir, 'mariadb.sock')}`,
    `--pid-file=${join(dir, 'mariadb.pid')}`, `--log-error=${join(dir, 'mariadb.log')}`, `--port=${port}`,
    '--bind-address=127.0.0.1', '--user=root', '--skip-name-resolve', '--innodb-log-file-size=4M'], { stdio: 'ignore' })
  const sql = (text) =>
    execFileSync('mariadb', ['--no-defaults', '-h', '127.0.0.1', `-P${port}`, '-u', 'root', '-N', '-B', '-e', text], {
      stdio: ['ignore', 'pipe', 'ignore'],
    })
      .toString()
      .trim()
  const deadline = Date.now() + 120_000
  for (;;) {
    try {
      sql('CREATE DATABASE IF NOT EXISTS dlock')
      break
    } catch (e) {
      if (Date.now() > deadline || child.exitCode !== null) {
        child.kill('SIGKILL')
        throw new Error(`MariaDB did not start: ${e}`)
      }
      await new Promise((r) => setTimeout(r, 50))
    }
  }
  return {
    url: `mysql://root@127.0.0.1:${port}/dlock`,
    query: (text) => sql(`USE dlock; ${text}`),
    stop() {
      child.kill('SIGKILL')
      rmSync(dir, { recursive: true, force: true })
    },
  }
}
