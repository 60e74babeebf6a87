/** Spans and metrics with monglock/otel, exported in memory and printed (docs/observability.md: OpenTelemetry). */
import { InMemorySpanExporter, BasicTracerProvider, SimpleSpanProcessor } from '@opentelemetry/sdk-trace-base';
import { MeterProvider } from '@opentelemetry/sdk-metrics';
import { MongoClient } from 'mongodb';
import { writeLock } from 'monglock';
import { instrumentMonglock } from 'monglock/otel'; // needs @opentelemetry/api (an optional peer)

async function main(): Promise<void> {
  const client = await MongoClient.connect(process.env.MONGODB_URI ?? 'mongodb://127.0.0.1:27017');
  const collection = client.db('monglock_examples').collection<{ _id: string }>('orders');
  await collection.deleteMany({ _id: 'o-otel' });
  await collection.insertOne({ _id: 'o-otel' });
  const spans = new InMemorySpanExporter();
  const tracerProvider = new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(spans)] });
  const meterProvider = new MeterProvider();
  try {
    // #region readme
    const instrumentation = instrumentMonglock({ tracerProvider, meterProvider }); // no argument: the global providers

    const orders = writeLock({ collection, locktimeout: 5000 });
    const held = await orders.acquire({ _id: 'o-otel' }); // span "monglock acquire"; "monglock hold" starts
    await held.release(); // span "monglock release"; "monglock hold" ends

    instrumentation.disable(); // unsubscribes
    // #endregion
    const names = spans.getFinishedSpans().map((span) => span.name);
    console.log('spans:', names.join(', '));
    if (names.join() !== 'monglock acquire,monglock release,monglock hold') throw new Error('unexpected');
  } finally {
    await meterProvider.shutdown();
    await tracerProvider.shutdown();
    await client.close();
  }
}

main().catch((error: unknown) => {
  console.error(error);
  process.exit(1);
});
