/**
 * The majority proxy in a process of its own (so that its work does not share the measured
 * event loop): `startProxy` forks this file, which serves until its parent disconnects.
 */
import { fork, type ChildProcess } from 'node:child_process';
import { MajorityProxy } from './majority-proxy';

/** Starts a proxy in front of the server at `uri` that holds majority writes' replies `delay` ms: resolves its URI and process. */
export async function startProxy(uri: string, delay: number): Promise<{ uri: string; child: ChildProcess }> {
  const { hostname, port } = new URL(uri.replace(/^mongodb:/, 'http:'));
  const child = fork(__filename, ['--proxy', hostname, port, String(delay)], { execArgv: ['--import', 'tsx'] });
  const proxyPort = await new Promise<number>((resolve, reject) => {
    child.once('message', (message: { port: number }) => resolve(message.port));
    child.once('exit', (code) => reject(new Error(`the proxy exited (${code})`)));
  });
  return { uri: `mongodb://127.0.0.1:${proxyPort}/?directConnection=true`, child };
}

if (process.argv[2] === '--proxy') {
  const [host, port, delay] = process.argv.slice(3);
  const proxy = new MajorityProxy(host!, Number(port), Number(delay));
  void proxy.start().then(() => process.send!({ port: proxy.port }));
  process.on('disconnect', () => void proxy.stop().then(() => process.exit(0)));
}
