import { pipeline, Readable, Transform, type TransformCallback } from 'node:stream';

/**
 * A stream body on its way to the client: passes `source` on unchanged and, once it has ended,
 * awaits `beforeEnd` (the release of the route's lock) before the end of the body goes out. So
 * the stream is read under the lock, and the client cannot have the whole body before the lock
 * is free: a chunked body (hapi's default for a stream) ends only after it; of a body whose length
 * the client knows (`sized`: a content-length), the last byte is held back until then.
 */
export function releasingBody(source: Readable, beforeEnd: () => Promise<void>, sized: boolean): Readable {
  const body = new ReleasingBody(beforeEnd, sized);
  // hapi destroys the body it does not send (a HEAD request, a client gone): so is the source then.
  pipeline(source, body, () => undefined);
  // A stream of hapi's that compresses its own chunks (an event stream that flushes each event).
  const setCompressor = (source as { setCompressor?: unknown }).setCompressor;
  if (typeof setCompressor === 'function') Object.assign(body, { setCompressor: setCompressor.bind(source) });
  return body;
}

class ReleasingBody extends Transform {
  /** The last byte so far of a sized body. */
  #withheld: Buffer | undefined;

  constructor(
    private readonly beforeEnd: () => Promise<void>,
    private readonly sized: boolean,
  ) {
    super();
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    if (!this.sized || chunk.length === 0) return callback(null, chunk);
    const passed = this.#withheld ? Buffer.concat([this.#withheld, chunk.subarray(0, -1)]) : chunk.subarray(0, -1);
    this.#withheld = chunk.subarray(-1);
    callback(null, passed);
  }

  override _flush(callback: TransformCallback): void {
    this.beforeEnd().then(
      () => callback(null, this.#withheld),
      (error: unknown) => callback(error as Error),
    );
  }
}
