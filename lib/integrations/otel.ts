import { subscribe, tracingChannel, unsubscribe } from 'node:diagnostics_channel';
import { metrics, SpanStatusCode, trace, type Attributes, type MeterProvider, type Span, type TracerProvider } from '@opentelemetry/api';
import { CHANNELS, type ExtensionFailedEvent, type LeaseLostEvent, type LockCallContext } from '../common/diagnostics';
import { knownKeys, refuseUnknownKeys } from '../common/known-keys';
import { expectObject } from '../common/validation';

/** Options of {@link instrumentMonglock}. */
export interface MonglockInstrumentationOptions {
  /** @default the global tracer provider (`trace.getTracerProvider()`) */
  readonly tracerProvider?: TracerProvider;
  /** @default the global meter provider (`metrics.getMeterProvider()`) */
  readonly meterProvider?: MeterProvider;
}

const OPTIONS = knownKeys<MonglockInstrumentationOptions>()(['tracerProvider', 'meterProvider']);

/** A hold this process has acquired and not yet released (or lost). */
interface Hold {
  readonly span: Span;
  readonly startedAt: number;
  readonly attributes: Attributes;
  expiresAt: number;
}

// eslint-disable-next-line @typescript-eslint/no-require-imports
const VERSION = (require('../../package.json') as { version: string }).version;

/**
 * Turns monglock's `diagnostics_channel` events into OpenTelemetry spans and metrics:
 * - spans `monglock acquire` (outcome, attempts, wait), `monglock release`, `monglock extend`,
 *   and `monglock hold` from a won acquisition to its release (or its loss: error status, with
 *   the cause; failed extensions are span events);
 * - `monglock.acquisitions` (counter, by outcome), `monglock.conversions` (counter, by outcome and
 *   tags), `monglock.acquire.wait` and `monglock.hold`
 *   (histograms, ms), `monglock.held` (gauge: locks this process holds now).
 * Attributes: `monglock.namespace`, `monglock.kind`, `monglock.tag`, `monglock.outcome`; for an
 * owner's acquisition `monglock.nested` (a re-entry: true), for a semaphore's `monglock.permits`.
 * Returns `disable()`, which unsubscribes.
 * @example
 * const { instrumentMonglock } = require('monglock/otel');
 * instrumentMonglock(); // after the OpenTelemetry SDK is started
 */
