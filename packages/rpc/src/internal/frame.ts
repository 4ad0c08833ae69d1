/**
 * The lean wire format of the control plane: length-prefixed binary frames, little-endian.
 *
 * ```
 * [u32 len][u8 kind][u32 id][body: len - 5 bytes]
 * ```
 *
 * `len` counts everything after itself. A request's body starts with the RPC's index in the group (u8). Bodies are
 * per RPC (see `codec.ts`): `Notify` is TENT's `[u32 name_len][name][u32 msg_len][msg]`, the void ones are empty,
 * the rest JSON of the Schema-encoded value. Reader and writer are plain synchronous code on reused buffers.
 */

/** Frame kinds. */
export const Kind = {
  /** client → server: `[u8 rpc index][payload]` */
  Request: 1,
  /** client → server: the call with this id was abandoned (timeout or interruption). */
  Interrupt: 2,
  /** server → client: `[success body]` */
  Success: 3,
  /** server → client: `[JSON of the encoded typed error]` */
  Failure: 4,
  /** server → client: `[UTF-8 text]` the handler died */
  Defect: 5,
  /** server → client: the handler was interrupted (server shutting down) */
  Interrupted: 6,
  /** either way, id 0: `[UTF-8 text]` the sender saw a malformed frame and closes the connection */
  ProtocolError: 7
} as const

/** Bytes before a frame's body: length, kind, id. */
export const HEADER_BYTES = 9
/** Bytes a frame's `len` counts at least: kind and id. */
const MIN_LEN = 5

/**
 * Splits a byte stream into frames. `onFrame(buf, start, end)` gets the frame after its length prefix (kind at
 * `start`); the range is valid only during the call. Memory grows with bytes received, never with a claimed length:
 * a prefix above `maxFrame` is rejected as soon as its 4 bytes arrive.
 */
export class FrameReader {
  private pending: Array<Buffer> = []
  private pendingBytes = 0
  private need = 0
  /** Stopped by `blocked` (see the constructor): frames are kept, unread, until {@link resume}. */
  held = false

  /**
   * `blocked`, when given, is asked before each frame: true stops the reader there (the rest is kept, and so is
   * everything pushed after) until {@link resume}. The server's backpressure: a connection with too many requests in
   * hand or too many reply bytes unread is read no further.
   */
  constructor(
    private readonly maxFrame: number,
    private readonly onFrame: (buf: Buffer, start: number, end: number) => void,
    private readonly blocked?: () => boolean
  ) {}

  /** Reads on after a stop by `blocked` (and may stop again); an error text when the stream is malformed. */
  resume(): string | undefined {
    if (!this.held) return undefined
    this.held = false
    if (this.pendingBytes === 0) return undefined
    const all = this.pending.length === 1 ? (this.pending[0] as Buffer) : Buffer.concat(this.pending, this.pendingBytes)
    this.pending = []
    this.pendingBytes = 0
    this.need = 0
    try {
      return this.scan(all)
    } catch (e) {
      return e instanceof Error ? e.message : String(e)
    }
  }

  /** Feeds bytes; returns an error text when the stream is malformed (the caller closes the connection). */
  push(chunk: Buffer): string | undefined {
    try {
      if (this.held) {
        this.pending.push(chunk)
        this.pendingBytes += chunk.length
        return undefined
      }
      if (this.pendingBytes === 0) return this.scan(chunk)
      this.pending.push(chunk)
      this.pendingBytes += chunk.length
      if (this.need === 0) {
        if (this.pendingBytes < 4) return undefined
        const head = this.pending[0] as Buffer
        const len = (head.length >= 4 ? head : Buffer.concat(this.pending, this.pendingBytes)).readUInt32LE(0)
        const bad = this.check(len)
        if (bad !== undefined) return bad
        this.need = 4 + len
      }
      if (this.pendingBytes < this.need) return undefined
      const all = Buffer.concat(this.pending, this.pendingBytes)
      this.pending = []
      this.pendingBytes = 0
      this.need = 0
      return this.scan(all)
    } catch (e) {
      return e instanceof Error ? e.message : String(e)
    }
  }

  private check(len: number): string | undefined {
    if (len < MIN_LEN) return `frame length ${len} is shorter than a frame header`
    if (len > this.maxFrame) return `frame length ${len} exceeds the maximum of ${this.maxFrame}`
    return undefined
  }

