// The outage of test_fleet's label_dump_two_hosts_bucket_outages without
// vmtraced: three nats-server clustered as the test starts them, a bucket
// of 3 replicas, objects written, one server SIGKILLed, an object written,
// the other two SIGKILLed, all three restarted, an object written as soon
// as the cluster takes it, then every object read back with the npm
// `nats` package's object store (digest checked). Not part of make check.
//   VMT_NPM=build/npm node fleet-outage-repro.mjs DIR RUNS [put|raw]
// put: the writer is nats.js's own os.put() (purges the chunks of a failed
// put, ADR-20); raw: the writer does what daemon/fleet.c upload() did
// (chunks with a JetStream publish each, then the meta with Nats-Rollup:
// sub; a failed attempt is left as it is, the next one takes a new nuid).
// VMT_REPRO_STEPDOWN=1 moves the stream's leader right after that write.
// Prints a line a run, a closing line "repro: N runs, M mismatches, ...", and
// for a mismatch what the stream holds (tests/tools/fleet-inspect.mjs).
import { createRequire } from "module";
import { spawn, execFileSync } from "child_process";
import { createHash, randomBytes } from "crypto";
import { mkdirSync, writeFileSync, rmSync, openSync } from "fs";
import net from "net";
import http from "http";
const require = createRequire(process.env.VMT_NPM + "/");
const { connect, headers, JSONCodec, nuid } = require("nats");

