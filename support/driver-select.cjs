/**
 * MONGLOCK_DRIVER=7: every `require('mongodb')` (and `mongodb/...`) that would load the project's
 * driver 6 (node_modules/mongodb) loads driver 7 instead (node_modules/mongodb7, installed as the
 * npm alias `mongodb7`), so that the same suite runs on both drivers. Loaded with
 * `node --require` (through NODE_OPTIONS, so child processes get it too). Packages with a driver
 * of their own (nested node_modules) keep it. Test infrastructure only.
 */
'use strict';
const Module = require('node:module');
const path = require('node:path');

const wanted = process.env.MONGLOCK_DRIVER;
if (wanted !== undefined && wanted !== '6' && wanted !== '7') {
  throw new Error(`MONGLOCK_DRIVER must be 6 or 7, got ${JSON.stringify(wanted)}`);
}
if (wanted === '7') {
  const modules = path.resolve(__dirname, '..', 'node_modules');
  const driver6 = path.join(modules, 'mongodb') + path.sep;
  const driver7 = path.join(modules, 'mongodb7');
  const resolve = Module._resolveFilename;
  Module._resolveFilename = function (request, parent, ...rest) {
    const resolved = resolve.call(this, request, parent, ...rest);
    if ((request === 'mongodb' || request.startsWith('mongodb/')) && resolved.startsWith(driver6)) {
      return resolve.call(this, driver7 + request.slice('mongodb'.length), parent, ...rest);
    }
    return resolved;
  };
}
