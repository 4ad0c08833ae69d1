import * as Net from "node:net"
import { Effect, Exit, Redacted } from "effect"
import { TransportFailure, type TransportFailureReason } from "../Errors.js"
import type { RpcSettings } from "../RpcConfig.js"
import { AuthKind, ClientHandshake } from "./auth.js"
import { type RpcSpec, voidCodec } from "./codec.js"
import { FrameReader, Kind } from "./frame.js"
import { FramedSocket } from "./framed.js"

type Resume = (effect: Effect.Effect<unknown, unknown>) => void

/** One call: waiting for the connection, then (once sent, `id` > 0) waiting for its reply. */
class Pending {
  id = 0
  /** `performance.now()` after which the call times out; set when sent. */
  deadline = 0
  /** Replied, timed out, abandoned or failed: nothing more happens to it. */
  done = false
  constructor(
    readonly spec: RpcSpec,
    readonly payload: unknown,
    readonly timeoutMs: number,
    readonly resume: Resume,
    readonly connection: Connection
  ) {}

  /** The canceler of the call's `Effect.async`: interruption abandons it, at the peer too. */
  readonly cancel = Effect.sync(() => this.connection.abandon(this))
}

/** Calls with the same timeout, in the order they were sent, so in deadline order. Done ones are skipped lazily. */
class DeadlineQueue {
  private items: Array<Pending> = []
  private head = 0

  push(p: Pending): void {
    this.dropDone()
    this.items.push(p)
  }

  /** The first call not done yet (dropping the done ones before it). */
  first(): Pending | undefined {
    this.dropDone()
    return this.items[this.head]
  }

  shift(): void {
    this.head++
    if (this.head === this.items.length) {
      this.items = []
      this.head = 0
    } else if (this.head >= 1024 && this.head * 2 >= this.items.length) {
      this.items = this.items.slice(this.head)
      this.head = 0
    }
  }

  private dropDone(): void {
    while (this.head < this.items.length && (this.items[this.head] as Pending).done) this.shift()
  }
}

const refusedCodes = new Set(["ECONNREFUSED", "ENOTFOUND", "EHOSTUNREACH", "ENETUNREACH", "EAI_AGAIN", "EADDRNOTAVAIL"])

/** Why a connect failed, from its Node error code: `Timeout`, `Refused` (nothing accepted it), or `Closed`. */
export const connectFailureReason = (code: string | undefined): TransportFailureReason =>
  code === "ETIMEDOUT" ? "Timeout" : code !== undefined && !refusedCodes.has(code) ? "Closed" : "Refused"

/**
 * One connection to one peer, with its pending calls by wire id. Plain code on the hot path: a call is one
 * `Effect.async` whose register encodes the request into the connection's reused frame buffer; the reply's frame
 * resumes it. Reply timeouts are deadlines in per-timeout FIFO queues behind a single timer per connection (armed for
 * the earliest deadline), not a timer per call.
 */
export class Connection {
  failure: TransportFailure | undefined
  private readonly pending = new Map<number, Pending>()
  /** Calls made while connecting, sent once connected. */
  private waiting: Array<Pending> = []
  private readonly deadlines = new Map<number, DeadlineQueue>()
  private timer: ReturnType<typeof setTimeout> | undefined
  private timerAt = Number.POSITIVE_INFINITY
  private readonly socket: Net.Socket
  private readonly framed: FramedSocket
  private readonly reader: FrameReader
  private connectTimer: ReturnType<typeof setTimeout> | undefined
  private lastError: NodeJS.ErrnoException | undefined
  private connected = false
  /** Connected, and (with a secret) the server proved it: calls go out. */
  private ready = false
  /** With a secret, from the connect until the server's challenge is answered. */
  private handshake: ClientHandshake | undefined
  private nextId = 1

