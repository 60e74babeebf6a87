/**
 * `monglock/otel`: OpenTelemetry spans and metrics from monglock's events (see docs/observability.md).
 * @module monglock/otel
 */
export { instrumentMonglock } from './integrations/otel';
export type { MonglockInstrumentationOptions } from './integrations/otel';