export function instrumentMonglock(options: MonglockInstrumentationOptions = {}): { disable(): void } {
  refuseUnknownKeys('options', expectObject('options', options), OPTIONS);
  const tracer = (options.tracerProvider ?? trace.getTracerProvider()).getTracer('monglock', VERSION);
  const meter = (options.meterProvider ?? metrics.getMeterProvider()).getMeter('monglock', VERSION);
  const acquisitions = meter.createCounter('monglock.acquisitions', { description: 'Acquire calls, by outcome', unit: '{call}' });
  const waits = meter.createHistogram('monglock.acquire.wait', { description: 'Time from an acquire call to its outcome', unit: 'ms' });
  const holds = meter.createHistogram('monglock.hold', { description: 'Time a lock was held, from acquisition to release or loss', unit: 'ms' });
  const conversions = meter.createCounter('monglock.conversions', { description: 'handle.convert calls, by outcome and tags', unit: '{call}' });
  const heldGauge = meter.createObservableGauge('monglock.held', { description: 'Locks this process holds', unit: '{lock}' });

  const calls = new WeakMap<LockCallContext, Span>();
  const held = new Map<string, Hold>();
  const attributesOf = (context: { namespace: string; kind?: string; tag?: string }): Attributes => ({
    'monglock.namespace': context.namespace,
    ...(context.kind ? { 'monglock.kind': context.kind } : {}),
    ...(context.tag ? { 'monglock.tag': context.tag } : {}),
  });
  /** Ends the hold of `lockId` (released, lost, or past its lease unseen: a checkout released elsewhere). */
  const endHold = (lockId: string | undefined, ended: string, error?: unknown): void => {
    const hold = lockId === undefined ? undefined : held.get(lockId);
    if (!hold || lockId === undefined) return;
    held.delete(lockId);
    hold.span.setAttribute('monglock.ended', ended);
    if (error !== undefined) hold.span.setStatus({ code: SpanStatusCode.ERROR, message: error instanceof Error ? error.message : String(error) });
    hold.span.end();
    holds.record(Date.now() - hold.startedAt, { ...hold.attributes, 'monglock.ended': ended });
  };
  const forgetExpired = (): void => {
    const now = Date.now();
    // A minute of slack: expiresAt is in the server's time, Date.now() in this host's.
    for (const [lockId, hold] of held) if (hold.expiresAt + 60_000 < now) endHold(lockId, 'expired');
  };
  heldGauge.addCallback((result) => {
    forgetExpired();
    result.observe(held.size);
  });

  const handlers = (operation: LockCallContext['operation']) => ({
    start(message: unknown) {
      const context = message as LockCallContext;
      calls.set(context, tracer.startSpan(`monglock ${operation}`, { attributes: attributesOf(context) }));
    },
    end() {},
    asyncStart() {},
    error() {},
    asyncEnd(message: unknown) {
      const context = message as LockCallContext;
      const span = calls.get(context);
      const attributes = {
        ...attributesOf(context),
        'monglock.outcome': context.outcome ?? 'unknown',
        ...(context.nested !== undefined ? { 'monglock.nested': context.nested } : {}),
        ...(context.permits !== undefined ? { 'monglock.permits': context.permits } : {}),
      };
      if (span) {
        span.setAttributes({
          ...attributes,
          ...(context.attempts !== undefined ? { 'monglock.attempts': context.attempts } : {}),
          ...(context.durationMs !== undefined ? { 'monglock.duration_ms': context.durationMs } : {}),
          ...(context.fence !== undefined ? { 'monglock.fence': context.fence } : {}),
          ...(context.lockId !== undefined ? { 'monglock.lock_id': context.lockId } : {}),
        });
        if (context.error !== undefined) span.setStatus({ code: SpanStatusCode.ERROR, message: context.outcome });
        span.end();
      }
      if (operation === 'acquire') {
        acquisitions.add(1, attributes);
        if (context.durationMs !== undefined) waits.record(context.durationMs, attributes);
        if (context.outcome === 'acquired' && context.lockId !== undefined) {
          forgetExpired();
          const holdAttributes = attributesOf(context);
          held.set(context.lockId, {
            span: tracer.startSpan('monglock hold', { attributes: { ...holdAttributes, 'monglock.lock_id': context.lockId, ...(context.fence !== undefined ? { 'monglock.fence': context.fence } : {}) } }),
            startedAt: Date.now(),
            attributes: holdAttributes,
            expiresAt: context.expiresAt ?? Infinity,
          });
        }
      } else if (operation === 'release') {
        endHold(context.lockId, context.error === undefined ? 'released' : 'release failed', context.error);
      } else if (context.conversion) {
        conversions.add(1, { ...attributes, 'monglock.converted_from': context.conversion.from, 'monglock.converted_to': context.conversion.to });
        const hold = context.lockId === undefined ? undefined : held.get(context.lockId);
        if (hold && context.outcome === 'converted' && context.expiresAt !== undefined) hold.expiresAt = context.expiresAt;
      } else if (context.lockId !== undefined && context.expiresAt !== undefined) {
        const hold = held.get(context.lockId);
        if (hold) hold.expiresAt = context.expiresAt;
      }
    },
  });
  const traced = (['acquire', 'release', 'extend'] as const).map((operation) => ({ channel: tracingChannel(CHANNELS[operation]), handlers: handlers(operation) }));
  for (const { channel, handlers: own } of traced) channel.subscribe(own);

  const onLost = (message: unknown): void => {
    const event = message as LeaseLostEvent;
    held.get(event.lockId)?.span.setAttribute('monglock.lost_cause', event.cause);
    endHold(event.lockId, `lost: ${event.cause}`, event.error);
  };
  const onExtensionFailed = (message: unknown): void => {
    const event = message as ExtensionFailedEvent;
    held.get(event.lockId)?.span.addEvent('monglock extension failed', {
      'monglock.store_outage': event.storeOutage,
      'monglock.remaining_ms': event.remainingMs,
      'exception.message': event.error instanceof Error ? event.error.message : String(event.error),
    });
  };
  subscribe(CHANNELS.leaseLost, onLost);
  subscribe(CHANNELS.extensionFailed, onExtensionFailed);

  return {
    disable() {
      for (const { channel, handlers: own } of traced) channel.unsubscribe(own);
      unsubscribe(CHANNELS.leaseLost, onLost);
      unsubscribe(CHANNELS.extensionFailed, onExtensionFailed);
    },
  };
}
