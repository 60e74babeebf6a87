/**
 * `monglock/hapi`: the hapi plugin (see docs/hapi.md).
 * @module monglock/hapi
 */
export { monglockPlugin, lockOf } from './integrations/hapi/plugin';
export { lockPayload } from './integrations/hapi/lock-payload';
export type { LockPayload } from './integrations/hapi/lock-payload';
export type { MonglockPluginOptions, RequestLock, RouteLock, RouteLockOptions, RouteLockSettings } from './integrations/hapi/plugin';
