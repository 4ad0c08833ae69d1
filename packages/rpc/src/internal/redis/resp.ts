/**
 * RESP2, the Redis wire, as much of it as the registry's client needs: commands as arrays of bulk strings, and a
 * reader for the replies of `AUTH`, `SELECT`, `PING`, `GET`, `SET`, `DEL` and `QUIT` (simple strings, errors, integers,
 * bulk strings). The reader is bounded: a bulk string whose announced length exceeds `maxBulkBytes` is refused on its
 * `$<length>` line, before a byte of it is buffered, and a header line longer than `maxLineBytes` is refused as it
 * grows. It holds at most one header line (preallocated) and one bulk value (allocated once, at its announced size).
 */

const CRLF = Buffer.from("\r\n", "latin1")

/** One reply. */
export type Reply =
  | { readonly _tag: "Simple"; readonly value: string }
  | { readonly _tag: "Error"; readonly value: string }
  | { readonly _tag: "Integer"; readonly value: number }
  | { readonly _tag: "Bulk"; readonly value: Buffer | null }

/** Why the reader stopped: a value over its bound, or bytes that are not a reply it reads. */
export type Refusal =
  | { readonly _tag: "TooLarge"; readonly size: number; readonly max: number }
  | { readonly _tag: "Malformed"; readonly message: string }

/** Longest header line (`+OK`, `-ERR …`, `:1`, `$12`) the reader takes: Redis's own error lines are far shorter. */
export const MAX_LINE_BYTES = 64 * 1024

/** A command as RESP writes it: an array of bulk strings. */
export const encodeCommand = (args: ReadonlyArray<string | Uint8Array>): Buffer => {
  const parts: Array<Buffer> = [Buffer.from(`*${args.length}\r\n`, "latin1")]
  for (const arg of args) {
    const bytes =
      typeof arg === "string" ? Buffer.from(arg, "utf8") : Buffer.from(arg.buffer, arg.byteOffset, arg.length)
    parts.push(Buffer.from(`$${bytes.length}\r\n`, "latin1"), bytes, CRLF)
  }
  return Buffer.concat(parts)
}

const printable = (bytes: Buffer): string => JSON.stringify(bytes.subarray(0, 40).toString("latin1"))

/**
 * Reads replies from a byte stream, chunk by chunk. After a refusal it reads nothing more: the stream is out of step
 * (or hostile), and its connection must be closed.
 */
export class ReplyReader {
  private readonly line: Buffer
  private lineLength = 0
  /** The bulk value being filled, with room for its trailing CRLF. */
  private body: Buffer | undefined
  private bodyFilled = 0
  private refused: Refusal | undefined

  constructor(
    readonly maxBulkBytes: number,
    readonly maxLineBytes: number = MAX_LINE_BYTES
  ) {
    // the line's bytes up to and including its CR (the LF ends it and is not kept)
    this.line = Buffer.allocUnsafe(maxLineBytes + 1)
  }

  /**
   * Feeds one chunk, calling `onReply` for each reply it completes until `onReply` returns false. Returns the refusal
   * that stopped the reader, if one did (now or before).
   */
  feed(chunk: Buffer, onReply: (reply: Reply) => boolean): Refusal | undefined {
    let i = 0
    while (i < chunk.length && this.refused === undefined) {
      if (this.body !== undefined) {
        const n = Math.min(this.body.length - this.bodyFilled, chunk.length - i)
        chunk.copy(this.body, this.bodyFilled, i, i + n)
        this.bodyFilled += n
        i += n
        if (this.bodyFilled < this.body.length) return undefined
        const body = this.body
        this.body = undefined
        const size = body.length - 2
        if (body[size] !== 13 || body[size + 1] !== 10) {
          return this.refuse({ _tag: "Malformed", message: `a bulk string of ${size} bytes not followed by CRLF` })
        }
        if (!onReply({ _tag: "Bulk", value: body.subarray(0, size) })) return undefined
        continue
      }
      const lf = chunk.indexOf(10, i)
      const end = lf < 0 ? chunk.length : lf
      if (this.lineLength + (end - i) > this.line.length) {
        return this.refuse({ _tag: "Malformed", message: `a reply line longer than ${this.maxLineBytes} bytes` })
      }
      chunk.copy(this.line, this.lineLength, i, end)
      this.lineLength += end - i
      if (lf < 0) return undefined
      i = lf + 1
      const reply = this.header()
      if (reply === undefined) continue // a bulk string follows, or the reader refused
      if (!onReply(reply)) return undefined
    }
    return this.refused
  }

  private refuse(refusal: Refusal): Refusal {
    this.refused = refusal
    this.body = undefined
    return refusal
  }

  /** The complete header line: a reply, or a bulk string's length (then `body` is set and undefined returned). */
  private header(): Reply | undefined {
    const length = this.lineLength
    this.lineLength = 0
    if (length < 2 || this.line[length - 1] !== 13) {
      this.refuse({
        _tag: "Malformed",
        message: `a reply line not ended by CRLF: ${printable(this.line.subarray(0, length))}`
      })
      return undefined
    }
    const text = this.line.toString("utf8", 1, length - 1)
    switch (this.line[0]) {
      case 0x2b: // +
        return { _tag: "Simple", value: text }
      case 0x2d: // -
        return { _tag: "Error", value: text }
      case 0x3a: // :
        if (/^-?\d{1,18}$/.test(text)) return { _tag: "Integer", value: Number(text) }
        break
      case 0x24: {
        // $
        if (text === "-1") return { _tag: "Bulk", value: null }
        if (!/^\d{1,20}$/.test(text)) break
        const size = Number(text)
        if (size > this.maxBulkBytes) {
          this.refuse({ _tag: "TooLarge", size, max: this.maxBulkBytes })
          return undefined
        }
        this.body = Buffer.allocUnsafe(size + 2)
        this.bodyFilled = 0
        return undefined
      }
    }
    this.refuse({
      _tag: "Malformed",
      message: `not a reply the registry reads: ${printable(this.line.subarray(0, length - 1))}`
    })
    return undefined
  }
}
