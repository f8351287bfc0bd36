// What the bucket's stream holds for one object, read with the npm `nats`
// package (not our code), for the evidence of a digest mismatch: the meta
// (its nuid, size, chunks, digest), the stream's state and replicas, and
// every message on the object's chunk subject (sequence, size, sha-256),
// with the digest of what they add up to; then the same subject read the
// way nats.js's object store get() reads it (an ordered consumer until
// its pending is 0), each message with its pending.
//   VMT_NPM=build/npm node fleet-inspect.mjs SERVER USER PASS BUCKET NAME
import { createRequire } from "module";
import { createHash } from "crypto";
const require = createRequire(process.env.VMT_NPM + "/");
const { connect, consumerOpts, JSONCodec } = require("nats");

// base64url with its padding, as nats.js names a meta subject
const b64 = (s) => Buffer.from(s).toString("base64").replace(/\+/g, "-").replace(/\//g, "_");
const [server, user, pass, bucket, name] = process.argv.slice(2);
const nc = await connect({ servers: server, user, pass });
const jsm = await nc.jetstreamManager();
const stream = `OBJ_${bucket}`;
const ename = b64(name);
const meta = await jsm.streams.getMessage(stream, { last_by_subj: `$O.${bucket}.M.${ename}` });
const info = JSONCodec().decode(meta.data);
console.log(`meta seq ${meta.seq} nuid ${info.nuid} size ${info.size} chunks ${info.chunks} ` +
  `digest ${info.digest}`);
const subj = `$O.${bucket}.C.${info.nuid}`;
const si = await jsm.streams.info(stream, { subjects_filter: `$O.${bucket}.C.>` });
const st = si.state;
console.log(`stream msgs ${st.messages} bytes ${st.bytes} first ${st.first_seq} last ${st.last_seq} ` +
  `leader ${si.cluster?.leader} replicas ` +
  (si.cluster?.replicas || []).map((r) => `${r.name}:current=${r.current},lag=${r.lag ?? 0}`).join(" "));
console.log(`chunk subjects: ${JSON.stringify(st.subjects || {})}`);
const all = createHash("sha256");
let seq = 0, n = 0, bytes = 0;
for (;;) {
  let m;
  try {
    m = await jsm.streams.getMessage(stream, { next_by_subj: subj, seq: seq + 1 });
  } catch (e) {
    if (String(e.code) === "404") break;
    throw e;
  }
  seq = m.seq;
  n++;
  bytes += m.data.length;
  all.update(m.data);
  console.log(`  chunk seq ${m.seq} size ${m.data.length} sha256 ` +
    createHash("sha256").update(m.data).digest("hex").slice(0, 16) +
    ` time ${m.time.toISOString()}`);
}
const got = `SHA-256=${all.digest("base64url")}=`;
console.log(`on ${subj}: ${n} messages, ${bytes} bytes, digest ${got} ` +
  (got.replace(/=+$/, "") === info.digest.replace(/=+$/, "") ? "MATCHES" : "DIFFERS") + " the meta's");
// what nats.js's get() sees: an ordered consumer, read until pending is 0
const oc = consumerOpts();
oc.orderedConsumer();
const sub = await nc.jetstream().subscribe(subj, oc);
const timer = setTimeout(() => { console.log("  ordered: no pending 0 in 10 s"); sub.unsubscribe(); },
  10000);
const od = createHash("sha256");
for await (const m of sub) {
  od.update(m.data);
  console.log(`  ordered: seq ${m.info.streamSequence} size ${m.data.length} pending ${m.info.pending}`);
  if (m.info.pending === 0) break;
}
clearTimeout(timer);
console.log(`ordered read: digest SHA-256=${od.digest("base64url")}=`);
await nc.close();
