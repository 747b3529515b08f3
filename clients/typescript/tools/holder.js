// A lock holder for studio's cross-language tests (run by cmd/studio's Go
// tests, against $STUDIO_URL with $STUDIO_TOKEN):
//
//   node tools/holder.js counter NAME KEY FILE N   N times: under the lock, read FILE, add 1, write it
//   node tools/holder.js hold NAME KEY TTL_MS      hold until killed; print "held FENCE", then "lost" if lost
import { openSync, readSync, writeSync, ftruncateSync, fsyncSync, closeSync } from "node:fs";
import { LockClient } from "../index.js";

const [cmd, name, key, ...rest] = process.argv.slice(2);
const client = LockClient.fromEnv();

if (cmd === "counter") {
  const [path, n] = rest;
  const lock = client.lock(name, { ttlMs: 10_000, waitMs: 120_000 });
  for (let i = 0; i < Number(n); i++) {
    await lock.withLock(key, async (_signal, lease) => {
      const fd = openSync(path, "r+");
      try {
        const buf = Buffer.alloc(64);
        const len = readSync(fd, buf, 0, 64, 0);
        const [count, last] = buf.subarray(0, len).toString().trim().split(/\s+/).map(Number);
        if (lease.fence <= last) throw new Error(`fence ${lease.fence} after ${last}`);
        await new Promise((r) => setTimeout(r, 1)); // widen the window a lost update needs
        const out = Buffer.from(`${count + 1} ${lease.fence}\n`);
        ftruncateSync(fd, 0);
        writeSync(fd, out, 0, out.length, 0);
        fsyncSync(fd);
      } finally {
        closeSync(fd);
      }
    });
  }
  console.log("done");
} else if (cmd === "hold") {
  const lease = await client.lock(name).hold(key, { ttlMs: Number(rest[0]), waitMs: 60_000 });
  console.log(`held ${lease.fence}`);
  lease.signal.addEventListener("abort", () => {
    console.log(`lost ${lease.signal.reason.detail}`);
    process.exit(0);
  });
} else {
  console.error("usage: counter NAME KEY FILE N | hold NAME KEY TTL_MS");
  process.exit(2);
}
