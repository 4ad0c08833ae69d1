/** The shared secret of the rpc bench's authenticated server (`server.ts`) and its callers (`rpc.ts`). */
export const BENCH_SECRET = "the rpc bench's shared secret, 32+ bytes"
