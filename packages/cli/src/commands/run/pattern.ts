/** The bytes `tent transfer` writes: a deterministic pattern of `seed`. */
export const pattern = (length: number, seed: number): Buffer => {
  const b = Buffer.allocUnsafe(length)
  let x = (seed * 2654435761) >>> 0 || 1
  for (let i = 0; i < length; i++) {
    x ^= x << 13
    x >>>= 0
    x ^= x >>> 17
    x ^= x << 5
    x >>>= 0
    b[i] = x & 0xff
  }
  return b
}