const [dir, runsArg, mode = "put"] = process.argv.slice(2);
const runs = Number(runsArg || 1);
const CHUNK = 128 * 1024;
// objects of SIZE to 2 SIZE bytes (VMT_REPRO_SIZE, default 2 MB: the size
// of test_fleet's samples, which a lagging replica takes a while to catch up)
const SIZE = Number(process.env.VMT_REPRO_SIZE || 2000000);
// base64url with its padding, as nats.js names a meta subject
const b64 = (s) => Buffer.from(s).toString("base64").replace(/\+/g, "-").replace(/\//g, "_");
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function freePort() {
  return new Promise((res) => {
    const s = net.createServer().listen(0, "127.0.0.1", () => {
      const p = s.address().port;
      s.close(() => res(p));
    });
  });
}

function healthy(port) {
  return new Promise((res) => {
    const rq = http.get({ host: "127.0.0.1", port, path: "/healthz", timeout: 1000 }, (r) => {
      let b = "";
      r.on("data", (d) => (b += d));
      r.on("end", () => res(r.statusCode === 200 && b.includes('"ok"')));
    });
    rq.on("error", () => res(false));
    rq.on("timeout", () => { rq.destroy(); res(false); });
  });
}

async function cluster(rdir) {
  const n = [];
  for (let i = 0; i < 3; i++) n.push({ port: await freePort(), cport: await freePort(), mport: await freePort() });
  n.forEach((x, i) => {
    const routes = n.filter((_, k) => k !== i).map((y) => `nats-route://127.0.0.1:${y.cport}`).join(", ");
    x.conf = `${rdir}/n${i + 1}.conf`;
    x.log = `${rdir}/n${i + 1}.log`;
    writeFileSync(x.conf, `server_name: n${i + 1}\nlisten: 127.0.0.1:${x.port}\nhttp: 127.0.0.1:${x.mport}\n` +
      `jetstream { store_dir: "${rdir}/js${i + 1}" }\nauthorization { user: vmt, password: good }\n` +
      `cluster { name: vt, listen: 127.0.0.1:${x.cport}, routes: [${routes}] }\n`);
  });
  return n;
}

function start(x) {
  const fd = openSync(x.log, "a");
  x.proc = spawn("nats-server", ["-c", x.conf], { stdio: ["ignore", fd, fd] });
  live.add(x);
  x.exited = new Promise((r) => x.proc.on("exit", () => { live.delete(x); r(); }));
}

async function waitHealthy(x) {
  // after three SIGKILLs a 2.9 stream may stay without a leader ("has NO
  // quorum, stalled") for a minute or more on a loaded machine
  const end = Date.now() + 300000;
  while (!(await healthy(x.mport))) {
    if (Date.now() > end) throw new Error(`${x.conf}: not healthy in 300 s`);
    await sleep(20);
  }
}

async function kill(x, sig) {
  x.proc.kill(sig);
  await x.exited;
}

// What upload() in daemon/fleet.c did, byte for byte the same layout.
async function rawPut(js, bucket, name, data) {
  const id = nuid.next();
  const sha = createHash("sha256");
  let chunks = 0;
  for (let o = 0; o < data.length; o += CHUNK) {
    const c = data.subarray(o, Math.min(o + CHUNK, data.length));
    sha.update(c);
    await js.publish(`$O.${bucket}.C.${id}`, c, { timeout: 5000 });
    chunks++;
  }
  const meta = { name, description: "", headers: {}, options: { max_chunk_size: CHUNK }, bucket, nuid: id,
    size: data.length, mtime: new Date().toISOString(), chunks,
    digest: `SHA-256=${sha.digest("base64url")}=`, deleted: false };
  const h = headers();
  h.set("Nats-Rollup", "sub");
  await js.publish(`$O.${bucket}.M.${b64(name)}`, JSONCodec().encode(meta),
    { headers: h, timeout: 5000 });
}

// Written as the uploader does: tried again (200 ms, doubling to 10 s) until stored.
async function write(nc, os, name, data) {
  let wait = 200, tries = 0;
  for (;;) {
    tries++;
    try {
      if (mode === "raw") await rawPut(nc.jetstream(), "vmtrace", name, data);
      else await os.putBlob({ name }, data);
      return tries;
    } catch (e) {
      if (tries >= 40) throw new Error(`${name}: not written after ${tries} tries: ${e.message}`);
      await sleep(wait);
      wait = Math.min(wait * 2, 10000);
    }
  }
}

async function readBack(port, name, want) {
  const nc = await connect({ servers: `nats://127.0.0.1:${port}`, user: "vmt", pass: "good" });
  try {
    const os = await nc.jetstream().views.os("vmtrace");
    const got = await os.getBlob(name);
    if (got === null) return "missing";
    return Buffer.compare(Buffer.from(got), want) === 0 ? "ok" : "differs";
  } catch (e) {
    return `error: ${e.message}`;
  } finally {
    await nc.close();
  }
}

let mism = 0, other = 0;
const live = new Set();
process.on("exit", () => { for (const x of live) x.proc.kill("SIGKILL"); });
for (const sig of ["SIGINT", "SIGTERM"]) process.on(sig, () => process.exit(1));
for (let run = 1; run <= runs; run++) {
  const rdir = `${dir}/run-${run}`;
  rmSync(rdir, { recursive: true, force: true });
  mkdirSync(rdir, { recursive: true });
  const n = await cluster(rdir);
  n.forEach(start);
  for (const x of n) await waitHealthy(x);
  const nc = await connect({ servers: n.map((x) => `nats://127.0.0.1:${x.port}`), user: "vmt", pass: "good",
    maxReconnectAttempts: -1, reconnectTimeWait: 250 });
  const os = await nc.jetstream().views.os("vmtrace", { replicas: 3 });
  const objs = [];
  const obj = (tag) => {
    const o = { name: `host/g1/${tag}-${run}.vmts`, data: randomBytes(SIZE + Math.floor(Math.random() * SIZE)) };
    objs.push(o);
    return o;
  };
  for (const t of ["a", "b"]) { const o = obj(t); await write(nc, os, o.name, o.data); }
  await kill(n[0], "SIGKILL");
  { const o = obj("one-down"); await write(nc, os, o.name, o.data); }
  await kill(n[1], "SIGKILL");
  await kill(n[2], "SIGKILL");
  const after = obj("after");
  const w = write(nc, os, after.name, after.data);	// tried from the moment they are back
  n.forEach(start);
  for (const x of n) await waitHealthy(x);
  const tries = await w;
  // VMT_REPRO_STEPDOWN=1: the stream's leader moved at once, the reads
  // follow without waiting (a reader meeting a leader that just took over)
  if (process.env.VMT_REPRO_STEPDOWN === "1")
    await nc.request("$JS.API.STREAM.LEADER.STEPDOWN.OBJ_vmtrace", "", { timeout: 5000 }).catch(() => {});
  const res = [];
  let bad = false;
  // the object written after the restart first, at once (the moment a
  // replica that was down longest may still be catching up)
  objs.unshift(objs.pop());
  for (const o of objs) {
    // a read that times out (a loaded machine) is tried again; a digest
    // that does not match is not
    let r, k = 0;
    do r = await readBack(n[1].port, o.name, o.data);
    while (/TIMEOUT|timeout/.test(r) && ++k < 3);
    res.push(`${o.name.split("/")[2]}:${r}${k ? ` (after ${k} timeouts)` : ""}`);
    if (r !== "ok") {
      const wrong = /digest|differs|missing/.test(r);
      bad ||= wrong;
      other += !wrong;
      writeFileSync(`${rdir}/inspect-${o.name.split("/")[2]}.txt`, (() => {
        try {
          return execFileSync("node", [new URL("./fleet-inspect.mjs", import.meta.url).pathname,
            `nats://127.0.0.1:${n[1].port}`, "vmt", "good", "vmtrace", o.name], { env: process.env }).toString();
        } catch (e) { return String(e.stdout || "") + String(e.stderr || e); }
      })());
    }
  }
  await nc.close();
  for (const x of n) await kill(x, "SIGKILL");
  if (bad) mism++;
  if (!res.every((x) => x.includes(":ok"))) console.log(`  kept in ${rdir}`);
  else rmSync(rdir, { recursive: true, force: true });
  console.log(`run ${run} (${mode}): after-restart write took ${tries} tries; ${res.join(" ")}` +
    (bad ? " MISMATCH" : ""));
}
console.log(`repro: ${runs} runs (${mode}), ${mism} mismatches, ${other} other read failures`);
