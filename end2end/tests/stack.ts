// A real etcd and the real `lockscope` binary for browser tests, on free loopback
// ports with a temporary data directory; `stop()` always cleans up.
import { expect, Page } from '@playwright/test';
import { ChildProcess, execFile, spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';

const run = promisify(execFile);
const root = resolve(__dirname, '..', '..');
const bin = process.env.LOCKSCOPE_BIN ?? join(root, 'target', 'debug', 'lockscope');
const benchBin = process.env.LOCKSCOPE_BENCH_BIN ?? join(root, 'target', 'debug', 'lockscope-bench');
export const PREFIX = '/lockscope-e2e/';
/**
 * The lock a hung demo worker takes (`--keys 1`: the demo's first lock name),
 * under a prefix of its own: the server's built-in demo fleet never takes it (a
 * built-in worker that died holding `demo/payments/settlement-eu` once kept the
 * hung worker from it past `hungLock`'s wait).
 */
export const HUNG_LOCK = 'hung/payments/settlement-eu';
/** The hung worker's expected runtime: its lock turns overdue a second after it is taken. */
const HUNG_RUNTIME_MS = 1000;

/** Signs `who` (a token name) in through the page's form, starting at `path`. */
export async function signIn(page: Page, stack: Stack, who: string, path: string): Promise<void> {
  await page.goto(`${stack.url}${path}`);
  await expect(page).toHaveURL(/\/signin\?next=/);
  await page.getByTestId('signin-token').fill(stack.tokens[who]);
  await page.getByTestId('signin-submit').click();
  await expect(page.getByTestId('whoami')).toContainText(who);
}

export async function freePort(): Promise<number> {
  return new Promise((ok, fail) => {
    const s = createServer();
    s.once('error', fail);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => ok(port));
    });
  });
}