  private scan(buf: Buffer): string | undefined {
    let off = 0
    while (buf.length - off >= 4) {
      const len = buf.readUInt32LE(off)
      const bad = this.check(len)
      if (bad !== undefined) return bad
      if (buf.length - off - 4 < len) {
        this.need = 4 + len
        break
      }
      if (this.blocked?.() === true) {
        this.held = true
        break
      }
      this.onFrame(buf, off + 4, off + 4 + len)
      off += 4 + len
    }
    if (off < buf.length) {
      const tail = buf.subarray(off)
      this.pending = [tail]
      this.pendingBytes = tail.length
    }
    return undefined
  }
}

/**
 * A writer's first buffer: small, so an idle connection (one per peer an engine has an endpoint with) holds 4 KiB, not
 * 64; it doubles as frames need and keeps its size (up to {@link SHRINK_ABOVE}), so a busy connection grows once.
 */
const INITIAL = 4 * 1024
const SHRINK_ABOVE = 1024 * 1024

/**
 * Builds frames into one reused buffer; `take()` hands the bytes written so far to the socket (a copy, since a
 * socket may hold a buffer after `write` returns) and starts over. Frames written in one tick go out in one write.
 */
export class FrameWriter {
  private buf = Buffer.allocUnsafeSlow(INITIAL)
  private start = 0
  /** Bytes written and not yet taken. */
  length = 0

  /** Starts a frame; follow with the body and {@link end}. */
  begin(kind: number, id: number): void {
    this.ensure(HEADER_BYTES)
    this.start = this.length
    this.buf[this.length + 4] = kind
    this.buf.writeUInt32LE(id >>> 0, this.length + 5)
    this.length += HEADER_BYTES
  }

  /** Finishes the frame begun last: writes its length. */
  end(): void {
    this.buf.writeUInt32LE(this.length - this.start - 4, this.start)
  }

  /** Drops the frame begun last (its body failed to encode). */
  abort(): void {
    this.length = this.start
  }

  /** Length of the frame begun last, so far, as its `len` will count it. */
  frameLength(): number {
    return this.length - this.start - 4
  }

  u8(v: number): void {
    this.ensure(1)
    this.buf[this.length++] = v
  }

  u32(v: number): void {
    this.ensure(4)
    this.buf.writeUInt32LE(v >>> 0, this.length)
    this.length += 4
  }

  /** A u64 little-endian from a safe integer (two u32 halves). */
  u64(v: number): void {
    this.ensure(8)
    this.buf.writeUInt32LE((v % 0x1_0000_0000) >>> 0, this.length)
    this.buf.writeUInt32LE(Math.floor(v / 0x1_0000_0000) >>> 0, this.length + 4)
    this.length += 8
  }

  /** Claims `n` bytes and returns where they start in {@link buffer} (read it after this call: it may grow). */
  reserve(n: number): number {
    this.ensure(n)
    const at = this.length
    this.length += n
    return at
  }

  /** The buffer being written; bytes claimed with {@link reserve} are filled in here. */
  get buffer(): Buffer {
    return this.buf
  }

  bytes(src: Uint8Array): void {
    this.ensure(src.length)
    this.buf.set(src, this.length)
    this.length += src.length
  }

  utf8(s: string): void {
    this.ensure(Buffer.byteLength(s))
    this.length += this.buf.write(s, this.length, "utf8")
  }

  /** The bytes written since the last take, as a buffer of their own. */
  take(): Buffer {
    if (this.length > SHRINK_ABOVE) {
      // a large batch (data replies): handed over as it is, not copied; the writer starts on a small buffer again
      const whole = this.buf.subarray(0, this.length)
      this.buf = Buffer.allocUnsafeSlow(INITIAL)
      this.length = 0
      this.start = 0
      return whole
    }
    const out = Buffer.allocUnsafe(this.length)
    this.buf.copy(out, 0, 0, this.length)
    this.length = 0
    this.start = 0
    if (this.buf.length > SHRINK_ABOVE) this.buf = Buffer.allocUnsafeSlow(INITIAL)
    return out
  }

  private ensure(n: number): void {
    if (this.length + n <= this.buf.length) return
    const next = Buffer.allocUnsafeSlow(Math.max(this.buf.length * 2, this.length + n))
    this.buf.copy(next, 0, 0, this.length)
    this.buf = next
  }
}

/** A u64 little-endian at `at` as a number, or -1 when it is above `Number.MAX_SAFE_INTEGER`. */
export const readU64 = (buf: Buffer, at: number): number => {
  const lo = buf.readUInt32LE(at)
  const hi = buf.readUInt32LE(at + 4)
  return hi > 0x1f_ffff ? -1 : hi * 0x1_0000_0000 + lo
}
