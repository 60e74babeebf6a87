/** `monglock/otel`: OpenTelemetry spans and metrics from monglock's events. */
export { instrumentMonglock } from './integrations/otel';
export type { MonglockInstrumentationOptions } from './integrations/otel';
