// The independent reader of test_fleet: the npm `nats` package's object
// store (not our code) lists the bucket or fetches one object into a file.
//   node fleet-reader.mjs SERVER USER PASS BUCKET get NAME OUT
//   node fleet-reader.mjs SERVER USER PASS BUCKET list
// NODE_PATH names the folder holding node_modules/nats (build/npm).
import { createRequire } from "module";
import { writeFileSync } from "fs";
const require = createRequire(process.env.VMT_NPM + "/");
const { connect } = require("nats");

const [server, user, pass, bucket, op, name, out] = process.argv.slice(2);
const nc = await connect({ servers: server, user, pass });
const js = nc.jetstream();
const os = await js.views.os(bucket);
if (op === "list") {
  for (const i of await os.list()) console.log(`${i.name} ${i.size}`);
} else {
  const data = await os.getBlob(name);
  if (data === null) {
    console.error(`no object ${name}`);
    process.exit(1);
  }
  const info = await os.info(name);
  writeFileSync(out, data);
  console.log(`got ${name} ${data.length} ${info.digest} guest=${info.headers.get("Vmt-Guest")}`);
}
await nc.close();