  /**
   * `name`: this side's segment name, claimed in the authentication handshake (made only when `settings.secret` is
   * set: the server must prove the same secret before any call is sent, then this side proves it).
   */
  constructor(
    readonly address: string,
    host: string,
    port: number,
    settings: RpcSettings,
    private readonly maxFrame: number,
    private readonly onDead: (c: Connection) => void,
    name = ""
  ) {
    this.reader = new FrameReader(maxFrame, this.onFrame)
    this.socket = Net.createConnection({ host, port, noDelay: true })
    this.framed = new FramedSocket(this.socket)
    this.connectTimer = setTimeout(
      () => this.fail("Timeout", `connect to ${address} timed out after ${settings.connectTimeoutMs} ms`),
      settings.connectTimeoutMs
    )
    this.socket.once("connect", () => {
      this.connected = true
      if (settings.secret === undefined) return this.becomeReady()
      const handshake = new ClientHandshake(Buffer.from(Redacted.value(settings.secret), "utf8"), name)
      this.handshake = handshake
      this.framed.writer.begin(AuthKind.Hello, 0)
      this.framed.writer.bytes(handshake.hello())
      this.framed.writer.end()
      this.framed.flushSoon()
    })
    this.socket.on("data", (chunk: Buffer) => {
      if (this.failure !== undefined) return
      const bad = this.reader.push(chunk)
      if (bad !== undefined) {
        this.framed.protocolError(bad)
        this.fail("Protocol", `malformed reply from ${address}: ${bad}`)
      }
    })
    this.socket.on("error", (err: NodeJS.ErrnoException) => {
      this.lastError = err
    })
    this.socket.on("close", () => {
      const code = this.lastError?.code
      const detail = this.lastError ? ` (${this.lastError.code ?? this.lastError.message})` : ""
      if (!this.connected) {
        const reason = connectFailureReason(code)
        this.fail(reason, `cannot connect to ${address}${detail}`)
      } else {
        this.fail(code === "ETIMEDOUT" ? "Timeout" : "Closed", `connection to ${address} closed${detail}`)
      }
    })
  }

  /** Sends the calls made while connecting (and authenticating). */
  private becomeReady(): void {
    clearTimeout(this.connectTimer)
    this.ready = true
    const waiting = this.waiting
    this.waiting = []
    for (const p of waiting) if (!p.done) this.send(p)
  }

  /** The server's `Challenge`: answered with this side's proof when the server proved the secret, else a failure. */
  private onChallenge(handshake: ClientHandshake, kind: number | undefined, buf: Buffer, body: number, end: number) {
    const answer = kind === AuthKind.Challenge ? handshake.answer(buf, body, end) : undefined
    if (answer === undefined) {
      const text = `authentication failed: ${this.address} did not prove the shared secret`
      this.framed.protocolError(text)
      this.fail("Protocol", text)
      return
    }
    this.handshake = undefined
    this.framed.writer.begin(AuthKind.Proof, 0)
    this.framed.writer.bytes(answer)
    this.framed.writer.end()
    this.becomeReady()
    this.framed.flushSoon()
  }

  /** Marks the connection dead: every waiting, pending and future call on it fails with this reason. */
  fail(reason: TransportFailureReason, message: string): void {
    if (this.failure !== undefined) return
    const failure = new TransportFailure({ address: this.address, reason, message })
    this.failure = failure
    clearTimeout(this.connectTimer)
    clearTimeout(this.timer)
    this.timer = undefined
    this.onDead(this)
    if (!this.socket.destroyed && reason !== "Protocol") this.socket.destroy()
    const calls = [...this.waiting, ...this.pending.values()]
    this.waiting = []
    this.pending.clear()
    this.deadlines.clear()
    const exit = Exit.fail(failure)
    for (const p of calls) {
      if (p.done) continue
      p.done = true
      p.resume(exit)
    }
  }

  /**
   * The register of a call's `Effect.async`: sends the request now (or once connected) and returns the canceler,
   * which abandons the call (an `Interrupt` frame tells the peer).
   */
  call(spec: RpcSpec, payload: unknown, timeoutMs: number, resume: Resume): Effect.Effect<void> | undefined {
    if (this.failure !== undefined) {
      resume(Exit.fail(this.failure))
      return undefined
    }
    const p = new Pending(spec, payload, timeoutMs, resume, this)
    if (this.ready) this.send(p)
    else this.waiting.push(p)
    return p.done ? undefined : p.cancel
  }

  /** Encodes and queues the request (it leaves at the end of this tick), and starts its reply timeout. */
  private send(p: Pending): void {
    const id = this.nextId
    this.nextId = id >= 0xfffffffe ? 1 : id + 1
    const w = this.framed.writer
    w.begin(Kind.Request, id)
    w.u8(p.spec.index)
    let problem: string | undefined
    try {
      p.spec.payload.encode(w, p.payload)
      if (w.frameLength() > this.maxFrame) problem = `request exceeds the frame limit of ${this.maxFrame}`
    } catch (e) {
      problem = `payload does not encode: ${String(e)}`
    }
    if (problem !== undefined) {
      w.abort()
      this.finish(p, Exit.fail(this.protocolFailure(`${p.spec.tag} ${problem}`)))
      return
    }
    w.end()
    this.framed.flushSoon()
    p.id = id
    p.deadline = performance.now() + p.timeoutMs
    this.pending.set(id, p)
    let queue = this.deadlines.get(p.timeoutMs)
    if (queue === undefined) {
      queue = new DeadlineQueue()
      this.deadlines.set(p.timeoutMs, queue)
    }
    queue.push(p)
    if (p.deadline < this.timerAt) this.arm(p.deadline)
  }

