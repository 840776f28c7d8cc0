import { posix, win32 } from 'node:path'

/**
 * Where the CLI looks for a backend's driver that is not installed beside fencelock (see core/drivers.ts
 * for when that happens): the project in the current folder, then the global node_modules folders of npm's
 * prefix (npx and npm exec pass it on as `npm_config_global_prefix`; a user may set `npm_config_prefix`),
 * of the node running us (`<prefix>/lib/node_modules`, `<prefix>\node_modules` on Windows: what
 * `npm root -g` prints, without its second of start-up), and those on NODE_PATH.
 */
export function driverSearchPaths(
  cwd: string = process.cwd(),
  execPath: string = process.execPath,
  env: NodeJS.ProcessEnv = process.env,
  platform: NodeJS.Platform = process.platform,
): string[] {
  const path = platform === 'win32' ? win32 : posix
  const globalFolder = (prefix: string) =>
    platform === 'win32' ? path.join(prefix, 'node_modules') : path.join(prefix, 'lib', 'node_modules')
  // node is <prefix>/bin/node on POSIX, <prefix>\node.exe on Windows.
  const nodePrefix = platform === 'win32' ? path.dirname(execPath) : path.dirname(path.dirname(execPath))
  const folders = [
    cwd,
    ...[env.npm_config_global_prefix, env.npm_config_prefix, env.NPM_CONFIG_PREFIX]
      .filter((prefix) => prefix !== undefined && prefix !== '')
      .map((prefix) => globalFolder(prefix as string)),
    globalFolder(nodePrefix),
    ...(env.NODE_PATH ?? '').split(path.delimiter).filter((p) => p !== ''),
  ]
  return [...new Set(folders.map((p) => path.resolve(cwd, p)))]
}
