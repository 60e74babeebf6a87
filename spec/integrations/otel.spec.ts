/**
 * monglock/otel: spans and metrics from the diagnostics channels, checked with the OpenTelemetry
 * SDK's in-memory exporters.
 */
import { AggregationTemporality, InMemoryMetricExporter, MeterProvider, PeriodicExportingMetricReader, type DataPoint, type Histogram } from '@opentelemetry/sdk-metrics';
import { BasicTracerProvider, InMemorySpanExporter, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { expect } from 'chai';
import { isLockError, multiLock, semaphore, writeLock } from '../../lib';
import { instrumentMonglock } from '../../lib/otel';
import { freshCollection, rejectionOf } from '../support/fixture';

describe('monglock/otel', function () {
  this.timeout(20_000);

  it('spans for acquire, hold and release; counters, wait and hold histograms, a gauge of held locks', async () => {
    const spans = new InMemorySpanExporter();
    const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
    const meterProvider = new MeterProvider({ readers: [reader] });
    const instrumentation = instrumentMonglock({ tracerProvider, meterProvider });
    /** The last exported value of `name`'s points, by outcome. */
    const metric = async (name: string): Promise<Array<DataPoint<unknown>>> => {
      exporter.reset();
      await reader.forceFlush();
      const found = exporter.getMetrics().flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics)).find((m) => m.descriptor.name === name);
      return (found?.dataPoints ?? []) as Array<DataPoint<unknown>>;
    };
    try {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const held = await lock.acquire({ _id: 1 });
      expect(isLockError(await rejectionOf(lock.acquire({ _id: 1 })), 'LockAlreadyTaken')).to.equal(true);
      expect((await metric('monglock.held'))[0]?.value).to.equal(1);
      await held.release();
      expect((await metric('monglock.held'))[0]?.value).to.equal(0);

      const names = spans.getFinishedSpans().map((span) => span.name);
      expect(names).to.deep.equal(['monglock acquire', 'monglock acquire', 'monglock release', 'monglock hold']);
      const [won, refused, , hold] = spans.getFinishedSpans();
      expect(won?.attributes).to.include({ 'monglock.outcome': 'acquired', 'monglock.tag': 'write', 'monglock.kind': 'writeLock', 'monglock.attempts': 1, 'monglock.fence': held.fence });
      expect(refused?.attributes['monglock.outcome']).to.equal('LockAlreadyTaken');
      expect(refused?.status.code).to.equal(2); // ERROR
      expect(hold?.attributes).to.include({ 'monglock.lock_id': held.id, 'monglock.ended': 'released' });

      const byOutcome = Object.fromEntries((await metric('monglock.acquisitions')).map((point) => [point.attributes['monglock.outcome'], point.value]));
      expect(byOutcome).to.deep.equal({ acquired: 1, LockAlreadyTaken: 1 });
      const waits = await metric('monglock.acquire.wait');
      expect(waits.reduce((sum, point) => sum + (point.value as Histogram).count, 0)).to.equal(2);
      const holds = await metric('monglock.hold');
      expect((holds[0]?.value as Histogram).count).to.equal(1);
    } finally {
      instrumentation.disable();
      await meterProvider.shutdown();
      await tracerProvider.shutdown();
    }
  });

  it('re-entries, semaphore permits and conversions are counted: monglock.nested and monglock.permits on acquisitions, monglock.conversions', async () => {
    const exporter = new InMemoryMetricExporter(AggregationTemporality.CUMULATIVE);
    const reader = new PeriodicExportingMetricReader({ exporter, exportIntervalMillis: 60_000 });
    const meterProvider = new MeterProvider({ readers: [reader] });
    const instrumentation = instrumentMonglock({ meterProvider });
    try {
      const collection = await freshCollection([{ _id: 1 }]);
      const lock = writeLock({ collection });
      const pool = semaphore({ collection, limit: 3 });
      const holds = [await lock.acquire({ _id: 1 }, { owner: 'o' }), await lock.acquire({ _id: 1 }, { owner: 'o' }), await lock.acquire({ _id: 1 }, { owner: 'o' })];
      const permits = await pool.acquire({ _id: 1 }, { permits: 2 });
      await Promise.all([...holds, permits].map((held) => held.release()));
      const rw = multiLock({ collection, locktimeouts: { read: 5_000, write: 5_000 }, lockRelationships: { read: { cooperative: ['write'] }, write: { cooperative: ['write', 'read'] } } });
      const upgraded = await rw.acquire({ _id: 1 }, { tag: 'read' });
      await upgraded.convert('write');
      const other = await rw.acquire({ _id: 1 }, { tag: 'read' }).catch(() => undefined);
      expect(other).to.equal(undefined);
      await upgraded.release();
      await reader.forceFlush();
      const points = exporter.getMetrics().flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics)).find((m) => m.descriptor.name === 'monglock.acquisitions')!.dataPoints;
      const counted = points.map((point) => ({ kind: point.attributes['monglock.kind'], nested: point.attributes['monglock.nested'], permits: point.attributes['monglock.permits'], value: point.value }));
      expect(counted).to.deep.include.members([
        { kind: 'writeLock', nested: false, permits: undefined, value: 1 },
        { kind: 'writeLock', nested: true, permits: undefined, value: 2 },
        { kind: 'semaphore', nested: undefined, permits: 2, value: 1 },
      ]);
      const converted = exporter.getMetrics().flatMap((resource) => resource.scopeMetrics.flatMap((scope) => scope.metrics)).find((m) => m.descriptor.name === 'monglock.conversions')!.dataPoints;
      expect(converted.map((point) => [point.attributes['monglock.converted_from'], point.attributes['monglock.converted_to'], point.attributes['monglock.outcome'], point.value])).to.deep.equal([['read', 'write', 'converted', 1]]);
    } finally {
      instrumentation.disable();
      await meterProvider.shutdown();
    }
  });

  it('a hold lost by its keeper ends its span with an error and the cause; disable() stops everything', async () => {
    const spans = new InMemorySpanExporter();
    const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
    const instrumentation = instrumentMonglock({ tracerProvider });
    try {
      const collection = await freshCollection([{ _id: 2 }]);
      const lock = writeLock({ collection, locktimeout: 400 });
      await rejectionOf(lock.using({ _id: 2 }, { maxHold: 300 }, (_handle, signal) => new Promise((_, reject) => signal.addEventListener('abort', () => reject(signal.reason)))));
      const hold = spans.getFinishedSpans().find((span) => span.name === 'monglock hold');
      expect(hold?.attributes).to.include({ 'monglock.lost_cause': 'max-hold', 'monglock.ended': 'lost: max-hold' });
      expect(hold?.status.code).to.equal(2);
      instrumentation.disable();
      const before = spans.getFinishedSpans().length;
      await (await lock.acquire({ _id: 2 }, { wait: 2_000 })).release();
      expect(spans.getFinishedSpans().length).to.equal(before);
    } finally {
      instrumentation.disable();
      await tracerProvider.shutdown();
    }
  });
});
