/**
 * `monglock/hapi`: the hapi plugin (see docs/hapi.md).
 * @module monglock/hapi
 */
export { monglockPlugin, lockOf } from './integrations/hapi/plugin';
export type { MonglockPluginOptions, RequestLock, RouteLock, RouteLockOptions, RouteLockSettings } from './integrations/hapi/plugin';