async function until<T>(what: string, ms: number, probe: () => Promise<T | undefined>): Promise<T> {
  const deadline = Date.now() + ms;
  for (;;) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch {
      /* not yet */
    }
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

function exited(p: ChildProcess): Promise<void> {
  return new Promise((ok) => (p.exitCode !== null || p.signalCode !== null ? ok() : p.once('exit', () => ok())));
}

export class Stack {
  private etcd?: ChildProcess;
  private redis?: ChildProcess;
  /** The port of {@link startRedis}'s `redis-server`. */
  redisPort = 0;
  private server?: ChildProcess;
  private demos: ChildProcess[] = [];
  private serverLog = '';
  /** API tokens by name (`startEmbeddedWithAuth`). */
  readonly tokens: Record<string, string> = {};

  private constructor(
    private dir: string,
    private clientPort: number,
    private peerPort: number,
    readonly url: string,
    private listenPort: number,
  ) {}

  /** A real etcd and the server watching it. */
  static async start(): Promise<Stack> {
    const s = await Stack.prepare();
    await s.startEtcd();
    await s.startServer(['--etcd', s.etcdEndpoint, '--prefix', PREFIX, '--fleet', 'e2e-fleet']);
    return s;
  }

  /** A real etcd filled with `locks` locks (by `lockscope-bench fill`), then the server watching it. */
  static async startFilled(locks: number): Promise<Stack> {
    const s = await Stack.prepare();
    await s.startEtcd();
    await run(benchBin, ['fill', '--etcd', s.etcdEndpoint, '--prefix', PREFIX, '--locks', String(locks)], {
      maxBuffer: 16 * 1024 * 1024,
    });
    await s.startServer(['--etcd', s.etcdEndpoint, '--prefix', PREFIX, '--fleet', 'e2e-fleet']);
    return s;
  }

  /**
   * A real `redis-server` (no persistence) and the server watching it as the
   * fleet `cache` (`redis://`): locks are taken with {@link redisCli}.
   */
  static async startRedis(): Promise<Stack> {
    const s = await Stack.prepare();
    s.redisPort = await freePort();
    s.redis = spawn(
      'redis-server',
      ['--port', String(s.redisPort), '--bind', '127.0.0.1', '--save', '', '--appendonly', 'no', '--dir', s.dir],
      { stdio: 'ignore' },
    );
    await until('redis-server to answer', 20_000, async () =>
      (await s.redisCli('PING')).includes('PONG') ? true : undefined,
    );
    await s.startServer(['--store', `cache=redis://127.0.0.1:${s.redisPort}`]);
    return s;
  }

  /** `redis-cli ARGS…` against {@link startRedis}'s server: its output. */
  async redisCli(...args: string[]): Promise<string> {
    return (await run('redis-cli', ['-p', String(this.redisPort), ...args])).stdout;
  }

  /** The server with nothing configured: the embedded SQLite default and its demo fleet. */
  static async startEmbedded(args: string[] = []): Promise<Stack> {
    const s = await Stack.prepare();
    await s.startServer(['--embedded-db', s.embeddedDb, ...args]);
    return s;
  }

  /**
   * The embedded default with authentication: a token per `[name, role]` (made
   * by `lockscope token`) in the stack's own lockscope.toml.
   */
  static async startEmbeddedWithAuth(users: [string, string][], args: string[] = []): Promise<Stack> {
    const s = await Stack.prepare();
    let toml = '';
    for (const [name, role] of users) {
      const { stdout, stderr } = await run(bin, ['token', '--name', name, '--role', role]);
      s.tokens[name] = stdout.trim();
      toml += stderr.slice(stderr.indexOf('[[auth.tokens]]')) + '\n';
    }
    const config = join(s.dir, 'lockscope.toml');
    writeFileSync(config, toml);
    await s.startServer(['--embedded-db', s.embeddedDb, '--config', config, ...args], s.tokens[users[0][0]]);
    return s;
  }

  /** Runs `lockscope demo` on the embedded store with `args` until `stop()`. */
  spawnDemo(args: string[]): void {
    const p = spawn(bin, ['demo', '--store', `sqlite:${this.embeddedDb}`, ...args], {
      cwd: root,
      stdio: ['ignore', 'ignore', 'pipe'],
    });
    p.stderr!.on('data', (b: Buffer) => (this.serverLog += `[demo] ${b.toString()}`));
    this.demos.push(p);
  }

  /**
   * A demo worker that takes {@link HUNG_LOCK} and hangs holding it while its
   * session heartbeats (overdue, its holder alive), auto-unlocked after
   * `autoUnlockMs`.
   */
  spawnHungWorker(autoUnlockMs: number): void {
    this.spawnDemo([
      '--name-prefix', 'hung/', '--workers', '1', '--keys', '1', '--hot-keys', '1',
      '--hang-rate', '1', '--die-rate', '0', '--stall-rate', '0', '--hang-secs', '600',
      '--expected-runtime-ms', String(HUNG_RUNTIME_MS), '--auto-unlock-ms', String(autoUnlockMs),
    ]);
  }

  /**
   * The entry of `name` (on the embedded fleet) once it is held, read through
   * the API as `who`: a demo worker of its own prefix took it.
   */
  async heldLock(name: string, who?: string): Promise<any> {
    const deadline = Date.now() + 60_000;
    while (Date.now() < deadline) {
      const r = await this.api('GET', `/api/v1/fleets/embedded/locks/${encodeURIComponent(name)}`, who);
      if (r.status === 200 && r.json?.entry?.body?.session) return r.json.entry;
      await new Promise((ok) => setTimeout(ok, 100));
    }
    throw new Error(`no demo worker took ${name}:\n${this.log()}`);
  }

  /** The hung worker's acquisition of {@link HUNG_LOCK}, read through the API as `who`. */
  async hungLock(who: string): Promise<{ fence: number; session: string }> {
    const entry = await this.heldLock(HUNG_LOCK, who);
    return { fence: entry.fence, session: entry.body.session };
  }

  /** A call to the JSON API as `who` (a token name), or without credentials. */
  async api(method: string, path: string, who?: string, body?: unknown): Promise<{ status: number; json: any }> {
    const headers: Record<string, string> = {};
    if (who) headers.authorization = `Bearer ${this.tokens[who]}`;
    if (body !== undefined) headers['content-type'] = 'application/json';
    const r = await fetch(`${this.url}${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await r.text();
    let json: any = text;
    try {
      json = JSON.parse(text);
    } catch {
      /* not JSON */
    }
    return { status: r.status, json };
  }

  private static async prepare(): Promise<Stack> {
    const base = process.platform === 'linux' ? '/dev/shm' : tmpdir();
    const dir = mkdtempSync(join(base, 'lockscope-e2e-'));
    const listen = await freePort();
    return new Stack(dir, await freePort(), await freePort(), `http://127.0.0.1:${listen}`, listen);
  }

  get embeddedDb(): string {
    return join(this.dir, 'embedded.db');
  }

  get etcdEndpoint(): string {
    return `http://127.0.0.1:${this.clientPort}`;
  }

  async startEtcd(): Promise<void> {
    const client = this.etcdEndpoint;
    const peer = `http://127.0.0.1:${this.peerPort}`;
    this.etcd = spawn(
      'etcd',
      [
        '--name', 'e2e', '--data-dir', join(this.dir, 'etcd'),
        '--listen-client-urls', client, '--advertise-client-urls', client,
        '--listen-peer-urls', peer, '--initial-advertise-peer-urls', peer,
        '--initial-cluster', `e2e=${peer}`,
        '--logger', 'zap', '--log-level', 'error',
      ],
      { stdio: 'ignore' },
    );
    await until('etcd health', 20_000, async () => {
      const r = await fetch(`${client}/health`);
      return (await r.text()).includes('"health":"true"') ? true : undefined;
    });
  }

  async stopEtcd(): Promise<void> {
    const p = this.etcd;
    this.etcd = undefined;
    if (!p) return;
    p.kill('SIGKILL');
    await exited(p);
  }

  private async startServer(args: string[], probeToken?: string): Promise<void> {
    this.server = spawn(
      bin,
      [...args, '--listen', `127.0.0.1:${this.listenPort}`, '--site-root', join(root, 'target', 'site')],
      { cwd: root, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    const log = (b: Buffer) => (this.serverLog += b.toString());
    this.server.stdout!.on('data', log);
    this.server.stderr!.on('data', log);
    await until('the server to see the store', 30_000, async () => {
      const headers: Record<string, string> = probeToken ? { authorization: `Bearer ${probeToken}` } : {};
      const r = await fetch(`${this.url}/healthz`, { headers });
      const fleets: { status: { state: string } }[] = (await r.json()).fleets ?? [];
      return fleets.length > 0 && fleets.every((f) => f.status.state === 'live') ? true : undefined;
    });
  }

  /** The CLI's store arguments: `store` (a spec) or this stack's etcd. */
  private storeArgs(store?: string): string[] {
    return store ? ['--store', store] : ['--etcd', this.etcdEndpoint, '--prefix', PREFIX];
  }

  /** Takes a lock through the real CLI (the client library's acquire); returns its fence. */
  async lock(name: string, purpose: string, expectedRuntimeSecs = 60, store?: string): Promise<number> {
    return (await this.lockHeld(name, purpose, expectedRuntimeSecs, store)).fence;
  }

  /** Like `lock`, with the session the CLI registered (it stops heartbeating when the CLI exits). */
  async lockHeld(
    name: string,
    purpose: string,
    expectedRuntimeSecs = 60,
    store?: string,
  ): Promise<{ fence: number; session: string }> {
    const { stdout } = await run(bin, [
      'lock', name, ...this.storeArgs(store),
      '--purpose', purpose, '--expected-runtime', String(expectedRuntimeSecs), '--service', 'e2e',
    ]);
    const m = /fence=(\d+) session=(\S+)/.exec(stdout);
    if (!m) throw new Error(`no fence and session in: ${stdout}`);
    return { fence: Number(m[1]), session: m[2] };
  }

  /** Writes a raw value under this stack's etcd prefix, as another program could. */
  async etcdPut(key: string, value: string): Promise<void> {
    await run('etcdctl', ['--endpoints', this.etcdEndpoint, 'put', `${PREFIX}${key}`, value]);
  }

  async unlock(name: string, fence: number, store?: string): Promise<void> {
    await run(bin, ['unlock', name, '--fence', String(fence), ...this.storeArgs(store)]);
  }

  /** Runs `lockscope-bench load` against the filled etcd; returns its write log (`name t n` lines). */
  async benchLoad(locks: number, rate: number, seconds: number, hotShare: number): Promise<string> {
    const log = join(this.dir, 'writes.log');
    await run(benchBin, [
      'load', '--etcd', this.etcdEndpoint, '--prefix', PREFIX, '--locks', String(locks),
      '--rate', String(rate), '--seconds', String(seconds), '--hot-share', String(hotShare), '--log', log,
    ]);
    return readFileSync(log, 'utf8');
  }

  /** Locks whose record names `service`, counted from etcd itself (not through lockscope). */
  async countService(service: string): Promise<number> {
    const { stdout } = await run(
      'etcdctl',
      ['--endpoints', this.etcdEndpoint, 'get', '--prefix', `${PREFIX}locks/`, '--print-value-only'],
      { maxBuffer: 512 * 1024 * 1024 },
    );
    const needle = `"service":${JSON.stringify(service)}`;
    return stdout.split('\n').filter((line) => line.includes(needle)).length;
  }

  log(): string {
    return this.serverLog;
  }

  async stop(): Promise<void> {
    for (const d of this.demos.splice(0)) {
      d.kill('SIGTERM');
      await exited(d);
    }
    const server = this.server;
    this.server = undefined;
    if (server) {
      server.kill('SIGTERM');
      await exited(server);
    }
    await this.stopEtcd();
    const redis = this.redis;
    this.redis = undefined;
    if (redis) {
      redis.kill('SIGKILL');
      await exited(redis);
    }
    rmSync(this.dir, { recursive: true, force: true });
  }
}