  private finish(p: Pending, exit: Exit.Exit<unknown, unknown>): void {
    p.done = true
    p.resume(exit)
  }

  private arm(deadline: number): void {
    clearTimeout(this.timer)
    this.timerAt = deadline
    // never early: a timer that fires before the deadline (clock granularity) re-arms for the rest
    this.timer = setTimeout(this.onTimer, Math.max(1, Math.ceil(deadline - performance.now())))
    this.timer.unref()
  }

  /** Times out every call past its deadline, then re-arms for the earliest one left. */
  private readonly onTimer = (): void => {
    this.timer = undefined
    this.timerAt = Number.POSITIVE_INFINITY
    if (this.failure !== undefined) return
    const now = performance.now()
    let next = Number.POSITIVE_INFINITY
    for (const [timeoutMs, queue] of this.deadlines) {
      let p = queue.first()
      while (p !== undefined && p.deadline <= now) {
        queue.shift()
        this.timeout(p)
        p = queue.first()
      }
      if (p === undefined) this.deadlines.delete(timeoutMs)
      else if (p.deadline < next) next = p.deadline
    }
    if (next !== Number.POSITIVE_INFINITY) this.arm(next)
  }

  private protocolFailure(message: string): TransportFailure {
    return new TransportFailure({ address: this.address, reason: "Protocol", message })
  }

  private timeout(p: Pending): void {
    this.pending.delete(p.id)
    this.sendInterrupt(p.id)
    this.finish(
      p,
      Exit.fail(
        new TransportFailure({
          address: this.address,
          reason: "Timeout",
          message: `${p.spec.tag} to ${this.address}: no reply within ${p.timeoutMs} ms`
        })
      )
    )
  }

  /** The caller gave up (interruption): forget the call; if it was sent, tell the peer. */
  abandon(p: Pending): void {
    if (p.done) return
    p.done = true
    if (p.id === 0) return // still waiting for the connection: never sent
    this.pending.delete(p.id)
    this.sendInterrupt(p.id)
  }

  private sendInterrupt(id: number): void {
    if (this.failure !== undefined) return
    this.framed.writer.begin(Kind.Interrupt, id)
    this.framed.writer.end()
    this.framed.flushSoon()
  }

  private readonly onFrame = (buf: Buffer, start: number, end: number): void => {
    const kind = buf[start]
    const id = buf.readUInt32LE(start + 1)
    const body = start + 5
    if (kind === Kind.ProtocolError) {
      this.fail("Protocol", `${this.address} rejected a frame: ${buf.toString("utf8", body, end)}`)
      return
    }
    if (this.handshake !== undefined) {
      this.onChallenge(this.handshake, kind, buf, body, end)
      return
    }
    if (kind === undefined || kind < Kind.Success || kind > Kind.Interrupted)
      throw new Error(`unexpected frame kind ${kind}`)
    const p = this.pending.get(id)
    if (p === undefined) return // a late reply to a call that timed out or was abandoned
    this.pending.delete(id)
    this.finish(p, this.replyExit(p.spec, kind, buf, body, end))
  }

  /** What a reply frame means for the call. */
  private replyExit(spec: RpcSpec, kind: number, buf: Buffer, body: number, end: number): Exit.Exit<unknown, unknown> {
    switch (kind) {
      case Kind.Success:
      case Kind.Failure: {
        const success = kind === Kind.Success
        if (success && body === end && spec.success === voidCodec) return Exit.void
        try {
          const value = (success ? spec.success : spec.error).decode(buf, body, end)
          return success ? Exit.succeed(value) : Exit.fail(value)
        } catch (e) {
          return Exit.fail(this.protocolFailure(`${spec.tag} reply from ${this.address} does not decode: ${e}`))
        }
      }
      case Kind.Defect:
        return Exit.fail(
          this.protocolFailure(`${spec.tag} handler on ${this.address} failed: ${buf.toString("utf8", body, end)}`)
        )
      default:
        return Exit.fail(
          new TransportFailure({
            address: this.address,
            reason: "Closed",
            message: `${this.address} interrupted ${spec.tag} (shutting down)`
          })
        )
    }
  }
}
