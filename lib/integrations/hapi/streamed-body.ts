import { pipeline, Readable, Transform, type TransformCallback } from 'node:stream';

/** The parts of a hapi response that tell which bytes of its stream body the client gets. */
export interface SentResponse {
  statusCode?: number;
  headers?: Record<string, unknown>;
}

/**
 * A stream body on its way to the client: passes `source` on unchanged and awaits `beforeLast`
 * (the release of the route's lock) before the last byte the client gets goes out. So every byte
 * the client gets is read under the lock, and the client cannot have its whole answer before the
 * lock is free. Which byte is last is read from `response` when hapi starts sending, after it
 * chose a range: the end of the range of a 206 hapi cuts from the body (the rest is dropped),
 * the last byte of a body with a content-length; a chunked body (hapi's default for a stream,
 * or a compressed one) ends only after the release.
 */
export function releasingBody(source: Readable, beforeLast: () => Promise<void>, response: SentResponse): Readable {
  const body = new ReleasingBody(source, beforeLast, lastByteOf(response, response.statusCode === 200));
  // A stream of hapi's that compresses its own chunks (an event stream that flushes each event).
  const setCompressor = (source as { setCompressor?: unknown }).setCompressor;
  if (typeof setCompressor === 'function') Object.assign(body, { setCompressor: setCompressor.bind(source) });
  return body;
}

/**
 * Once hapi sends `response`: the offset in its stream body of the last byte the client gets, or
 * undefined when the client does not know the length. hapi answers a range (206, with the range
 * in content-range) only for a response that was a 200 (`rangeable`); a 206 of the route's own
 * has the body it sends as its source.
 */
function lastByteOf(response: SentResponse, rangeable: boolean): () => number | undefined {
  return () => {
    const range = /^bytes \d+-(\d+)\//.exec(String(response.headers?.['content-range'] ?? ''));
    if (rangeable && response.statusCode === 206 && range) return Number(range[1]);
    const length = Number(response.headers?.['content-length'] ?? Number.NaN); // hapi removes it when it compresses
    return Number.isInteger(length) && length > 0 ? length - 1 : undefined;
  };
}

class ReleasingBody extends Transform {
  /** Set once hapi reads the body: it has chosen its range and compression by then. */
  #lastByte: number | undefined;
  #started = false;
  /** Bytes of the source passed so far. */
  #offset = 0;
  #released = false;

  constructor(
    private readonly source: Readable,
    private readonly beforeLast: () => Promise<void>,
    private readonly lastByte: () => number | undefined,
  ) {
    super();
  }

  override _read(size: number): void {
    if (!this.#started) {
      this.#started = true;
      this.#lastByte = this.lastByte();
      // hapi destroys the body it does not send (a client gone): so is the source then.
      pipeline(this.source, this, () => undefined);
    }
    super._read(size);
  }

  override _destroy(error: Error | null, callback: (error?: Error | null) => void): void {
    if (!this.#started) this.source.destroy(); // a body hapi dropped before reading it (a 304)
    super._destroy(error, callback);
  }

  override _transform(chunk: Buffer, _encoding: BufferEncoding, callback: TransformCallback): void {
    const start = this.#offset;
    this.#offset += chunk.length;
    if (this.#released || this.#lastByte === undefined || this.#offset <= this.#lastByte) return callback(null, chunk);
    const last = this.#lastByte - start;
    if (last > 0) this.push(chunk.subarray(0, last));
    this.#release().then(
      () => callback(null, chunk.subarray(last)),
      (error: unknown) => callback(error as Error),
    );
  }

  override _flush(callback: TransformCallback): void {
    this.#release().then(
      () => callback(),
      (error: unknown) => callback(error as Error),
    );
  }

  #release(): Promise<void> {
    if (this.#released) return Promise.resolve();
    this.#released = true;
    return this.beforeLast();
  }
}
