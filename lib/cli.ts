#!/usr/bin/env node
/** `npx monglock`: the command line (see docs/observability.md). */
import { main } from './integrations/cli/cli';

if (require.main === module) void main();
